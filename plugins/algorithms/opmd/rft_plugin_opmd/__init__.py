"""rft-plugin-opmd: online policy mirror descent, as in Trinity-RFT's ``opmd``.

Registered names: algorithm ``opmd``; advantage fn ``opmd``; policy loss fn ``opmd``.

OPMD (Kuba et al., "Mirror Learning"; Trinity-RFT, https://arxiv.org/abs/2505.17826)
regresses the log-policy onto a group-baselined reward: the update direction is
``∇ −Σ_t A_i · log π(y_it)`` scaled by ``1 / (1 + τ)``, where ``τ`` is the strength of the
KL regulariser towards the current policy. The ratio to the rollout policy is not used,
so the loss works on off-policy data as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import AdvantageInputs, PolicyLossInputs
from rft.group_ops import (group_counts, group_ids, group_stats, num_groups, outcome_scores,
                           segment_max, segment_sum)
from rft.ops import masked_mean

__all__ = ["OPMDAdvantageArgs", "OPMDLossArgs", "PRESET", "opmd_advantages",
           "opmd_policy_loss"]


@dataclass
class OPMDAdvantageArgs:
    """Arguments of the ``opmd`` advantage (``algorithm.advantage_fn_args``)."""

    opmd_baseline: Literal["mean", "logavgexp"] = "mean"
    """Group baseline: the mean reward, or the soft maximum ``τ · log mean exp(r / τ)``."""
    tau: float = 1.0
    """Temperature ``τ`` of the ``logavgexp`` baseline (ignored by ``mean``); ``τ → 0``
    tends to the group maximum, ``τ → ∞`` to the mean."""


def opmd_advantages(inputs: AdvantageInputs, args: OPMDAdvantageArgs
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """OPMD advantage: outcome reward minus a group baseline.

    With ``r_i = Σ_t token_level_rewards_it`` and ``g`` the group of sample ``i``
    (``n = |g|``)::

        b_g = mean_{j∈g} r_j                                   (opmd_baseline = "mean")
        b_g = τ · (logsumexp_{j∈g}(r_j / τ) − log n)           (opmd_baseline = "logavgexp")
        A_it = (r_i − b_g) · mask_it

    A singleton group has ``b = 0``. ``returns`` is the same tensor. Note that the
    ``mean`` baseline equals Dr.GRPO's advantage (no division by the std).
    """
    opmd_baseline, tau = args.opmd_baseline, args.tau
    if opmd_baseline not in ("mean", "logavgexp"):
        raise ValueError(f"opmd_baseline must be 'mean' or 'logavgexp', got {opmd_baseline!r}")
    if opmd_baseline == "logavgexp" and tau <= 0:
        raise ValueError(f"tau must be > 0 for the logavgexp baseline, got {tau}")
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        ids = group_ids(inputs.index, scores.device)
        if opmd_baseline == "mean":
            counts, baseline, _ = group_stats(scores, ids)  # (B,)
        else:
            groups = num_groups(ids)
            scaled = scores / tau  # (B,)
            peak = segment_max(scaled, ids, groups)  # (G,)
            sums = segment_sum(torch.exp(scaled - peak[ids]), ids, groups)  # (G,)
            counts = group_counts(ids, scores.dtype)  # (B,)
            baseline = tau * (peak[ids] + torch.log(sums[ids]) - torch.log(counts))  # (B,)
        baseline = torch.where(counts > 1, baseline, torch.zeros_like(baseline))
        advantages = (scores - baseline).unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


opmd_advantages.Args = OPMDAdvantageArgs  # type: ignore[attr-defined]


@dataclass
class OPMDLossArgs:
    """Arguments of the ``opmd`` policy loss (``algorithm.policy_loss_fn_args``)."""

    tau: float = 1.0
    """Strength ``τ ≥ 0`` of the mirror-descent regulariser; the loss is scaled by
    ``1 / (1 + τ)``."""


def opmd_policy_loss(inputs: PolicyLossInputs, args: OPMDLossArgs
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """OPMD surrogate per token: ``pg_loss_it = −A_it · log π(y_it) / (1 + τ)``.

    ``old_log_prob`` does not enter the loss (no importance ratio). Aggregated with the
    trainer's ``loss_agg_mode`` (``token-mean``: Trinity-RFT's ``masked_mean``).

    :return: ``pg_loss`` ``(B, T)`` and ``ppo_kl`` (masked mean of
        ``old − new`` log-probs, to watch how far the policy moved), detached.
    """
    if args.tau < 0:
        raise ValueError(f"tau must be >= 0, got {args.tau}")
    pg_loss = -inputs.advantages * inputs.log_prob / (1.0 + args.tau)  # (B, T)
    with torch.no_grad():
        metrics = {"ppo_kl": masked_mean(inputs.old_log_prob - inputs.log_prob,
                                         inputs.response_mask)}
    return pg_loss, metrics


opmd_policy_loss.Args = OPMDLossArgs  # type: ignore[attr-defined]

PRESET = rl_preset("opmd", policy_loss_fn="opmd")
"""OPMD: group-baselined rewards, OPMD surrogate, k2 KL loss (Trinity-RFT's defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"opmd": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"opmd": opmd_advantages}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"opmd": opmd_policy_loss}
