"""The typed vision inputs of one sequence, and how a batch carries them.

A Qwen2-VL-style processor turns ``n`` images into one flat tensor of patches
(``pixel_values`` ``(N, D)``, ``N = Σ_i t_i · h_i · w_i``, ``D = C · T_p · P · P``) and a
grid per image (``image_grid_thw`` ``(n, 3)``: temporal, height, width in patches); the
prompt holds ``t_i · h_i · w_i / merge²`` image tokens for image ``i``. These are *not*
padded like tokens: a batch concatenates the rows' patches and grids in row order, which
is what the model's forward expects (it splits them again by the grids).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from rft.tensor_wire import from_wire, to_wire


@dataclass(frozen=True)
class MultiModalInputs:
    """The processor's vision tensors of one sequence (prompt + response).

    ``pixel_values`` / ``image_grid_thw`` for images, ``pixel_values_videos`` /
    ``video_grid_thw`` for videos (Qwen2-VL's names, which its forward takes as keyword
    arguments); either pair may be ``None``.
    """

    pixel_values: torch.Tensor | None = None
    """(N, D) float image patches of all images of the sequence, in prompt order."""
    image_grid_thw: torch.Tensor | None = None
    """(n, 3) int64 ``(t, h, w)`` patch grid per image."""
    pixel_values_videos: torch.Tensor | None = None
    """(N', D) float video patches."""
    video_grid_thw: torch.Tensor | None = None
    """(v, 3) int64 patch grid per video."""

    def __post_init__(self) -> None:
        for values, grid, name in ((self.pixel_values, self.image_grid_thw, "image"),
                                   (self.pixel_values_videos, self.video_grid_thw, "video")):
            if (values is None) != (grid is None):
                raise ValueError(f"MultiModalInputs: {name} patches and grid go together")
            if values is None or grid is None:
                continue
            if values.dim() != 2 or grid.dim() != 2 or grid.shape[1] != 3:
                raise ValueError(f"MultiModalInputs: {name} patches must be (N, D) and the "
                                 f"grid (n, 3), got {tuple(values.shape)} and "
                                 f"{tuple(grid.shape)}")
            if int(grid.prod(dim=-1).sum()) != values.shape[0]:
                raise ValueError(f"MultiModalInputs: {values.shape[0]} {name} patches but the "
                                 f"grid {grid.tolist()} holds {int(grid.prod(dim=-1).sum())}")

    @property
    def num_images(self) -> int:
        return 0 if self.image_grid_thw is None else int(self.image_grid_thw.shape[0])

    @property
    def num_videos(self) -> int:
        return 0 if self.video_grid_thw is None else int(self.video_grid_thw.shape[0])

    def model_kwargs(self, device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """The non-``None`` tensors by the forward's keyword names (moved to ``device``)."""
        out: dict[str, torch.Tensor] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value if device is None else value.to(device)
        return out

    @classmethod
    def from_processor(cls, outputs: Any) -> MultiModalInputs | None:
        """The vision tensors of a processor's output for ONE sequence (``None`` when it
        holds none). ``outputs``: a ``BatchFeature`` / mapping."""
        values = {f.name: outputs[f.name] for f in fields(cls)
                  if f.name in outputs and outputs[f.name] is not None}
        if not values:
            return None
        for name in ("image_grid_thw", "video_grid_thw"):
            if name in values:
                values[name] = torch.as_tensor(values[name]).to(torch.long)
        for name in ("pixel_values", "pixel_values_videos"):
            if name in values:
                values[name] = torch.as_tensor(values[name]).to(torch.float32)
        return cls(**values)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as raw buffers, like :class:`~rft.experience.Experience`'s tensors."""
        return {f.name: to_wire(getattr(self, f.name)) for f in fields(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, from_wire(value))


def join_inputs(rows: Sequence[MultiModalInputs | None]) -> MultiModalInputs | None:
    """One :class:`MultiModalInputs` for a batch: the rows' patches and grids concatenated
    in row order (rows without vision inputs add nothing); ``None`` when no row has any."""
    present = [r for r in rows if r is not None]
    if not present:
        return None
    joined: dict[str, torch.Tensor] = {}
    for f in fields(MultiModalInputs):
        parts = [v for r in present if (v := getattr(r, f.name)) is not None]
        if parts:
            joined[f.name] = torch.cat(parts, dim=0)
    return MultiModalInputs(**joined)


def forward_inputs(config: Any, input_ids: torch.Tensor, inputs: MultiModalInputs | None,
                   device: torch.device | None = None) -> dict[str, torch.Tensor]:
    """The extra keyword arguments of a vision-language forward over ``input_ids``
    ``(B, L)``: the joined vision tensors and ``mm_token_type_ids`` ``(B, L)`` (0 text,
    1 image token, 2 video token: what the processor returns and what Qwen2-VL's own
    ``get_rope_index`` reads for its 3-D positions); ``{}`` for a text batch.
    ``config``: the model's config (``image_token_id`` / ``video_token_id``)."""
    if inputs is None:
        return {}
    types = torch.zeros_like(input_ids)  # (B, L)
    for value, token_id in ((1, getattr(config, "image_token_id", None)),
                            (2, getattr(config, "video_token_id", None))):
        if token_id is not None:
            types = types.masked_fill(input_ids == int(token_id), value)
    return {**inputs.model_kwargs(device), "mm_token_type_ids": types}


VISION_TOKEN_FIELDS = ("image_token_id", "video_token_id", "vision_start_token_id",
                       "vision_end_token_id")
"""Config fields of Qwen2-VL-style models naming their vision placeholder tokens."""


def vision_token_ids(config: Any) -> list[int]:
    """The vision placeholder token ids a model config names (none for a text model)."""
    return [int(v) for name in VISION_TOKEN_FIELDS
            if (v := getattr(config, name, None)) is not None]


@dataclass(frozen=True)
class VisionPrompt:
    """One prompt with images, as an engine takes it (:meth:`InferenceEngine.generate_mm`).

    ``token_ids`` are the processor's ids, every image placeholder already expanded into
    its image tokens; ``multi_modal_inputs`` the processor's tensors for them. ``images`` are the
    decoded images themselves, for an engine that runs its own processor (vLLM's
    ``multi_modal_data``); the ``hf`` engine reads ``multi_modal_inputs``.
    """

    token_ids: tuple[int, ...]
    multi_modal_inputs: MultiModalInputs | None
    images: tuple[Any, ...] = ()
