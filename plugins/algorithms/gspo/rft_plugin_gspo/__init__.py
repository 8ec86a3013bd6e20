"""rft-plugin-gspo: Group Sequence Policy Optimization (https://arxiv.org/abs/2507.18071).

Registered names: algorithm ``gspo``; policy loss fn ``gspo`` (equal to veRL 0.9.1's
``compute_policy_loss_gspo``). Advantages are GRPO's (``grpo`` from rft-plugin-grpo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.contracts import PolicyLossInputs
from rft.ops import masked_mean

__all__ = ["GSPOArgs", "PRESET", "gspo_policy_loss"]

LOG_RATIO_MAX = 10.0
"""The sequence log-ratio is clamped above at 10 before ``exp`` (veRL)."""


@dataclass
class GSPOArgs:
    """Arguments of the ``gspo`` policy loss (``algorithm.policy_loss_fn_args``)."""

    clip_range: float = 0.2
    """Symmetric clip range, used where ``clip_range_low`` / ``clip_range_high`` are unset."""
    clip_range_low: float | None = 3e-4
    """Lower clip range of the sequence ratio (GSPO paper: 3e-4)."""
    clip_range_high: float | None = 4e-4
    """Upper clip range of the sequence ratio (GSPO paper: 4e-4)."""


def gspo_policy_loss(inputs: PolicyLossInputs, args: GSPOArgs
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO's clipped surrogate with a sequence-level importance ratio, per token.

    ``log s_i = Σ_t mask_it (log π_it − log π_old,it) / max(|y_i|, 1)`` is the mean
    log-ratio of sequence ``i``; each token carries it with the token's own gradient::

        log s_it = sg(log s_i) + log π_it − sg(log π_it),   clamped above at 10
        pg_loss_it = max(−A_it · s_it, −A_it · clip(s_it, 1 − ε_l, 1 + ε_h))

    (``sg`` = stop-gradient). Aggregate with the trainer's ``loss_agg_mode`` (the paper
    uses ``seq-mean-token-mean``; veRL and this default to ``token-mean``).

    :return: ``pg_loss`` ``(B, T)`` and detached metrics ``pg_clipfrac``, ``ppo_kl``
        (token-level, as veRL) and ``pg_clipfrac_lower`` (always 0: no dual clip).
    """
    low = args.clip_range if args.clip_range_low is None else args.clip_range_low
    high = args.clip_range if args.clip_range_high is None else args.clip_range_high
    log_prob, advantages, mask = inputs.log_prob, inputs.advantages, inputs.response_mask
    log_ratio = log_prob - inputs.old_log_prob  # (B, T)
    lengths = mask.sum(dim=-1).clamp(min=1)  # (B,)
    seq_log_ratio = (log_ratio * mask).sum(dim=-1) / lengths  # (B,)
    token_log_ratio = (log_prob - log_prob.detach()
                       + seq_log_ratio.detach().unsqueeze(-1))  # (B, T)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=LOG_RATIO_MAX))  # (B, T)
    unclipped = -advantages * ratio  # (B, T)
    clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)  # (B, T)
    pg_loss = torch.maximum(unclipped, clipped)  # (B, T)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean(torch.gt(clipped, unclipped).to(pg_loss.dtype), mask),
            "ppo_kl": masked_mean(-log_ratio, mask),
            "pg_clipfrac_lower": pg_loss.new_zeros(()),
        }
    return pg_loss, metrics


gspo_policy_loss.Args = GSPOArgs  # type: ignore[attr-defined]

PRESET = AlgorithmPreset(
    advantage_fn="grpo",
    policy_loss_fn="gspo",
    kl_loss_fn="none",
    kl_penalty_fn="none",
    entropy_loss_fn="none",
    sample_strategy="default",
    repeat_times=2,
    min_repeat_times=2,
)
"""GSPO: GRPO advantages, sequence-ratio clipped surrogate, no KL, no entropy (the paper's
and veRL's GSPO recipe)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"gspo": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"gspo": gspo_policy_loss}
