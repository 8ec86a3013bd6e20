"""rft-plugin-rec: Trinity-RFT's ``rec`` family — REINFORCE with optional token clipping,
importance or advantage weighting and a regulariser ("Group-relative REINFORCE is
secretly an off-policy algorithm", Yao et al., 2025, https://arxiv.org/abs/2509.24203).

Registered names: algorithm ``rec``; advantage fn ``rec`` (group mean baseline, optional
std normalisation and balancing of negatives); policy loss fn ``rec``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import AdvantageInputs, PolicyLossInputs
from rft.group_ops import group_ids, num_groups, outcome_scores, segment_sum
from rft.ops import masked_mean

__all__ = ["PRESET", "RECAdvantageArgs", "RECLossArgs", "rec_advantages", "rec_policy_loss"]


# --------------------------------------------------------------------------------------
# Advantage
# --------------------------------------------------------------------------------------


@dataclass
class RECAdvantageArgs:
    """Arguments of the ``rec`` advantage (``algorithm.advantage_fn_args``)."""

    epsilon: float = 1e-6
    """Added to the group std before dividing (with ``std_normalize``)."""
    std_normalize: bool = False
    """Divide by the group's (population) reward std."""
    drop: Literal["balance"] | None = None
    """``balance``: in a group with more below-mean than at-or-above-mean rollouts, drop
    (advantage 0) randomly chosen below-mean ones until the two counts are equal; the
    baseline is then taken over the kept rollouts. ``None``: keep all."""
    seed: int = 0
    """Seed of the choice of dropped rollouts (``drop: balance``); rft's addition, so that
    the same batch gives the same advantages."""


def _balanced_keep(scores: torch.Tensor, ids: torch.Tensor, groups: int,
                   seed: int) -> torch.Tensor:
    """``(B,)`` bool: rollouts kept by ``drop: balance``."""
    keep = torch.ones_like(scores, dtype=torch.bool)  # (B,)
    counts = torch.bincount(ids, minlength=groups)  # (G,)
    mean = (segment_sum(scores, ids, groups) / counts.clamp_min(1))[ids]  # (B,)
    negative = scores < mean  # (B,)
    gen = torch.Generator().manual_seed(seed)
    for g in range(groups):
        members = (ids == g).nonzero(as_tuple=True)[0]  # (n,)
        if members.numel() < 2:
            continue
        neg = members[negative[members]]
        extra = neg.numel() - (members.numel() - neg.numel())
        if extra > 0:
            keep[neg[torch.randperm(neg.numel(), generator=gen)[:extra]]] = False
    return keep


