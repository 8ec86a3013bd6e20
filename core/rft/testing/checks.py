"""Contract checks for the functions a plugin registers: call the function the way rft
does, and assert the properties every implementation of its kind must have.

    from rft.testing.checks import check_policy_loss

    check_policy_loss(my_loss, MyLossArgs(), inputs)   # inputs: PolicyLossInputs

Each check raises :class:`AssertionError` with one line naming the check, the function
and the violated property, e.g. ``check_policy_loss(my_loss): gradient w.r.t. log_prob
is non-zero at masked positions (max |grad| 0.25)``. Use them with the strategies of
:mod:`rft.testing.strategies` under ``hypothesis.given``, which then shrinks a failure to
a small example. Where a property does not hold for a function by design, the check has
a parameter to leave it out.

Tolerances depend on the dtype: a comparison of ``a`` and ``b`` allows
``tol · (1 + magnitude)``, ``tol`` = 1e-9 for float64, 1e-4 for float32.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from rft.contracts import AdvantageInputs, AggContext, EntropyInputs, KLInputs, PolicyLossInputs

if TYPE_CHECKING:
    from rft.testing.references import PolicyLossReference

__all__ = ["assert_equals_verl", "check_advantage", "check_entropy", "check_kl",
           "check_policy_loss", "check_reward", "check_workflow"]

INVARIANCE_TOL = 1e-4
"""Relative tolerance of the advantage invariances: estimators that add an ``ε`` to a
denominator (GRPO's ``σ + ε``, whitening's ``√(σ² + 1e-8)``) are invariant only up to
``ε / σ``."""


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


class _Check:
    """Builds the one-line failure messages of one check of one function."""

    def __init__(self, check: str, fn: Any) -> None:
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        self.prefix = f"{check}({name})"

    def fail(self, prop: str, detail: str = "") -> NoReturn:
        message = f"{self.prefix}: {prop}" + (f" ({detail})" if detail else "")
        raise AssertionError(" ".join(message.split()))

    def ensure(self, condition: bool, prop: str, detail: str = "") -> None:
        if not condition:
            self.fail(prop, detail)


def _tol(tensor: torch.Tensor) -> float:
    """Relative tolerance of a comparison in ``tensor``'s dtype."""
    return {torch.float64: 1e-9, torch.float32: 1e-4}.get(tensor.dtype, 1e-2)


def _gap(a: torch.Tensor, b: torch.Tensor, scale: float = 0.0) -> tuple[bool, str]:
    """Whether ``a`` and ``b`` agree to ``tol · (1 + magnitude)``, and the largest gap."""
    tol = max(_tol(a), _tol(b))
    a, b = a.detach().to(torch.float64), b.detach().to(torch.float64)
    if a.numel() == 0:
        return True, "empty"
    gap = (a - b).abs().max().item()
    magnitude = max(a.abs().max().item(), b.abs().max().item(), scale)
    detail = (f"{a.item():.6g} vs {b.item():.6g}" if a.numel() == 1
              else f"max gap {gap:.3g}")
    return gap <= tol * (1.0 + magnitude), detail


def _finite(tensor: torch.Tensor) -> bool:
    return bool(torch.isfinite(tensor.detach()).all())


def _leaf(tensor: torch.Tensor) -> torch.Tensor:
    """A fresh copy that requires grad (so a check never touches the caller's tensors)."""
    return tensor.detach().clone().requires_grad_()


def _snapshot(obj: Any) -> dict[str, torch.Tensor]:
    return {f.name: getattr(obj, f.name).detach().clone() for f in dataclasses.fields(obj)
            if isinstance(getattr(obj, f.name), torch.Tensor)}


def _ensure_unchanged(check: _Check, obj: Any, before: dict[str, torch.Tensor]) -> None:
    for name, value in before.items():
        now = getattr(obj, name).detach()
        same = now.shape == value.shape and bool(torch.equal(now.nan_to_num(),
                                                             value.nan_to_num()))
        check.ensure(same, f"modifies inputs.{name} in place")


