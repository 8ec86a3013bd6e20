"""The contract check of an advantage function: :func:`check_advantage` (re-exported by
:mod:`rft.testing.checks`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from rft.contracts import AdvantageInputs

from rft.testing.check_base import _Check, _ensure_unchanged, _finite, _leaf, _masked_out, _snapshot


INVARIANCE_TOL = 1e-4
"""Relative tolerance of the advantage invariances: estimators that add an ``ε`` to a
denominator (GRPO's ``σ + ε``, whitening's ``√(σ² + 1e-8)``) are invariant only up to
``ε / σ``."""

def _advantages(check: _Check, fn: Callable[..., Any], args: Any, inputs: AdvantageInputs
                ) -> tuple[torch.Tensor, torch.Tensor]:
    result = fn(inputs, args)
    check.ensure(isinstance(result, tuple) and len(result) == 2,
                 "must return a tuple (advantages, returns)", f"got {type(result).__name__}")
    shape = tuple(inputs.token_level_rewards.shape)
    for label, tensor in zip(("advantages", "returns"), result, strict=True):
        check.ensure(isinstance(tensor, torch.Tensor), f"{label} must be a tensor",
                     f"got {type(tensor).__name__}")
        check.ensure(tuple(tensor.shape) == shape, f"{label} must be (B, T)",
                     f"got {tuple(tensor.shape)}, (B, T) = {shape}")
        check.ensure(_finite(tensor), f"{label} are not finite")
    return result


def _group_rows(index: Any) -> list[list[int]]:
    """Rows of each group of ``index`` (any accepted form)."""
    labels = index.tolist() if isinstance(index, torch.Tensor) else list(index)
    groups: dict[Any, list[int]] = {}
    for row, label in enumerate(labels):
        groups.setdefault(label, []).append(row)
    return list(groups.values())


def _last_token(mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` each row's last masked position, ``T − 1`` for an empty row."""
    rows, width = mask.shape
    positions = torch.arange(width, device=mask.device).expand(rows, width)  # (B, T)
    last = torch.where(mask.bool(), positions, -1).max(dim=-1).values  # (B,)
    return torch.where(last < 0, width - 1, last)


def check_advantage(fn: Callable[..., Any], args: Any, inputs: AdvantageInputs, *,
                    shift_invariant: bool = False, scale_invariant: bool = False,
                    zero_at_masked: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Check an advantage function ``fn(inputs, args) -> (advantages, returns)``.

    1. both are tensors of shape ``(B, T)``, finite;
    2. without gradient: even when ``values`` (a critic's output) require grad, neither
       output does;
    3. ``zero_at_masked``: both are ``0`` where ``response_mask == 0`` (pass ``False`` for
       estimators that, like veRL's GAE or ReMax, leave values on padding or holes);
    4. ``shift_invariant``: adding a constant ``c_g`` to the reward ``r_i`` of every row of
       each group ``g`` of two or more rows (on the row's last response token) leaves the
       advantages unchanged — ``A(r + c_g) = A(r)``;
    5. ``scale_invariant``: ``A(s · r) = A(r)`` for ``s = 3`` (all rewards scaled) on the
       rows of groups of two or more rows (GRPO-like estimators give a singleton a fixed
       baseline, ``μ = 0, σ = 1``, so its advantage scales);
    6. it does not modify its inputs in place.

    Invariances are compared to :data:`INVARIANCE_TOL`.

    :return: ``(advantages, returns)`` of the call on ``inputs``.
    """
    check = _Check("check_advantage", fn)
    graded = dataclasses.replace(inputs, token_level_rewards=inputs.token_level_rewards.detach(),
                                 values=None if inputs.values is None else _leaf(inputs.values))
    before = _snapshot(graded)
    advantages, returns = _advantages(check, fn, args, graded)
    _ensure_unchanged(check, graded, before)
    for label, tensor in (("advantages", advantages), ("returns", returns)):
        check.ensure(not tensor.requires_grad, f"{label} must carry no gradient "
                     "(compute them under torch.no_grad())")
    if zero_at_masked:
        masked = _masked_out(inputs.response_mask)
        for label, tensor in (("advantages", advantages), ("returns", returns)):
            leak = tensor.detach()[masked].abs().max().item() if masked.any() else 0.0
            check.ensure(leak == 0.0, f"{label} are non-zero at masked positions",
                         f"max |value| {leak:.3g}")
    rewards = inputs.token_level_rewards  # (B, T)
    if shift_invariant:
        shift = torch.zeros(rewards.shape[0], dtype=rewards.dtype)  # (B,)
        gen = torch.Generator().manual_seed(0)
        for rows in _group_rows(inputs.index):
            if len(rows) > 1:
                shift[rows] = torch.randn((), generator=gen, dtype=torch.float64).item() * 3
        shifted = rewards.detach().clone()
        shifted[torch.arange(rewards.shape[0]), _last_token(inputs.response_mask)] += shift
        other, _ = _advantages(check, fn, args, dataclasses.replace(inputs,
                                                                    token_level_rewards=shifted))
        _ensure_invariant(check, other, advantages,
                          "adding a constant to the rewards of a group changes its advantages")
    if scale_invariant:
        grouped = [row for rows in _group_rows(inputs.index) if len(rows) > 1 for row in rows]
        scaled = rewards.detach() * 3.0
        other, _ = _advantages(check, fn, args, dataclasses.replace(inputs,
                                                                    token_level_rewards=scaled))
        _ensure_invariant(check, other[grouped], advantages[grouped],
                          "scaling every reward by 3 changes the advantages of a group")
    return advantages, returns


def _ensure_invariant(check: _Check, other: torch.Tensor, reference: torch.Tensor,
                      prop: str) -> None:
    gap = (other.detach() - reference.detach()).abs()
    bound = INVARIANCE_TOL * (1 + reference.detach().abs())
    worst = (gap - bound).max().item() if gap.numel() else 0.0
    check.ensure(worst <= 0, prop, f"max gap {gap.max().item() if gap.numel() else 0:.3g}")
