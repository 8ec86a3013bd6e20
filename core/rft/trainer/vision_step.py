"""Every forward of a vision-language actor runs its vision tower, images or not.

A sharded trainer (:mod:`rft.trainer.fsdp`) wraps each vision block with ``fully_shard``
(Qwen2-VL lists ``Qwen2VLVisionBlock`` in ``_no_split_modules``), so running a block is a
collective: all-gather of its parameters in forward, reduce-scatter of its gradients in
backward. When one rank's micro-batch has images and another's has none (text rows of a
mixed batch, an SFT set without images), the second rank would skip the tower and the
ranks' collectives would no longer match. veRL meets the same with a fake image in its
patched Qwen2-VL forward; here a hook does it without touching the model's code:

- a forward pre-hook on the model notes whether the call carries ``pixel_values`` /
  ``pixel_values_videos``;
- a forward pre-hook on the language model (inside the model's forward, so FSDP's root
  parameters are gathered; before the decoder layers, where the model's own forward runs
  the tower, so the vision blocks' collectives come in the same order on every rank) runs
  the vision tower on a dummy image of one merged patch group (``(m², C·T·P²)`` zeros,
  grid ``(1, m, m)``) when the call carried none, and a forward hook adds
  ``0 × Σ output`` to the language model's hidden states.

The result is unchanged (``+ 0``) and every vision parameter gets a gradient, zero where no
image was seen. The hook is installed in one process too: the optimizer then sees the same
gradients (a zero, not a missing one — AdamW's decay applies to both alike) whatever the
number of ranks, so 2 ranks = 1 rank also for text-only micro-batches.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rft.errors import RftError

_PIXEL_KEYS = ("pixel_values", "pixel_values_videos")


def vision_parts(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """``(vision tower, language model)`` of a Qwen2-VL-style model (``model.model.visual``
    / ``model.model.language_model``, found under a peft wrapper's ``model`` attributes
    too); ``None`` for a model without a vision tower."""
    node: Any = model
    for _ in range(4):  # model → (peft: LoraModel → model →) inner model
        visual = getattr(node, "visual", None)
        language = getattr(node, "language_model", None)
        if isinstance(visual, nn.Module) and isinstance(language, nn.Module):
            return visual, language
        node = getattr(node, "model", None)
        if not isinstance(node, nn.Module):
            return None
    return None


def dummy_image(config: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pixel_values (m², C·T·P²), grid (1, 3))``: zeros for one merged patch group of
    the vision ``config`` (``m``: spatial merge size, ``C`` channels, ``T`` temporal patch
    size, ``P`` patch size)."""
    merge = int(getattr(config, "spatial_merge_size", 2))
    width = (int(getattr(config, "in_channels", 3)) * int(getattr(config, "temporal_patch_size", 1))
             * int(getattr(config, "patch_size", 14)) ** 2)
    return torch.zeros(merge * merge, width), torch.tensor([[1, merge, merge]])


def _tensor_sum(output: Any) -> torch.Tensor:
    """The sum over the tensors of a module's output (a tensor or a ``ModelOutput``)."""
    if isinstance(output, torch.Tensor):
        return output.sum()
    values = [v for v in (output.values() if hasattr(output, "values") else output)
              if isinstance(v, torch.Tensor)]
    if not values:
        raise RftError(f"the vision tower returned no tensor ({type(output).__name__})")
    return torch.stack([v.sum() for v in values]).sum()


class VisionInEveryStep:
    """The two hooks of the module docstring on one model; :meth:`remove` takes them off."""

    def __init__(self, model: nn.Module) -> None:
        parts = vision_parts(model)
        if parts is None:
            raise RftError(f"{type(model).__name__} has no vision tower (model.model.visual)")
        self.visual, language = parts
        self.saw_pixels = False
        """Whether the model's current call carries pixel values."""
        self.dummy_runs = 0
        """How many forwards ran the tower on the dummy image (tests, metrics)."""
        self._zero: torch.Tensor | None = None
        """``0 × Σ`` of the dummy's output, between the language model's two hooks."""
        self._handles = [
            model.register_forward_pre_hook(self._note_pixels, with_kwargs=True),
            language.register_forward_pre_hook(self._run_dummy),
            language.register_forward_hook(self._add_zero),
        ]

    def _note_pixels(self, module: nn.Module, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> None:
        self.saw_pixels = any(kwargs.get(key) is not None for key in _PIXEL_KEYS)

    def _run_dummy(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """Before the language model (where the model's own forward runs the tower, so the
        ranks' collectives come in the same order): the tower on the dummy image."""
        self._zero = None
        if self.saw_pixels:
            return
        parameter = next(self.visual.parameters())
        pixels, grid = dummy_image(getattr(self.visual, "config", None))
        self._zero = 0.0 * _tensor_sum(self.visual(pixels.to(parameter.device, parameter.dtype),
                                                   grid_thw=grid.to(parameter.device)))
        self.dummy_runs += 1

    def _add_zero(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        """After the language model: its hidden states + the dummy's ``0 × Σ``."""
        zero, self._zero = self._zero, None
        if zero is None:
            return output
        if isinstance(output, tuple):
            return (output[0] + zero.to(output[0].dtype),) + tuple(output[1:])
        output.last_hidden_state = output.last_hidden_state + zero.to(
            output.last_hidden_state.dtype)
        return output

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def keep_vision_in_step(model: nn.Module) -> VisionInEveryStep | None:
    """Install :class:`VisionInEveryStep` on a vision-language ``model``; ``None`` (nothing
    installed) for a text model."""
    return VisionInEveryStep(model) if vision_parts(model) is not None else None


def keep_vision_in_models(*models: nn.Module | None) -> list[VisionInEveryStep]:
    """:func:`keep_vision_in_step` on each distinct model given (``None`` skipped); the
    hooks installed (none for text models)."""
    hooks: list[VisionInEveryStep] = []
    seen: set[int] = set()
    for model in models:
        if model is None or id(model) in seen:
            continue
        seen.add(id(model))
        installed = keep_vision_in_step(model)
        if installed is not None:
            hooks.append(installed)
    return hooks