def _masked_out(mask: torch.Tensor) -> torch.Tensor:
    return ~mask.bool()  # (B, T)


def _perturb(tensor: torch.Tensor, where: torch.Tensor, *, log_prob: bool,
             seed: int) -> torch.Tensor:
    """``tensor`` with other values at ``where``: log-probs ``≤ 0`` or signed values."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float64).to(tensor.dtype) * 5
    noise = -noise.abs() if log_prob else noise
    return torch.where(where, noise, tensor.detach())


def _grad(output: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    """``∂output/∂leaf`` (zeros where ``output`` does not depend on ``leaf``)."""
    if not output.requires_grad:
        return torch.zeros_like(leaf)
    (grad,) = torch.autograd.grad(output, leaf, allow_unused=True, retain_graph=True)
    return torch.zeros_like(leaf) if grad is None else grad


def _split_point(rows: int, unit_size: int) -> int | None:
    """Where to cut ``rows`` into two non-empty parts made of whole units, or ``None``."""
    units = rows // unit_size
    if units < 2 or rows % unit_size:
        return None
    return unit_size * (units // 2)


def _rows(obj: Any, rows: slice, batch: int) -> Any:
    """``obj`` (a frozen inputs dataclass) restricted to ``rows``: every tensor whose first
    dimension is the batch is sliced (leaves that require grad stay leaves)."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
            part = value.detach()[rows].clone()
            changes[f.name] = part.requires_grad_() if value.requires_grad else part
    return dataclasses.replace(obj, **changes)


# --------------------------------------------------------------------------------------
# Policy losses
# --------------------------------------------------------------------------------------


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
            same, detail = _gap(ours.reshape(()), value.detach())
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


# --------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# KL estimators and entropy terms
# --------------------------------------------------------------------------------------


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


def _entropy_term(check: _Check, fn: Callable[..., Any], args: Any,
                  inputs: EntropyInputs) -> torch.Tensor:
    term = fn(inputs, args)
    check.ensure(isinstance(term, torch.Tensor) and term.dim() == 0,
                 "must return a 0-dim tensor",
                 f"got {type(term).__name__}"
                 + (f" of shape {tuple(term.shape)}" if isinstance(term, torch.Tensor) else ""))
    check.ensure(_finite(term), "the entropy term is not finite", str(term.item()))
    return term


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


# --------------------------------------------------------------------------------------
# Rewards and workflows
# --------------------------------------------------------------------------------------


def _call_reward(fn: Callable[..., Any], response: str, truth: Any, args: Any) -> Any:
    return fn(response, truth, args) if args is not None else fn(response, truth)


def check_reward(fn: Callable[..., Any], args: Any,
                 cases: Iterable[tuple[str, Any]] | tuple[str, Any]) -> list[dict[str, float]]:
    """Check a reward function ``fn(response, truth[, args]) -> {part: value}`` (called as
    rft calls it: without ``args`` when ``args`` is ``None``) on ``(response, truth)`` cases
    (one pair or an iterable of pairs).

    1. it returns a mapping of string names to numbers (not bools), each finite — the
       reward is their sum;
    2. it is deterministic: the same case gives the same parts.

    :return: the parts of each case, as floats.
    """
    check = _Check("check_reward", fn)
    if isinstance(cases, tuple) and len(cases) == 2 and isinstance(cases[0], str):
        cases = [cases]
    results: list[dict[str, float]] = []
    for response, truth in cases:
        parts = _call_reward(fn, response, truth, args)
        check.ensure(isinstance(parts, Mapping), "must return a dict {part: number}",
                     f"got {type(parts).__name__} for response {response[:40]!r}")
        clean: dict[str, float] = {}
        for key, value in parts.items():
            check.ensure(isinstance(key, str), "part names must be strings", repr(key))
            check.ensure(isinstance(value, (int, float)) and not isinstance(value, bool),
                         f"part {key!r} must be a number", f"got {value!r}")
            check.ensure(math.isfinite(value), f"part {key!r} is not finite",
                         f"{value} for response {response[:40]!r}")
            clean[key] = float(value)
        again = _call_reward(fn, response, truth, args)
        check.ensure(dict(again) == dict(parts), "not deterministic: the same case gave "
                     "different parts", f"{dict(parts)} then {dict(again)}")
        results.append(clean)
    return results


