"""The contract check of a policy loss: :func:`check_policy_loss` (re-exported by
:mod:`rft.testing.checks`), and the entropy term it adds."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from rft.contracts import AggContext, EntropyInputs, PolicyLossInputs

from rft.testing.check_base import (
    _Check, _ensure_unchanged, _finite, _gap, _grad, _leaf, _masked_out, _perturb, _rows,
    _snapshot, _split_point, _tol,
)

if TYPE_CHECKING:
    from rft.testing.references import PolicyLossReference

METRIC_TOL = 1e-6
"""Relative tolerance of a reported metric against the reference's (veRL's means divide by
``Σ m + 1e-8``, a gap of up to 1e-8 relative on few tokens)."""


def _aggregated(check: _Check, fn: Callable[..., Any], args: Any, inputs: PolicyLossInputs
                ) -> tuple[torch.Tensor, dict[str, Any], torch.Tensor]:
    """Call ``fn`` and check its return value: ``(aggregated loss, metrics, pg_loss)``."""
    result = fn(inputs, args)
    check.ensure(isinstance(result, tuple) and len(result) == 2,
                 "must return a tuple (pg_loss, metrics)", f"got {type(result).__name__}")
    pg_loss, metrics = result
    check.ensure(isinstance(pg_loss, torch.Tensor), "pg_loss must be a tensor",
                 f"got {type(pg_loss).__name__}")
    shape = tuple(inputs.response_mask.shape)
    check.ensure(pg_loss.dim() == 0 or tuple(pg_loss.shape) == shape,
                 "pg_loss must be per token (B, T) or 0-dim",
                 f"got shape {tuple(pg_loss.shape)}, (B, T) = {shape}")
    check.ensure(_finite(pg_loss), "pg_loss is not finite",
                 f"{int((~torch.isfinite(pg_loss.detach())).sum())} non-finite values")
    check.ensure(isinstance(metrics, Mapping), "metrics must be a dict",
                 f"got {type(metrics).__name__}")
    for key, value in metrics.items():
        check.ensure(isinstance(key, str), "metric names must be strings", repr(key))
        scalar = (isinstance(value, torch.Tensor) and value.dim() == 0) or (
            isinstance(value, (int, float)) and not isinstance(value, bool))
        dims = f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else ""
        check.ensure(scalar, f"metric {key!r} must be a 0-dim tensor or a number",
                     f"got {type(value).__name__}{dims}")
        check.ensure(math.isfinite(float(value)), f"metric {key!r} is not finite",
                     str(float(value)))
    loss = pg_loss if pg_loss.dim() == 0 else inputs.agg(pg_loss, inputs.response_mask)
    return loss, dict(metrics), pg_loss


def check_policy_loss(fn: Callable[..., Any], args: Any, inputs: PolicyLossInputs, *,
                      zero_advantage_zero_loss: bool = True, unit_size: int = 1,
                      reference: PolicyLossReference | None = None
                      ) -> tuple[torch.Tensor, dict[str, Any]]:
    """Check a policy loss ``fn(inputs, args) -> (pg_loss, metrics)`` on one micro-batch.

    With ``ℓ = agg(pg_loss)`` for a per-token loss (``inputs.agg``), ``ℓ = pg_loss`` for a
    0-dim one, and ``M`` the masked-out positions (``response_mask == 0``):

    1. it returns ``(pg_loss, metrics)``; ``pg_loss`` is ``(B, T)`` or 0-dim and finite;
       each metric is a 0-dim tensor or a number, finite;
    2. ``∂ℓ/∂log_prob`` is finite and ``0`` on ``M``;
    3. changing ``log_prob``, ``old_log_prob``, ``advantages`` or ``ref_log_prob`` on ``M``
       leaves ``ℓ`` unchanged;
    4. ``zero_advantage_zero_loss``: with ``advantages = 0``, ``ℓ = 0`` and
       ``∂ℓ/∂log_prob = 0`` (a pure policy-gradient loss; pass ``False`` for a loss with
       terms that do not depend on the advantages, e.g. SFT's NLL);
    5. micro-batches add up: with the whole batch's counts
       ``agg* = AggContext.for_mini_batch(response_mask, mode)``, ``ℓ(batch; agg*) =
       ℓ(rows[:k]; agg*) + ℓ(rows[k:]; agg*)`` and the gradients agree, ``k`` a multiple
       of ``unit_size`` (2 for DPO's pairs);
    6. it does not modify its inputs in place.

    With ``reference`` (a family of :mod:`rft.testing.references`, e.g.
    ``ClippedSurrogate(clip_range=0.2)``), its maths too, without veRL:

    7. ``∂ℓ/∂log_prob = 0`` where the reference is flat (the clip region);
    8. ``∂ℓ/∂log_prob`` has the sign of ``−A`` where the reference's active term is the
       unclipped ``−A·ratio`` (gradient descent raises the log-prob of a token with a
       positive advantage, lowers it for a negative one);
    9. ``pg_loss`` equals the reference per token on the mask (a per-token loss), ``ℓ``
       equals the reference aggregated as the trainer does
       (:func:`rft.testing.references.aggregate`, every ``loss_agg_mode``), and so does
       ``∂ℓ/∂log_prob``;
    10. each metric it reports under a name the reference defines (``pg_clipfrac``,
        ``pg_clipfrac_lower``, ``ppo_kl``: veRL's definitions) equals the reference's.

    :return: ``(pg_loss, metrics)`` of the call on ``inputs`` (``log_prob`` replaced by a
        fresh leaf with the same values).
    """
    check = _Check("check_policy_loss", fn)
    mask = inputs.response_mask  # (B, T)
    base = dataclasses.replace(inputs, log_prob=_leaf(inputs.log_prob))
    before = _snapshot(base)
    loss, metrics, pg_loss = _aggregated(check, fn, args, base)
    _ensure_unchanged(check, base, before)
    check.ensure(loss.requires_grad, "the loss does not depend on log_prob (no gradient)")
    grad = _grad(loss, base.log_prob)  # (B, T)
    check.ensure(_finite(grad), "gradient w.r.t. log_prob is not finite")
    masked = _masked_out(mask)  # (B, T)
    leak = grad[masked].abs().max().item() if masked.any() else 0.0
    check.ensure(leak == 0.0, "gradient w.r.t. log_prob is non-zero at masked positions",
                 f"max |grad| {leak:.3g}")

    if masked.any():
        fields = [("log_prob", True), ("old_log_prob", True), ("advantages", False)]
        if inputs.ref_log_prob is not None:
            fields.append(("ref_log_prob", True))
        for seed, (field, is_log_prob) in enumerate(fields):
            changed = _perturb(getattr(base, field), masked, log_prob=is_log_prob, seed=seed)
            if field == "log_prob":
                changed.requires_grad_()
            changes: dict[str, Any] = {field: changed}
            other, _, _ = _aggregated(check, fn, args, dataclasses.replace(base, **changes))
            same, detail = _gap(other, loss)
            check.ensure(same, f"changing {field} at masked positions changes the loss", detail)

    if zero_advantage_zero_loss:
        zero = dataclasses.replace(base, log_prob=_leaf(inputs.log_prob),
                                   advantages=torch.zeros_like(inputs.advantages))
        zero_loss, _, _ = _aggregated(check, fn, args, zero)
        check.ensure(abs(zero_loss.item()) <= _tol(zero_loss),
                     "zero advantages must give a zero loss", f"loss {zero_loss.item():.6g}")
        zero_grad = _grad(zero_loss, zero.log_prob).abs().max().item()
        check.ensure(zero_grad <= _tol(zero_loss), "zero advantages must give a zero gradient",
                     f"max |grad| {zero_grad:.3g}")

    _check_parts_add_up(check, fn, args, inputs, unit_size)
    if reference is not None:
        _check_reference(check, reference, base, loss, grad, pg_loss, metrics)
    return pg_loss, metrics


def _check_reference(check: _Check, reference: PolicyLossReference, inputs: PolicyLossInputs,
                     loss: torch.Tensor, grad: torch.Tensor, pg_loss: torch.Tensor,
                     metrics: dict[str, Any]) -> None:
    """Properties 7-10 of :func:`check_policy_loss`: ``loss`` and ``grad`` (``(B, T)``)
    are the function's on ``inputs``."""
    from rft.testing.references import aggregate

    name = reference.describe()
    mask = inputs.response_mask.bool()  # (B, T)
    regions = reference.regions(inputs)
    advantages = inputs.advantages.detach()  # (B, T)
    ratio = torch.exp(inputs.log_prob.detach() - inputs.old_log_prob)  # (B, T)
    tol = _tol(grad)

    def example(where: torch.Tensor) -> str:
        i = tuple(where.nonzero()[0].tolist())
        return (f"{int(where.sum())} tokens, e.g. A={advantages[i].item():.4g}, "
                f"ratio={ratio[i].item():.4g}, grad={grad[i].item():.4g}")

    scale = grad.abs().max().item() if grad.numel() else 0.0
    flat = regions.flat & mask
    moving_in_flat = flat & (grad.abs() > tol * (1.0 + scale))
    check.ensure(not bool(moving_in_flat.any()),
                 f"gradient w.r.t. log_prob is non-zero in the clip region, where the "
                 f"{name} is flat", example(moving_in_flat) if moving_in_flat.any() else "")
    moving = regions.moving & mask & (advantages != 0)
    wrong_way = moving & ~(grad * -advantages > 0)
    check.ensure(not bool(wrong_way.any()),
                 f"gradient w.r.t. log_prob does not oppose the advantage where the {name} "
                 f"is the unclipped −A·ratio (descent must raise the log-prob of a token "
                 f"with A > 0)", example(wrong_way) if wrong_way.any() else "")

    leaf = _leaf(inputs.log_prob)
    theirs = reference.pg_loss(dataclasses.replace(inputs, log_prob=leaf))  # (B, T)
    if pg_loss.dim() == 2:
        same, detail = _gap(torch.where(mask, pg_loss.detach(), 0.0),
                            torch.where(mask, theirs.detach(), 0.0))
        check.ensure(same, f"pg_loss differs from the {name} per token", detail)
    their_loss = aggregate(theirs, inputs.response_mask, inputs.agg)
    same, detail = _gap(loss, their_loss)
    check.ensure(same, f"the loss differs from the {name} ({inputs.agg.mode})", detail)
    same, detail = _gap(grad, _grad(their_loss, leaf))
    check.ensure(same, f"gradient w.r.t. log_prob differs from the {name}'s "
                       f"({inputs.agg.mode})", detail)
    for key, value in reference.metrics(inputs).items():
        if key in metrics:
            ours = metrics[key]
            ours = (ours.detach() if isinstance(ours, torch.Tensor)
                    else torch.tensor(float(ours), dtype=torch.float64))  # its own dtype's tol
            # veRL's metrics divide by Σ m + 1e-8: a loss that divides by Σ m (or clamps it
            # at 1) differs by up to 1e-8 relative, which says nothing about the loss
            same, detail = _gap(ours.reshape(()), value.detach(), min_tol=METRIC_TOL)
            check.ensure(same, f"metric {key!r} differs from the {name}'s (veRL's "
                               f"definition)", detail)


def _check_parts_add_up(check: _Check, fn: Callable[..., Any], args: Any,
                        inputs: PolicyLossInputs | EntropyInputs, unit_size: int) -> None:
    """Property 5 of :func:`check_policy_loss` (and of :func:`check_entropy`)."""
    rows = inputs.response_mask.shape[0]
    cut = _split_point(rows, unit_size)
    if cut is None:
        return
    agg = AggContext.for_mini_batch(inputs.response_mask, inputs.agg.mode,
                                    inputs.agg.loss_scale_factor)
    whole = dataclasses.replace(inputs, agg=agg)
    leaf_name = "log_prob" if isinstance(inputs, PolicyLossInputs) else "entropy"
    leaf: dict[str, Any] = {leaf_name: _leaf(getattr(inputs, leaf_name))}
    whole = dataclasses.replace(whole, **leaf)
    total, total_grad = _loss_and_grad(check, fn, args, whole, leaf_name)
    losses, grads = [], []
    for part_rows in (slice(0, cut), slice(cut, rows)):
        part = _rows(whole, part_rows, rows)
        part_loss, part_grad = _loss_and_grad(check, fn, args, part, leaf_name)
        losses.append(part_loss)
        grads.append(part_grad)
    summed = losses[0] + losses[1]
    scale = sum(abs(x.item()) for x in losses)
    same, detail = _gap(summed, total, scale)
    one, many = ("loss", "losses") if leaf_name == "log_prob" else ("term", "terms")
    check.ensure(same, f"micro-batch {many} do not add up to the mini-batch {one} "
                       f"(rows [:{cut}] + [{cut}:] with the whole batch's counts, "
                       f"{agg.mode})", detail)
    same, detail = _gap(torch.cat(grads), total_grad)
    check.ensure(same, f"micro-batch gradients do not add up to the mini-batch gradient "
                       f"(rows [:{cut}] + [{cut}:], {agg.mode})", detail)


def _loss_and_grad(check: _Check, fn: Callable[..., Any], args: Any, inputs: Any,
                   leaf_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(inputs, PolicyLossInputs):
        loss, _, _ = _aggregated(check, fn, args, inputs)
    else:
        loss = _entropy_term(check, fn, args, inputs)
    return loss.detach(), _grad(loss, getattr(inputs, leaf_name))




def _entropy_term(check: _Check, fn: Callable[..., Any], args: Any,
                  inputs: EntropyInputs) -> torch.Tensor:
    term = fn(inputs, args)
    check.ensure(isinstance(term, torch.Tensor) and term.dim() == 0,
                 "must return a 0-dim tensor",
                 f"got {type(term).__name__}"
                 + (f" of shape {tuple(term.shape)}" if isinstance(term, torch.Tensor) else ""))
    check.ensure(_finite(term), "the entropy term is not finite", str(term.item()))
    return term
