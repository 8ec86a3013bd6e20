"""KL estimators between the policy and the reference model, per token.

Each estimator follows :class:`rft.contracts.KLFn`: ``fn(inputs, args)`` maps
``inputs.log_prob`` (policy) and ``inputs.ref_log_prob`` (reference), both ``(B, T)``, to a
per-token estimate of ``KL(π ‖ π_ref)``, ``(B, T)``, with
``log_ratio = log_prob − ref_log_prob`` (J. Schulman, "Approximating KL divergence", 2020):

====================  ==================================================================
``none``              ``0``
``k1`` / ``kl``       ``log_ratio``
``abs``               ``|log_ratio|``
``k2`` / ``mse``      ``½ · log_ratio²``
``k3`` / ``low_var_kl``  ``clamp(exp(−r) + r − 1, −10, 10)``, ``r = clamp(log_ratio, −20, 20)``
``<name>+``           value of ``<name>``, gradient of ``k2`` (straight-through)
====================  ==================================================================

The names and values are veRL 0.9.1's ``kl_penalty``. The coefficient (``args.kl_coef``)
is applied by the caller: ``kl_loss = kl_coef · agg_loss(kl, mask)`` for
``algorithm.kl_loss_fn`` and ``rewards − kl_coef · kl`` for ``algorithm.kl_penalty_fn``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from rft.contracts import KLFn, KLInputs
from rft.hookspecs import hookimpl


@dataclass
class KLArgs:
    """Arguments of every KL estimator (``algorithm.kl_loss_fn_args`` /
    ``algorithm.kl_penalty_fn_args``)."""

    kl_coef: float = 0.001
    """Weight of the KL term: of the KL loss, or of the penalty subtracted from rewards."""


def no_kl(inputs: KLInputs, args: KLArgs) -> torch.Tensor:
    """No KL: ``0`` everywhere, ``(B, T)``."""
    return torch.zeros_like(inputs.log_prob)


def k1(inputs: KLInputs, args: KLArgs) -> torch.Tensor:
    """k1 estimator: ``log π − log π_ref`` (unbiased, high variance), ``(B, T)``."""
    return inputs.log_prob - inputs.ref_log_prob


def abs_kl(inputs: KLInputs, args: KLArgs) -> torch.Tensor:
    """Absolute log-ratio: ``|log π − log π_ref|``, ``(B, T)``."""
    return (inputs.log_prob - inputs.ref_log_prob).abs()


def k2(inputs: KLInputs, args: KLArgs) -> torch.Tensor:
    """k2 estimator: ``½ (log π − log π_ref)²``; its gradient is the KL's, ``(B, T)``."""
    return 0.5 * (inputs.log_prob - inputs.ref_log_prob).square()


class _LowVarKL(torch.autograd.Function):
    """k3 fused into one forward and one backward (fewer kernels and saved tensors than
    autograd's chain; same value, same gradient up to rounding)."""

    @staticmethod
    def forward(ctx: Any, log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
        log_ratio = (ref_log_prob - log_prob).clamp_(-20, 20)  # (B, T)
        ratio = torch.exp(log_ratio)  # (B, T)
        ctx.save_for_backward(log_ratio, ratio)
        return (ratio - log_ratio).sub_(1).clamp_(-10, 10)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_ratio, ratio = ctx.saved_tensors
        # d kl / d log_ratio = ratio − 1 where neither clamp binds. Whenever the ±20 clamp
        # binds, kl ≥ 19 and the ±10 clamp binds too (kl ≥ 0 always), so testing the
        # unclamped kl ≤ 10 covers both (clamp passes gradient at its bounds, inclusive).
        kl = ratio - log_ratio - 1
        grad_log_ratio = torch.where(kl <= 10, grad * (ratio - 1), 0.0)  # (B, T)
        return -grad_log_ratio, grad_log_ratio


def k3(inputs: KLInputs, args: KLArgs) -> torch.Tensor:
    """k3 / low_var_kl: ``clamp(exp(r) − r − 1, −10, 10)``, ``r = clamp(log π_ref − log π, ±20)``.

    Unbiased and non-negative; both clamps (veRL's, for stability) also stop the gradient
    where they bind. ``(B, T)``.
    """
    return _LowVarKL.apply(inputs.log_prob, inputs.ref_log_prob)


def straight_through(estimator: KLFn[KLArgs]) -> KLFn[KLArgs]:
    """``<estimator>+``: the estimator's value with k2's gradient,
    ``k2 − sg(k2) + sg(estimator)`` (``sg`` = stop-gradient)."""

    def kl_plus(inputs: KLInputs, args: KLArgs) -> torch.Tensor:
        value = estimator(inputs, args).detach()  # (B, T)
        grad_carrier = k2(inputs, args)  # (B, T)
        return grad_carrier - grad_carrier.detach() + value

    name = getattr(estimator, "__name__", type(estimator).__name__)  # a KLFn: any callable
    kl_plus.__name__ = f"{name}_plus"
    kl_plus.__qualname__ = kl_plus.__name__
    kl_plus.__doc__ = (f"Straight-through {name}: its value, the gradient of k2. "
                       "``(B, T)``.")
    return kl_plus


_BASE: dict[str, KLFn[KLArgs]] = {
    "k1": k1, "kl": k1, "abs": abs_kl, "k2": k2, "mse": k2, "k3": k3, "low_var_kl": k3,
}

KL_FNS: dict[str, KLFn[KLArgs]] = {
    "none": no_kl,
    **_BASE,
    **{f"{name}+": straight_through(fn) for name, fn in _BASE.items()},
}
"""Every KL estimator by name (veRL's ``kl_penalty`` names plus ``none``)."""

for _fn in KL_FNS.values():
    # Args on a function: the dataclass of its *_args (rft.hookspecs)
    _fn.Args = KLArgs  # type: ignore[attr-defined]


@hookimpl
def register_kl_fns() -> dict[str, KLFn[KLArgs]]:
    return dict(KL_FNS)
