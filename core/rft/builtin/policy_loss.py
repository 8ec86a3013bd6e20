"""PPO's clipped surrogate policy loss (with dual clip) and the clipped value loss.

Equal to veRL 0.9.1's ``compute_policy_loss_vanilla`` (``policy_loss.loss_mode=vanilla``)
and ``compute_value_loss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft.hookspecs import hookimpl
from rft.ops import agg_loss, clip_by_value, masked_mean

LOG_RATIO_CLAMP = 20.0
"""``log_ratio`` is clamped to ``±20`` before ``exp`` (veRL's guard against overflow)."""


@dataclass
class PPOArgs:
    """Arguments of the ``ppo`` policy loss (``algorithm.policy_loss_fn_args``)."""

    clip_range: float = 0.2
    """Symmetric clip range ``ε`` of the importance ratio (veRL ``clip_ratio``)."""
    clip_range_low: float | None = None
    """Lower clip range: the ratio is clipped below at ``1 − clip_range_low``; ``None``:
    ``clip_range`` (veRL ``clip_ratio_low``)."""
    clip_range_high: float | None = None
    """Upper clip range: the ratio is clipped above at ``1 + clip_range_high``; ``None``:
    ``clip_range`` (veRL ``clip_ratio_high``; DAPO's clip-higher uses 0.28)."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound ``c > 1``: for negative advantages the loss is at most ``−c·A``
    (https://arxiv.org/abs/1912.09729)."""


def ppo_policy_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float = 3.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dual-clip PPO surrogate, per token.

    With ``log_ratio = clamp(log π − log π_old, ±20)``, ``ratio = exp(log_ratio)``,
    ``ε_l = clip_range_low``, ``ε_h = clip_range_high``::

        clipped = max(−A·ratio, −A·clip(ratio, 1 − ε_l, 1 + ε_h))
        pg_loss = min(clipped, −A·c)   if A < 0   (dual clip)
                  clipped              otherwise

    :return: ``pg_loss`` ``(B, T)`` (aggregate it with :func:`rft.ops.agg_loss`) and the
        metrics, detached scalar tensors: ``pg_clipfrac`` (fraction of masked tokens where
        the clipped term is larger), ``pg_clipfrac_lower`` (where the dual clip binds),
        ``ppo_kl`` (masked mean of ``−log_ratio``).
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be greater than 1.0, got {clip_ratio_c}")
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high

    log_ratio = torch.clamp(per_token_logps - old_per_token_logps,
                            min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)

    neg_advantages = -advantages  # (B, T)
    unclipped = neg_advantages * ratio  # (B, T)
    clipped = neg_advantages * torch.clamp(ratio, 1 - low, 1 + high)  # (B, T)
    pessimistic = torch.maximum(unclipped, clipped)  # (B, T)
    dual_bound = neg_advantages * clip_ratio_c  # (B, T)
    negative = advantages < 0  # (B, T)
    pg_loss = torch.where(negative, torch.min(dual_bound, pessimistic), pessimistic)  # (B, T)

    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean(torch.gt(clipped, unclipped).to(pg_loss.dtype), mask),
            "pg_clipfrac_lower": masked_mean(
                (torch.gt(pessimistic, dual_bound) & negative).to(pg_loss.dtype), mask),
            "ppo_kl": masked_mean(-log_ratio, mask),
        }
    return pg_loss, metrics


ppo_policy_loss.Args = PPOArgs  # type: ignore[attr-defined]


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    **agg_kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss (veRL ``compute_value_loss``).

    ``values_clipped = clip(values, old_values − ε_v, old_values + ε_v)``::

        vf_loss = ½ · agg_loss(max((values − R)², (values_clipped − R)²), mask)

    ``values`` are the critic's new predictions, ``old_values`` those at rollout time,
    ``returns`` the targets ``R``, all ``(B, T)``; ``agg_kwargs`` go to
    :func:`rft.ops.agg_loss`.

    :return: ``vf_loss`` (scalar) and ``vf_clipfrac``, the detached fraction of masked
        tokens where the clipped error is the larger.
    """
    values_clipped = clip_by_value(values, old_values - cliprange_value,
                                   old_values + cliprange_value)  # (B, T)
    unclipped_error = (values - returns) ** 2  # (B, T)
    clipped_error = (values_clipped - returns) ** 2  # (B, T)
    vf_loss = 0.5 * agg_loss(torch.max(unclipped_error, clipped_error), mask, loss_agg_mode,
                             **agg_kwargs)
    with torch.no_grad():
        vf_clipfrac = masked_mean(torch.gt(clipped_error, unclipped_error).to(vf_loss.dtype), mask)
    return vf_loss, vf_clipfrac


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"ppo": ppo_policy_loss}
