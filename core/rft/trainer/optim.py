"""Optimizer and learning-rate schedule of the native trainer (``algorithm.optimizer``).

The schedules are veRL 0.9.1's (``verl.utils.torch_functional``), as multipliers of the
peak ``lr`` at 0-indexed scheduler step ``s`` with ``W`` warm-up steps and ``N`` total
steps:

- ``constant``: ``s / max(1, W)`` while ``s < W``, then ``1``.
- ``cosine``:   ``s / max(1, W)`` while ``s < W``, then, with
  ``p = (s − W) / max(1, N − W)`` and ``ρ = min_lr_ratio``,
  ``max(ρ, ½(1 − ρ)·cos(π p) + ½(1 + ρ))``.

``W = lr_warmup_steps`` when it is ``> 0``, else ``int(lr_warmup_steps_ratio · N)``.
The scheduler advances once per training step (after all its mini-batches), like veRL.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch.optim.lr_scheduler import LambdaLR

from rft.config.schema import OptimizerConfig
from rft.errors import RftError

LrLambda = Callable[[int], float]


def warmup_steps(config: OptimizerConfig, total_steps: int | None) -> int:
    """``W``: ``lr_warmup_steps`` if ``> 0``, else ``int(lr_warmup_steps_ratio · N)``."""
    if config.lr_warmup_steps > 0:
        return config.lr_warmup_steps
    if config.lr_warmup_steps_ratio > 0:
        if total_steps is None:
            raise RftError("algorithm.optimizer.lr_warmup_steps_ratio: needs the total number "
                           "of training steps; set trainer.total_steps (or buffer.total_steps) "
                           "or use lr_warmup_steps")
        return int(config.lr_warmup_steps_ratio * total_steps)
    return 0


def constant_lr_lambda(num_warmup_steps: int) -> LrLambda:
    """Linear warm-up from 0, then the peak: ``s / max(1, W)`` for ``s < W``, else ``1``."""

    def multiplier(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1.0, num_warmup_steps))
        return 1.0

    return multiplier


def cosine_lr_lambda(num_warmup_steps: int, num_training_steps: int,
                     min_lr_ratio: float = 0.0, num_cycles: float = 0.5) -> LrLambda:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` (see the module docstring)."""
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise RftError(f"algorithm.optimizer.min_lr_ratio: must be within [0, 1], "
                       f"got {min_lr_ratio}")
    coef = (1.0 - min_lr_ratio) * 0.5
    intercept = (1.0 + min_lr_ratio) * 0.5

    def multiplier(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        decay_steps = max(1, num_training_steps - num_warmup_steps)
        progress = float(step - num_warmup_steps) / float(decay_steps)
        return max(min_lr_ratio, math.cos(math.pi * num_cycles * 2.0 * progress) * coef + intercept)

    return multiplier


def schedule_type(config: OptimizerConfig) -> str:
    """``warmup_style`` (deprecated alias) wins over ``lr_scheduler_type`` when set."""
    return config.warmup_style or config.lr_scheduler_type


def lr_lambda(config: OptimizerConfig, total_steps: int | None) -> LrLambda:
    """The multiplier function of ``config``'s schedule."""
    num_warmup = warmup_steps(config, total_steps)
    kind = schedule_type(config)
    if kind == "constant":
        return constant_lr_lambda(num_warmup)
    if kind == "cosine":
        if total_steps is None:
            raise RftError("algorithm.optimizer.lr_scheduler_type: 'cosine' needs the total "
                           "number of training steps; set trainer.total_steps (or "
                           "buffer.total_steps)")
        return cosine_lr_lambda(num_warmup, total_steps, config.min_lr_ratio)
    raise RftError(f"algorithm.optimizer.lr_scheduler_type: unknown schedule {kind!r}; "
                   "expected 'constant' or 'cosine'")


def build_optimizer(params: Iterable[torch.nn.Parameter], config: OptimizerConfig,
                    lr: float | None = None) -> torch.optim.Optimizer:
    """AdamW with ``config``'s ``lr`` (or ``lr``), ``betas`` and decoupled ``weight_decay``."""
    if config.optimizer_type.lower() not in ("adam", "adamw"):
        raise RftError(f"algorithm.optimizer.optimizer_type: the torch trainer supports "
                       f"'adam' (AdamW), got {config.optimizer_type!r}")
    if len(config.betas) != 2:
        raise RftError(f"algorithm.optimizer.betas: expected two values, got {config.betas}")
    params = list(params)
    return torch.optim.AdamW(params, lr=config.lr if lr is None else lr,
                             betas=(float(config.betas[0]), float(config.betas[1])),
                             weight_decay=config.weight_decay, fused=_can_fuse(params))


def _can_fuse(params: list[torch.nn.Parameter]) -> bool | None:
    """``fused=True`` (one kernel over all tensors: faster on CPU too, docs/benchmarks.md)
    when every parameter is a floating-point tensor on CPU or CUDA;
    ``None`` (torch's default) otherwise."""
    fusable = bool(params) and all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16,
                                                         torch.bfloat16, torch.float64)
        for p in params)
    return True if fusable else None


def build_scheduler(optimizer: torch.optim.Optimizer, config: OptimizerConfig,
                    total_steps: int | None) -> LambdaLR:
    """A ``LambdaLR`` over ``optimizer`` following ``config``'s schedule."""
    return LambdaLR(optimizer, lr_lambda(config, total_steps))