def check_workflow(workflow_cls: type, args: Any, task: Any, model: Any) -> list[Any]:
    """Run ``workflow_cls(task, model)`` once (``task.workflow_args = args``; the ``Args``
    defaults when ``args`` is ``None``) and check the experiences it returns.

    1. ``run()`` returns a non-empty list of :class:`rft.experience.Experience`;
    2. each has 1-D integer ``tokens`` with ``1 ≤ prompt_length ≤ len(tokens)``; its
       ``logprobs`` (when set) are ``(R,)`` and finite, its ``action_mask`` (when set)
       ``(R,)``, ``R`` the response length;
    3. each is scored: a finite ``reward``, or a finite ``token_level_reward`` ``(R,)``;
       its metrics are finite numbers;
    4. when ``task.greedy_baseline`` is set (ReMax), each carries a finite
       ``info["reward_baseline"]``.

    :param model: a :class:`rft.rollout.model_wrapper.ModelWrapper` (the ``rft_model``
        fixture wraps the tiny model).
    :return: the experiences.
    """
    from rft.experience import Experience

    check = _Check("check_workflow", workflow_cls)
    args_type = getattr(workflow_cls, "Args", None)
    if args is None and args_type is not None:
        args = args_type()
    task = dataclasses.replace(task, workflow_args=args)
    experiences = workflow_cls(task, model).run()
    check.ensure(isinstance(experiences, list) and len(experiences) > 0,
                 "run() must return a non-empty list of experiences",
                 f"got {type(experiences).__name__} of length "
                 f"{len(experiences) if isinstance(experiences, Sequence) else '?'}")
    for i, exp in enumerate(experiences):
        where = f"experience {i}"
        check.ensure(isinstance(exp, Experience), f"{where} is not an Experience",
                     type(exp).__name__)
        tokens = exp.tokens
        check.ensure(isinstance(tokens, torch.Tensor) and tokens.dim() == 1
                     and not tokens.is_floating_point(), f"{where}: tokens must be 1-D integers")
        check.ensure(1 <= exp.prompt_length <= tokens.shape[0],
                     f"{where}: prompt_length must be within 1 … len(tokens)",
                     f"{exp.prompt_length} of {tokens.shape[0]}")
        length = tokens.shape[0] - exp.prompt_length
        if exp.logprobs is not None:
            check.ensure(tuple(exp.logprobs.shape) == (length,),
                         f"{where}: logprobs must be (R,)", f"got {tuple(exp.logprobs.shape)}, "
                         f"R = {length}")
            check.ensure(_finite(exp.logprobs), f"{where}: logprobs are not finite")
        if exp.action_mask is not None:
            check.ensure(tuple(exp.action_mask.shape) == (length,),
                         f"{where}: action_mask must be (R,)",
                         f"got {tuple(exp.action_mask.shape)}, R = {length}")
        if exp.token_level_reward is not None:
            check.ensure(tuple(exp.token_level_reward.shape) == (length,)
                         and _finite(exp.token_level_reward),
                         f"{where}: token_level_reward must be finite and (R,)")
        else:
            check.ensure(isinstance(exp.reward, (int, float)) and math.isfinite(exp.reward),
                         f"{where} is not scored: reward must be a finite number",
                         f"got {exp.reward!r}")
        for key, value in exp.metrics.items():
            check.ensure(isinstance(value, (int, float)) and math.isfinite(value),
                         f"{where}: metric {key!r} must be a finite number", repr(value))
        if task.greedy_baseline:
            baseline = exp.info.get("reward_baseline")
            check.ensure(isinstance(baseline, (int, float)) and math.isfinite(baseline),
                         f"{where}: task.greedy_baseline is set but info['reward_baseline'] "
                         "is missing (call self.attach_greedy_baseline)", repr(baseline))
    return experiences


# --------------------------------------------------------------------------------------
# veRL
# --------------------------------------------------------------------------------------


