"""rft-plugin-cispo: Clipped IS-weight Policy Optimization (MiniMax-M1,
https://arxiv.org/abs/2506.13585), as Trinity-RFT's ``cispo``.

Registered names: algorithm ``cispo``; policy loss fn ``cispo`` (equal to veRL 0.9.1's
``compute_policy_loss_cispo`` when ``enable_mask_clip`` is off). Advantages are GRPO's
(``grpo`` from rft-plugin-grpo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import PolicyLossInputs
from rft.ops import masked_mean

__all__ = ["CISPOArgs", "PRESET", "cispo_policy_loss"]

LOG_RATIO_CLAMP = 20.0
"""``log π − log π_old`` is clamped to ``±20`` before ``exp`` (as veRL does)."""


@dataclass
class CISPOArgs:
    """Arguments of the ``cispo`` policy loss (``algorithm.policy_loss_fn_args``)."""

    clip_range_low: float = 1.0
    """The IS weight is clipped below at ``1 − clip_range_low`` (1.0: no lower bound, the
    paper's setting)."""
    clip_range_high: float = 0.28
    """The IS weight is clipped above at ``1 + clip_range_high`` (the paper tunes only
    this one)."""
    enable_mask_clip: bool = False
    """Also drop tokens whose update would push the ratio further out of the mask range:
    ``ratio > 1 + mask_clip_range_high`` with ``A > 0``, ``ratio < 1 − mask_clip_range_low``
    with ``A < 0`` (the paper's PPO-like token mask)."""
    mask_clip_range_low: float = 1.0
    """Lower range of the token mask (with ``enable_mask_clip``)."""
    mask_clip_range_high: float = 0.28
    """Upper range of the token mask (with ``enable_mask_clip``)."""


def cispo_policy_loss(inputs: PolicyLossInputs, args: CISPOArgs
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO's surrogate per token: a REINFORCE term weighted by the clipped, detached
    importance ratio, so every token keeps a gradient (none is clipped away as in PPO).

    With ``r = exp(clamp(log π − log π_old, ±20))``, ``w = sg(clip(r, 1 − ε_l, 1 + ε_h))``
    and ``M`` the optional token mask (1 unless ``enable_mask_clip``)::

        pg_loss_t = −w_t · M_t · A_t · log π_t          (∂/∂log π_t = −w_t · M_t · A_t)

    Aggregated with the trainer's ``loss_agg_mode`` (Trinity-RFT's and veRL's default:
    ``token-mean``).

    :return: ``pg_loss`` ``(B, T)`` and detached metrics: ``pg_clipfrac`` (tokens whose
        weight was clipped), ``ppo_kl`` (masked mean of ``log π_old − log π``),
        ``pg_clipfrac_lower`` (always 0, as veRL) and ``unmasked_frac`` (share of tokens
        the mask keeps; 1 without ``enable_mask_clip``).
    """
    log_prob, advantages, mask = inputs.log_prob, inputs.advantages, inputs.response_mask
    log_ratio = torch.clamp(log_prob - inputs.old_log_prob,
                            -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).detach()  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    weight = torch.clamp(ratio, 1.0 - args.clip_range_low, 1.0 + args.clip_range_high)  # (B, T)
    keep = torch.ones_like(ratio)  # (B, T)
    if args.enable_mask_clip:
        too_high = (ratio > 1.0 + args.mask_clip_range_high) & (advantages > 0)
        too_low = (ratio < 1.0 - args.mask_clip_range_low) & (advantages < 0)
        keep = (~(too_high | too_low)).to(ratio.dtype)
    pg_loss = -advantages * weight * keep * log_prob  # (B, T)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean((ratio != weight).to(ratio.dtype), mask),
            "ppo_kl": masked_mean(-log_ratio, mask),
            "pg_clipfrac_lower": ratio.new_zeros(()),
            "unmasked_frac": masked_mean(keep, mask),
        }
    return pg_loss, metrics


cispo_policy_loss.Args = CISPOArgs  # type: ignore[attr-defined]

PRESET = rl_preset("grpo", policy_loss_fn="cispo")
"""CISPO: GRPO advantages, the ``cispo`` surrogate, k2 KL loss against a reference model,
the ``default`` entropy term, 2 rollouts per task (Trinity-RFT's defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"cispo": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"cispo": cispo_policy_loss}
