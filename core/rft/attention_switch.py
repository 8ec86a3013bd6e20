"""Switching a ``transformers`` model to an attention function of rft's, through
``transformers``' own registries (``AttentionInterface`` for the function,
``AttentionMaskInterface`` for its masks: sdpa's) — the model's layers stay its own.
Used by the ``hf`` engine's grouped-query attention (:mod:`rft.engines.gqa_attention`)
and the trainer's prompt groups (:mod:`rft.trainer.prompt_groups`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from packaging.version import Version
from torch import nn


MIN_TORCH = (2, 5)
"""Oldest torch whose SDPA takes grouped key / value heads (``enable_gqa``)."""


def major_minor(version: str) -> tuple[int, ...]:
    """``(major, minor)`` of a version string (``2.13.0+cpu`` → ``(2, 13)``)."""
    return Version(version).release[:2]


def old_torch_reason() -> str | None:
    """``"torch X < 2.5"`` when the installed torch predates :data:`MIN_TORCH`, else ``None``."""
    if major_minor(torch.__version__) < MIN_TORCH:
        return f"torch {torch.__version__} < {'.'.join(map(str, MIN_TORCH))}"
    return None


def switch_unavailable_reason(model: nn.Module) -> str | None:
    """Why ``model``'s sdpa attention cannot be switched (``None``: it can): a torch
    without ``enable_gqa`` (:func:`old_torch_reason`), a ``transformers`` without the
    attention registries or without a way to switch a model's attention."""
    too_old = old_torch_reason()
    if too_old is not None:
        return f"{too_old} (no enable_gqa)"
    try:
        from transformers import AttentionInterface  # noqa: F401
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:
        return "this transformers has no attention interface"
    if not callable(getattr(model, "set_attn_implementation", None)):
        return "this transformers cannot switch a model's attention"
    return None


def switch_attention(model: nn.Module, name: str, function: Callable[..., Any]) -> bool:
    """Register ``function`` as attention implementation ``name`` (masks as sdpa's) and
    switch ``model`` to it; returns whether the model now runs it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, function)
    AttentionMaskInterface.register(name, sdpa_mask)
    set_implementation: Any = getattr(model, "set_attn_implementation")
    set_implementation(name)
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == name