def _verl_core_algos() -> Any:
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        import pytest

        pytest.skip(f"veRL is not installed (pip install \"rft-framework[verl]\"; "
                    f"import verl.trainer.ppo.core_algos failed: {exc})")
    return core_algos


def _verl_index(index: Any) -> Any:
    """Group ids as veRL wants them: an object array of hashable labels."""
    import numpy as np

    labels = index.tolist() if isinstance(index, torch.Tensor) else list(index)
    return np.array([str(label) for label in labels], dtype=object)


def _verl_actor_config(agg: AggContext, config: Any) -> Any:
    """veRL's actor config: ``config`` as given, or an ``ActorConfig`` built from a dict
    (veRL's names: ``clip_ratio``, ``clip_ratio_low`` …) with ``agg``'s global counts."""
    if config is not None and not isinstance(config, Mapping):
        return config
    from verl.workers.config import ActorConfig

    info = {key: value for key, value in agg.kwargs().items() if value is not None}
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                       **{"global_batch_info": info, **dict(config or {})})


def _compare_verl(check: _Check, label: str, ours: torch.Tensor, theirs: Any) -> None:
    from rft.testing.algorithms import TOL

    theirs = torch.as_tensor(theirs, dtype=torch.float64)
    ours = ours.detach().to(torch.float64)
    check.ensure(ours.shape == theirs.shape, f"{label}: shape differs from veRL's",
                 f"{tuple(ours.shape)} vs {tuple(theirs.shape)}")
    close = torch.isclose(ours, theirs, atol=TOL["atol"], rtol=TOL["rtol"])
    worst = (ours - theirs).abs().max().item() if ours.numel() else 0.0
    check.ensure(bool(close.all()), f"{label} differs from veRL's", f"max gap {worst:.3g}")


def assert_equals_verl(fn: Callable[..., Any], args: Any, verl_fn_name: str, inputs: Any,
                       **verl_kwargs: Any) -> None:
    """``fn(inputs, args)`` equals veRL 0.9.1's ``verl_fn_name`` on the same tensors, to
    :data:`rft.testing.algorithms.TOL` (float64). Skips the test when veRL is not
    installed.

    ``verl_fn_name`` is a function of ``verl.trainer.ppo.core_algos``
    (``compute_grpo_outcome_advantage``), a name of veRL's policy-loss registry
    (``vanilla``, ``gspo``) or, for KL inputs, a ``kl_penalty`` name (``low_var_kl``).
    The tensors of ``inputs`` fill the veRL function's parameters of the same name
    (``token_level_rewards``, ``response_mask``, ``index``, ``values``,
    ``reward_baselines``, ``old_log_prob``, ``log_prob``, ``advantages``, ``logprob``,
    ``ref_logprob``, ``loss_agg_mode``); ``verl_kwargs`` give the rest
    (``epsilon=…``, ``gamma=…``, ``config=…``). For a policy loss ``config`` may be a
    dict of veRL actor settings (``{"clip_ratio": 0.2}``): it becomes an ``ActorConfig``
    carrying ``inputs.agg``'s global counts.

    Compared: policy loss — the aggregated loss (veRL's NaN on an all-empty mask is
    rft's 0), its gradient w.r.t. ``log_prob``, and each metric both report
    (``actor/<name>``); advantage — ``(advantages, returns)``, and a ``ValueError`` from
    veRL must be one from ``fn`` too; KL — the values and the gradients w.r.t. both
    log-probs.
    """
    core_algos = _verl_core_algos()
    check = _Check(f"assert_equals_verl[{verl_fn_name}]", fn)
    if isinstance(inputs, PolicyLossInputs):
        _verl_policy_loss(check, core_algos, fn, args, verl_fn_name, inputs, verl_kwargs)
    elif isinstance(inputs, AdvantageInputs):
        _verl_advantage(check, core_algos, fn, args, verl_fn_name, inputs, verl_kwargs)
    elif isinstance(inputs, KLInputs):
        _verl_kl(check, core_algos, fn, args, verl_fn_name, inputs)
    else:
        raise TypeError(f"assert_equals_verl: inputs must be PolicyLossInputs, "
                        f"AdvantageInputs or KLInputs, got {type(inputs).__name__}")


