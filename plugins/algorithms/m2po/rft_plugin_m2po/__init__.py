"""rft-plugin-m2po: Second-Moment Trust Policy Optimization (Trinity-RFT's ``m2po``).

M2PO (https://openreview.net/forum?id=IIgl5MWelz) trains on stale rollouts with an
unclipped importance-weighted policy gradient, and keeps it stable by masking the tokens
that would push the policy furthest: among the tokens where PPO's clip would be active
(``A > 0, ratio > 1`` or ``A < 0, ratio < 1``), the largest squared log-ratios are
dropped until the mean second moment ``M2`` of those left is at most ``τ``.

Registered names: algorithm ``m2po``; policy loss fn ``m2po``. Advantages are GRPO's
(``grpo`` from rft-plugin-grpo).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import PolicyLossInputs
from rft.ops import masked_mean

__all__ = ["M2POArgs", "PRESET", "m2po_mask", "m2po_policy_loss"]


@dataclass
class M2POArgs:
    """Arguments of the ``m2po`` policy loss (``algorithm.policy_loss_fn_args``)."""

    m2_threshold: float = 0.04
    """``τ``: upper bound on the mean squared log-ratio of the trust-region tokens that
    are kept (the paper's 0.04)."""
    log_ratio_clip: float = 20.0
    """The log-ratio's value is clamped to ``±log_ratio_clip`` before ``exp`` (its
    gradient passes unclamped, straight through)."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.m2_threshold) or self.m2_threshold < 0:
            raise ValueError(f"m2_threshold must be finite and >= 0, got {self.m2_threshold}")
        if not math.isfinite(self.log_ratio_clip) or self.log_ratio_clip <= 0:
            raise ValueError(f"log_ratio_clip must be finite and > 0, got {self.log_ratio_clip}")


def m2po_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor, advantages: torch.Tensor,
              m2_threshold: float) -> tuple[torch.Tensor, dict[str, float]]:
    """M2PO's token mask (the paper's Algorithm 1), without gradient.

    Trust-region tokens: ``mask_it = 1`` and (``A_it > 0, δ_it > 0`` or ``A_it < 0,
    δ_it < 0``), ``δ = log π − log π_old``. With their squared log-ratios ``δ²`` sorted
    ascending, the ``k`` smallest are kept for the largest ``k`` whose mean is ``≤ τ``
    (all of them when ``M2 = mean δ² ≤ τ``); the others are dropped. Tokens outside the
    trust region are always kept; masked-out tokens never are.

    :param log_ratio: ``(B, T)`` ``log π − log π_old``.
    :param response_mask: ``(B, T)`` 1 on the tokens that count.
    :param advantages: ``(B, T)``.
    :param m2_threshold: ``τ``.
    :return: ``keep`` ``(B, T)`` bool, and ``m2_before`` / ``m2_after`` (mean ``δ²`` of the
        trust-region tokens before / after masking), ``masked_fraction`` and
        ``trust_region_fraction`` (shares of the counted tokens).
    """
    with torch.no_grad():
        valid = response_mask.bool()  # (B, T)
        delta = log_ratio.detach()  # (B, T)
        adv = advantages.detach()  # (B, T)
        trust = valid & (((adv > 0) & (delta > 0)) | ((adv < 0) & (delta < 0)))  # (B, T)
        flat_trust = torch.nonzero(trust.reshape(-1)).squeeze(-1)  # (N,)
        moments = delta.reshape(-1)[flat_trust].to(torch.float64).square()  # (N,)
        keep = valid.clone()  # (B, T)
        count = int(moments.numel())
        m2_before = moments.mean().item() if count else 0.0
        dropped = 0
        if count and m2_before > m2_threshold:
            ordered, order = torch.sort(moments, stable=True)  # (N,)
            prefix_means = ordered.cumsum(0) / torch.arange(1, count + 1, dtype=ordered.dtype)
            kept = int((prefix_means <= m2_threshold).sum().item())
            keep.view(-1)[flat_trust[order[kept:]]] = False
            dropped = count - kept
            m2_after = ordered[:kept].mean().item() if kept else 0.0
        else:
            m2_after = m2_before
        valid_count = int(valid.sum().item())
    metrics = {
        "m2_before": m2_before,
        "m2_after": m2_after,
        "masked_fraction": dropped / valid_count if valid_count else 0.0,
        "trust_region_fraction": count / valid_count if valid_count else 0.0,
    }
    return keep, metrics


def m2po_policy_loss(inputs: PolicyLossInputs, args: M2POArgs
                     ) -> tuple[torch.Tensor, dict[str, Any]]:
    """M2PO's masked importance-weighted policy gradient, per token.

    With ``δ = log π − log π_old``, ``ρ = exp(clamp(δ, ±c))`` (value clamped, gradient
    straight through) and ``keep`` from :func:`m2po_mask` over this micro-batch::

        pg_loss_it = −A_it · ρ_it   where keep_it,   0 elsewhere

    No ratio clipping: the mask is the trust region. The trainer aggregates it with
    ``loss_agg_mode`` over all counted tokens (``token-mean``: the paper's footnote 2,
    dropped tokens stay in the denominator).

    The mask is chosen over the tokens this call sees: over the whole mini-batch (the
    paper) when a micro-batch is the mini-batch (``trainer.use_dynamic_bsz: false`` and no
    ``ppo_micro_batch_size_per_gpu``); with smaller micro-batches each picks its own
    (as Trinity-RFT's first ``m2po`` did; its later one takes a mask precomputed over the
    mini-batch, which rft's policy-loss contract cannot pass yet).

    :return: ``pg_loss`` ``(B, T)`` and detached metrics ``ppo_kl`` (masked mean of
        ``−δ``, clamped), ``ratio/mean`` and ``m2po/{m2_before, m2_after,
        masked_fraction, trust_region_fraction}``.
    """
    mask = inputs.response_mask  # (B, T)
    log_ratio = inputs.log_prob - inputs.old_log_prob  # (B, T)
    keep, m2 = m2po_mask(log_ratio, mask, inputs.advantages, args.m2_threshold)  # (B, T)
    clamped = log_ratio.clamp(-args.log_ratio_clip, args.log_ratio_clip)  # (B, T)
    stable = log_ratio + (clamped - log_ratio).detach()  # (B, T) value clamped, grad 1
    ratio = torch.exp(stable)  # (B, T)
    pg_loss = torch.where(keep, -inputs.advantages * ratio, torch.zeros_like(ratio))  # (B, T)
    with torch.no_grad():
        metrics: dict[str, Any] = {
            "ppo_kl": masked_mean(-stable.detach(), mask),
            "ratio/mean": masked_mean(ratio.detach(), mask),
            **{f"m2po/{name}": value for name, value in m2.items()},
        }
    return pg_loss, metrics


m2po_policy_loss.Args = M2POArgs  # type: ignore[attr-defined]

PRESET = rl_preset("grpo", policy_loss_fn="m2po", kl_loss_fn="none", use_reference=False,
                   repeat_times=8)
"""M2PO: GRPO advantages, the M2PO loss, no KL, the default entropy term, 8 rollouts per
task (Trinity-RFT's ``m2po`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"m2po": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"m2po": m2po_policy_loss}
