"""What every contract check of :mod:`rft.testing.checks` is built from: the one-line
failure messages (:class:`_Check`), dtype tolerances, gradients, snapshots of the inputs,
masked-position perturbations and row slices."""

from __future__ import annotations

import dataclasses
from typing import Any, NoReturn

import torch



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


def _gap(a: torch.Tensor, b: torch.Tensor, scale: float = 0.0,
         min_tol: float = 0.0) -> tuple[bool, str]:
    """Whether ``a`` and ``b`` agree to ``tol · (1 + magnitude)``, and the largest gap
    (``tol``: the looser dtype's, at least ``min_tol``)."""
    tol = max(_tol(a), _tol(b), min_tol)
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