def _verl_policy_loss(check: _Check, core_algos: Any, fn: Callable[..., Any], args: Any,
                      name: str, inputs: PolicyLossInputs, verl_kwargs: dict[str, Any]) -> None:
    verl_fn = (getattr(core_algos, name) if hasattr(core_algos, name)
               else core_algos.get_policy_loss_fn(name))
    log_prob = _leaf(inputs.log_prob)
    ours_inputs = dataclasses.replace(inputs, log_prob=log_prob)
    ours, metrics, _ = _aggregated(check, fn, args, ours_inputs)
    kwargs = dict(verl_kwargs)
    config = _verl_actor_config(inputs.agg, kwargs.pop("config", None))
    theirs, their_metrics = verl_fn(
        old_log_prob=inputs.old_log_prob.detach().clone(), log_prob=log_prob,
        advantages=inputs.advantages.detach().clone(),
        response_mask=inputs.response_mask.detach().clone(), loss_agg_mode=inputs.agg.mode,
        config=config, **kwargs)
    for key, value in metrics.items():
        their_key = key if key in their_metrics else f"actor/{key}"
        if their_key in their_metrics:
            _compare_verl(check, f"metric {key!r}", torch.as_tensor(float(value)),
                          float(their_metrics[their_key]))
    if torch.isnan(theirs):
        check.ensure(bool(inputs.response_mask.sum() == 0) and ours.item() == 0.0,
                     "veRL's loss is NaN but the mask is not empty or ours is not 0")
        return
    _compare_verl(check, "loss", ours, theirs.detach())
    _compare_verl(check, "gradient w.r.t. log_prob", _grad(ours, log_prob), _grad(theirs, log_prob))


def _verl_advantage(check: _Check, core_algos: Any, fn: Callable[..., Any], args: Any,
                    name: str, inputs: AdvantageInputs, verl_kwargs: dict[str, Any]) -> None:
    verl_fn = (getattr(core_algos, name) if hasattr(core_algos, name)
               else core_algos.get_adv_estimator_fn(name))
    available: dict[str, Any] = {
        "token_level_rewards": inputs.token_level_rewards, "response_mask": inputs.response_mask,
        "index": _verl_index(inputs.index), "values": inputs.values,
        "reward_baselines": inputs.reward_baselines}
    parameters = inspect.signature(verl_fn).parameters
    kwargs = {key: (value.detach().clone() if isinstance(value, torch.Tensor) else value)
              for key, value in available.items() if key in parameters and value is not None}
    kwargs.update(verl_kwargs)
    try:
        theirs = verl_fn(**kwargs)
    except ValueError as exc:
        try:
            fn(inputs, args)
        except ValueError:
            return
        check.fail("veRL raises ValueError on this batch but the function does not", str(exc))
    ours = _advantages(check, fn, args, inputs)
    for label, a, b in zip(("advantages", "returns"), ours, theirs, strict=True):
        _compare_verl(check, label, a, b)


def _verl_kl(check: _Check, core_algos: Any, fn: Callable[..., Any], args: Any, name: str,
             inputs: KLInputs) -> None:
    log_prob, ref = _leaf(inputs.log_prob), _leaf(inputs.ref_log_prob)
    ours = fn(KLInputs(log_prob, ref), args)
    if hasattr(core_algos, name):
        theirs = getattr(core_algos, name)(log_prob, ref)
    else:
        theirs = core_algos.kl_penalty(log_prob, ref, name)
    _compare_verl(check, "kl", ours, theirs.detach())
    weights = torch.Generator().manual_seed(0)
    w = torch.randn(ours.shape, generator=weights, dtype=torch.float64).to(ours.dtype)
    for label, leaf in (("log_prob", log_prob), ("ref_log_prob", ref)):
        _compare_verl(check, f"gradient w.r.t. {label}", _grad((ours * w).sum(), leaf),
                      _grad((theirs * w).sum(), leaf))
