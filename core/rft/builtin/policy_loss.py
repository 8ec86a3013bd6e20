"""PPO's clipped surrogate policy loss (with dual clip) and the clipped value loss.

Equal to veRL 0.9.1's ``compute_policy_loss_vanilla`` (``policy_loss.loss_mode=vanilla``)
and ``compute_value_loss``. The ``ppo`` policy loss follows
:class:`rft.contracts.PolicyLossFn`; the value loss is the trainer's own (not a plugin
kind).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from rft.contracts import PolicyLossInputs
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


def _tie_split(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Share of the gradient ``max(first, second)`` passes to ``first``: 1, ½ at a tie, 0
    (PyTorch's rule for ``maximum`` / ``minimum``, which veRL's autograd follows)."""
    return torch.where(first > second, 1.0, torch.where(first == second, 0.5, 0.0))


class _ClippedSurrogate(torch.autograd.Function):
    """The dual-clip surrogate in one forward and a one-multiply backward.

    Forward computes the loss and ``∂pg_loss/∂log π`` per token (saved); backward scales
    it by the incoming gradient. Same values and gradients as autograd through veRL's
    chain of ``exp``/``clamp``/``maximum``/``min``/``where``, ties split as PyTorch does.
    Also returns (not differentiable) where the clipped term wins, where the dual clip
    binds, and the clamped log-ratio, for the metrics.
    """

    @staticmethod
    def forward(ctx: Any, log_prob: torch.Tensor, old_log_prob: torch.Tensor,
                advantages: torch.Tensor, low: float, high: float, clip_ratio_c: float
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        raw = log_prob - old_log_prob  # (B, T)
        log_ratio = raw.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
        ratio = torch.exp(log_ratio)  # (B, T)
        unclipped = -advantages * ratio  # (B, T)
        clipped = -advantages * ratio.clamp(1 - low, 1 + high)  # (B, T)
        pessimistic = torch.maximum(unclipped, clipped)  # (B, T)
        dual_bound = -advantages * clip_ratio_c  # (B, T)
        negative = advantages < 0  # (B, T)
        pg_loss = torch.where(negative, torch.minimum(dual_bound, pessimistic), pessimistic)
        # ∂pg/∂logπ: ratio passes the ±20 clamp inside its bounds (inclusive); the clipped
        # branch passes where 1−ε_l ≤ ratio ≤ 1+ε_h; maximum / min split ties in halves.
        d_unclipped = torch.where((raw >= -LOG_RATIO_CLAMP) & (raw <= LOG_RATIO_CLAMP),
                                  unclipped, 0.0)  # (B, T)
        inside = (ratio >= 1 - low) & (ratio <= 1 + high)  # (B, T)
        d_pessimistic = d_unclipped * (_tie_split(unclipped, clipped)
                                       + inside * _tie_split(clipped, unclipped))
        grad = torch.where(negative, d_pessimistic * _tie_split(dual_bound, pessimistic),
                           d_pessimistic)  # (B, T)
        ctx.save_for_backward(grad)
        clipped_wins = clipped > unclipped
        dual_binds = (pessimistic > dual_bound) & negative
        ctx.mark_non_differentiable(clipped_wins, dual_binds, log_ratio)
        return pg_loss, clipped_wins, dual_binds, log_ratio

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor, *unused: Any) -> tuple[Any, ...]:
        (grad,) = ctx.saved_tensors
        return grad_loss * grad, None, None, None, None, None


def ppo_policy_loss(inputs: PolicyLossInputs, args: PPOArgs
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dual-clip PPO surrogate, per token.

    With ``log_ratio = clamp(log_prob − old_log_prob, ±20)``, ``ratio = exp(log_ratio)``,
    ``A`` the advantages, ``ε_l = clip_range_low``, ``ε_h = clip_range_high``,
    ``c = clip_ratio_c``::

        clipped = max(−A·ratio, −A·clip(ratio, 1 − ε_l, 1 + ε_h))
        pg_loss = min(clipped, −A·c)   if A < 0   (dual clip)
                  clipped              otherwise

    :return: ``pg_loss`` ``(B, T)`` (the trainer aggregates it with ``inputs.agg``) and the
        metrics, detached scalar tensors: ``pg_clipfrac`` (fraction of masked tokens where
        the clipped term is larger), ``pg_clipfrac_lower`` (where the dual clip binds),
        ``ppo_kl`` (masked mean of ``−log_ratio``).
    """
    if args.clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be greater than 1.0, got {args.clip_ratio_c}")
    low = args.clip_range if args.clip_range_low is None else args.clip_range_low
    high = args.clip_range if args.clip_range_high is None else args.clip_range_high
    mask = inputs.response_mask  # (B, T)

    pg_loss, clipped_wins, dual_binds, log_ratio = _ClippedSurrogate.apply(
        inputs.log_prob, inputs.old_log_prob, inputs.advantages, low, high, args.clip_ratio_c)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean(clipped_wins.to(pg_loss.dtype), mask),
            "pg_clipfrac_lower": masked_mean(dual_binds.to(pg_loss.dtype), mask),
            "ppo_kl": masked_mean(-log_ratio, mask),
        }
    return pg_loss, metrics


# Args on a function: the dataclass of its *_args (rft.hookspecs)
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
