"""The contract checks of KL estimators and entropy losses: :func:`check_kl` and
:func:`check_entropy` (re-exported by :mod:`rft.testing.checks`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from rft.contracts import EntropyInputs, KLInputs

from rft.testing.check_base import (
    _Check, _ensure_unchanged, _finite, _gap, _grad, _leaf, _masked_out, _perturb, _snapshot,
)
from rft.testing.check_policy_loss import _check_parts_add_up, _entropy_term


def check_kl(fn: Callable[..., Any], args: Any, inputs: KLInputs, *,
             zero_when_equal: bool = True, nonnegative: bool = False) -> torch.Tensor:
    """Check a KL estimator ``fn(inputs, args) -> kl``.

    1. ``kl`` is a tensor of shape ``(B, T)``, finite;
    2. ``∂Σkl/∂log_prob`` is finite;
    3. ``zero_when_equal``: ``kl = 0`` wherever ``log_prob == ref_log_prob`` (every
       estimator of ``KL(π ‖ π_ref)`` from the log-ratio);
    4. ``nonnegative``: ``kl ≥ 0`` everywhere (``abs``, ``k2``, ``k3``; not ``k1``);
    5. it does not modify its inputs in place.

    :return: ``kl`` of the call on ``inputs``.
    """
    check = _Check("check_kl", fn)
    graded = dataclasses.replace(inputs, log_prob=_leaf(inputs.log_prob))
    before = _snapshot(graded)
    kl = fn(graded, args)
    _ensure_unchanged(check, graded, before)
    shape = tuple(inputs.log_prob.shape)
    check.ensure(isinstance(kl, torch.Tensor), "must return a tensor", f"got {type(kl).__name__}")
    check.ensure(tuple(kl.shape) == shape, "kl must be per token (B, T)",
                 f"got {tuple(kl.shape)}, (B, T) = {shape}")
    check.ensure(_finite(kl), "kl is not finite")
    grad = _grad(kl.sum(), graded.log_prob)
    check.ensure(_finite(grad), "gradient w.r.t. log_prob is not finite")
    if zero_when_equal:
        equal = inputs.log_prob.detach() == inputs.ref_log_prob.detach()  # (B, T)
        worst = kl.detach()[equal].abs().max().item() if equal.any() else 0.0
        check.ensure(worst == 0.0, "kl must be 0 where log_prob == ref_log_prob",
                     f"max |kl| {worst:.3g}")
    if nonnegative:
        lowest = kl.detach().min().item() if kl.numel() else 0.0
        check.ensure(lowest >= 0.0, "kl must be non-negative", f"min {lowest:.3g}")
    return kl



def check_entropy(fn: Callable[..., Any], args: Any, inputs: EntropyInputs) -> torch.Tensor:
    """Check an entropy loss ``fn(inputs, args) -> term`` (0-dim, subtracted from the loss).

    1. ``term`` is a 0-dim tensor, finite; ``∂term/∂entropy`` is finite;
    2. masked positions have no effect: ``∂term/∂entropy = 0`` there, and changing
       ``entropy`` there leaves ``term`` unchanged;
    3. micro-batches add up with the whole batch's counts (as for
       :func:`check_policy_loss`);
    4. it does not modify its inputs in place.

    :return: ``term`` of the call on ``inputs``.
    """
    check = _Check("check_entropy", fn)
    graded = dataclasses.replace(inputs, entropy=_leaf(inputs.entropy))
    before = _snapshot(graded)
    term = _entropy_term(check, fn, args, graded)
    _ensure_unchanged(check, graded, before)
    grad = _grad(term, graded.entropy)  # (B, T)
    check.ensure(_finite(grad), "gradient w.r.t. entropy is not finite")
    masked = _masked_out(inputs.response_mask)
    if masked.any():
        leak = grad[masked].abs().max().item()
        check.ensure(leak == 0.0, "gradient w.r.t. entropy is non-zero at masked positions",
                     f"max |grad| {leak:.3g}")
        changed = _perturb(inputs.entropy, masked, log_prob=True, seed=0).abs()
        other = _entropy_term(check, fn, args, dataclasses.replace(inputs, entropy=changed))
        same, detail = _gap(other, term)
        check.ensure(same, "changing entropy at masked positions changes the term", detail)
    _check_parts_add_up(check, fn, args, inputs, 1)
    return term