def rec_advantages(inputs: AdvantageInputs, args: RECAdvantageArgs
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """REC's group baseline.

    With ``r_i = Σ_t token_level_rewards_it`` and ``K_g`` the kept rollouts of group
    ``g`` (all of them unless ``drop: balance``)::

        μ_g, σ_g = mean and population std of r over K_g    (|K_g| ≥ 2)
        μ_g, σ_g = 0, 1                                        (|K_g| ≤ 1, e.g. a singleton)
        A_i = r_i − μ_g, or (r_i − μ_g) / (σ_g + ε) with std_normalize;  0 if i ∉ K_g
        A_it = A_i · mask_it

    ``returns`` is the same tensor.
    """
    if args.drop not in (None, "balance"):
        raise ValueError(f"rec: drop must be 'balance' or null, got {args.drop!r}")
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        ids = group_ids(inputs.index, scores.device)
        groups = num_groups(ids)
        keep = (_balanced_keep(scores, ids, groups, args.seed) if args.drop == "balance"
                else torch.ones_like(scores, dtype=torch.bool))  # (B,)
        kept = keep.to(scores.dtype)  # (B,)
        n = segment_sum(kept, ids, groups)  # (G,)
        mean = segment_sum(scores * kept, ids, groups) / n.clamp_min(1)  # (G,)
        centred = (scores - mean[ids]) * kept  # (B,)
        std = torch.sqrt(segment_sum(centred * centred, ids, groups) / n.clamp_min(1))  # (G,)
        several = n >= 2  # (G,)
        mean = torch.where(several, mean, torch.zeros_like(mean))
        std = torch.where(several, std, torch.ones_like(std))
        scalars = scores - mean[ids]  # (B,)
        if args.std_normalize:
            scalars = scalars / (std[ids] + args.epsilon)
        scalars = scalars * kept
        advantages = scalars.unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


rec_advantages.Args = RECAdvantageArgs  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------
# Policy loss
# --------------------------------------------------------------------------------------

ClipMode = Literal["none", "one-side", "gspo-one-side", "two-side", "ring"]
Weight = Literal["none", "importance_sampling", "gspo_importance_sampling", "advantage"]
Regularizer = Literal["none", "k2", "forward-kl"]


@dataclass
class RECLossArgs:
    """Arguments of the ``rec`` policy loss (``algorithm.policy_loss_fn_args``)."""

    epsilon_low: float = 0.2
    """``ε_low`` of the clipping range ``[1 − ε_low, 1 + ε_high]`` (``0 < ε_low ≤ 1``)."""
    epsilon_high: float = 0.2
    """``ε_high`` of the clipping range (``> 0``)."""
    epsilon_low_prime: float = 0.6
    """``ε'_low`` of ``ring`` clipping (``0 < ε'_low ≤ 1``)."""
    epsilon_high_prime: float = 2.0
    """``ε'_high`` of ``ring`` clipping (``> 0``)."""
    clip_mode: ClipMode = "none"
    """Which tokens get a gradient (``none``: all); see :func:`rec_policy_loss`."""
    weight: Weight = "none"
    """How the advantage is weighted (``none``: not at all)."""
    regularizer: Regularizer = "none"
    """A regulariser added per token (``none``, ``k2``, ``forward-kl``)."""
    regularizer_coef: float = 0.0
    """Its coefficient ``τ ≥ 0``."""
    temp: float = 1.0
    """Temperature ``T > 0`` of the ``advantage`` weight."""


def _check(args: RECLossArgs) -> None:
    problems = []
    if not 0.0 < args.epsilon_low <= 1.0:
        problems.append(f"epsilon_low must be in (0, 1], got {args.epsilon_low}")
    if not args.epsilon_high > 0.0:
        problems.append(f"epsilon_high must be > 0, got {args.epsilon_high}")
    if not 0.0 < args.epsilon_low_prime <= 1.0:
        problems.append(f"epsilon_low_prime must be in (0, 1], got {args.epsilon_low_prime}")
    if not args.epsilon_high_prime > 0.0:
        problems.append(f"epsilon_high_prime must be > 0, got {args.epsilon_high_prime}")
    if args.clip_mode not in get_args(ClipMode):
        problems.append(f"clip_mode must be one of {get_args(ClipMode)}, got {args.clip_mode!r}")
    if args.weight not in get_args(Weight):
        problems.append(f"weight must be one of {get_args(Weight)}, got {args.weight!r}")
    if args.regularizer not in get_args(Regularizer):
        problems.append(f"regularizer must be one of {get_args(Regularizer)}, "
                        f"got {args.regularizer!r}")
    if not args.regularizer_coef >= 0.0:
        problems.append(f"regularizer_coef must be >= 0, got {args.regularizer_coef}")
    if not args.temp > 0.0:
        problems.append(f"temp must be > 0, got {args.temp}")
    if problems:
        raise ValueError("rec: " + "; ".join(problems))


def rec_policy_loss(inputs: PolicyLossInputs, args: RECLossArgs
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """REC's REINFORCE loss per token.

    With ``r_t = sg(exp(log π_t − log π_old,t))`` the token ratio and
    ``s = sg(exp(masked mean_t (log π_t − log π_old,t)))`` the sequence's (GSPO's
    length-normalised) ratio, the tokens in range ``I_t`` are, by ``clip_mode``:

    - ``none``: all;
    - ``two-side``: ``1 − ε_l ≤ r_t ≤ 1 + ε_h``;
    - ``one-side``: ``r_t ≤ 1 + ε_h`` where ``A_t ≥ 0``, or ``r_t ≥ 1 − ε_l`` where ``A_t ≤ 0``;
    - ``gspo-one-side``: the same with ``s`` for ``r_t``;
    - ``ring``: ``two-side``, or ``r_t ≤ 1 − ε'_l`` where ``A_t ≥ 0``, or
      ``r_t ≥ 1 + ε'_h`` where ``A_t ≤ 0``.

    The weighted advantage ``Ã_t`` is ``A_t``, ``A_t·r_t`` (``importance_sampling``),
    ``A_t·s`` (``gspo_importance_sampling``) or ``A_t·exp(A_t / T)`` (``advantage``), and::

        pg_loss_t = −Ã_t · log π_t · I_t  [ − τ · log π_t  (forward-kl) ]
                                          [ + τ · (log π_t − log π_old,t)²  (k2) ]

    aggregated with the trainer's ``loss_agg_mode`` (Trinity-RFT: ``token-mean``), except
    ``gspo-one-side``, which always uses ``seq-mean-token-mean`` (with the trainer's
    mini-batch counts) and returns the aggregated 0-dim loss, as Trinity-RFT does.

    :return: ``pg_loss`` ``(B, T)`` (0-dim for ``gspo-one-side``) and the detached metric
        ``pg_clipfrac`` (share of masked tokens out of range).
    """
    _check(args)
    log_prob, advantages, mask = inputs.log_prob, inputs.advantages, inputs.response_mask
    log_ratio = log_prob - inputs.old_log_prob  # (B, T)
    with torch.no_grad():
        ratio = torch.exp(log_ratio)  # (B, T)
        seq_ratio = torch.exp(masked_mean(log_ratio, mask, dim=-1)).unsqueeze(-1)  # (B, 1)
        low, high = 1.0 - args.epsilon_low, 1.0 + args.epsilon_high
        up, down = advantages >= 0, advantages <= 0  # (B, T)
        if args.clip_mode == "two-side":
            in_range = (ratio >= low) & (ratio <= high)
        elif args.clip_mode == "one-side":
            in_range = ((ratio <= high) & up) | ((ratio >= low) & down)
        elif args.clip_mode == "gspo-one-side":
            in_range = ((seq_ratio <= high) & up) | ((seq_ratio >= low) & down)
        elif args.clip_mode == "ring":
            in_range = (((ratio >= low) & (ratio <= high))
                        | (up & (ratio <= 1.0 - args.epsilon_low_prime))
                        | (down & (ratio >= 1.0 + args.epsilon_high_prime)))
        else:
            in_range = torch.ones_like(ratio, dtype=torch.bool)
        if args.weight == "importance_sampling":
            weighted = advantages * ratio
        elif args.weight == "gspo_importance_sampling":
            weighted = advantages * seq_ratio
        elif args.weight == "advantage":
            weighted = advantages * torch.exp(advantages / args.temp)
        else:
            weighted = advantages
        weighted = weighted * in_range.to(weighted.dtype)  # (B, T)
    pg_loss = -weighted * log_prob  # (B, T)
    if args.regularizer == "forward-kl":
        pg_loss = pg_loss - args.regularizer_coef * log_prob
    elif args.regularizer == "k2":
        pg_loss = pg_loss + args.regularizer_coef * log_ratio.square()
    with torch.no_grad():
        metrics = {"pg_clipfrac": masked_mean((~in_range).to(mask.dtype), mask)}
    if args.clip_mode == "gspo-one-side":
        seq_agg = dataclasses.replace(inputs.agg, mode="seq-mean-token-mean")
        return seq_agg(pg_loss, mask), metrics
    return pg_loss, metrics


rec_policy_loss.Args = RECLossArgs  # type: ignore[attr-defined]

PRESET = rl_preset("rec", policy_loss_fn="rec")
"""REC: group-baselined advantages, the ``rec`` loss, k2 KL loss against a reference
model, the ``default`` entropy term, 2 rollouts per task (Trinity-RFT's defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"rec": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"rec": rec_advantages}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"rec": rec_policy_loss}
