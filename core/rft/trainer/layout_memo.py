"""The shared-prefix layouts a trainer built for its last few batches, found again by the
rows' content.

A step runs the same rows through several forwards — the reference model's, the old
log-probs' recompute, the actor's in every PPO epoch, the critic's — and each builds the
same layout of the rows' shared prefixes (:func:`rft.trainer.packed_forward.shared_layout`:
prompt groups or prefix-tree packs; on the CPU ~1.3 ms for a GRPO batch of 32 rows of
~60 columns, as much as a forward of a tiny model's layer). The micro-batches are new
:class:`~rft.trainer.batching.TensorBatch` objects each time (``select`` copies rows), so
:class:`LayoutMemo` finds a layout by what it depends on: the rows' ``input_ids``,
``attention_mask`` and ``position_ids`` (equal shapes, device and values,
``torch.equal``), the prompt width and the model's attention implementation (the only
thing of the model :func:`~rft.trainer.packed_forward.shared_layout` reads). Equal inputs
give an equal layout, so a hit returns exactly what building it again would.

It keeps the last :data:`CAPACITY` layouts (and their three input tensors): a few small
index and mask tensors per micro-batch, released as later batches push them out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch
from torch import nn

from rft.trainer.packed_forward import SharedLayout, attention_implementation, shared_layout

CAPACITY = 8
"""Layouts kept: the micro-batches of one step's forwards (reference, old log-probs,
actor) under the default micro-batch plans, found again by the later forwards."""


@dataclass(frozen=True)
class _Entry:
    implementation: str | None
    prompt_width: int
    input_ids: torch.Tensor  # (B, P+R)
    attention_mask: torch.Tensor  # (B, P+R)
    position_ids: torch.Tensor  # (B, P+R)
    layout: SharedLayout

    def matches(self, implementation: str | None, prompt_width: int,
                inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> bool:
        mine = (self.input_ids, self.attention_mask, self.position_ids)
        return (implementation == self.implementation and prompt_width == self.prompt_width
                and all(a.shape == b.shape and a.device == b.device and a.dtype == b.dtype
                        for a, b in zip(mine, inputs, strict=True))
                and all(torch.equal(a, b) for a, b in zip(mine, inputs, strict=True)))


class LayoutMemo:
    """:func:`~rft.trainer.packed_forward.shared_layout`, remembered for the last
    :data:`CAPACITY` distinct inputs (module docstring)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._entries: deque[_Entry] = deque(maxlen=capacity)
        self.hits = 0
        """Layouts returned without building them again."""
        self.builds = 0
        """Layouts built."""

    def layout(self, model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               position_ids: torch.Tensor, prompt_width: int) -> SharedLayout:
        """``shared_layout(model, input_ids, attention_mask, position_ids, prompt_width)``
        (``(B, P+R)`` tensors), built once for equal inputs."""
        implementation = attention_implementation(model)
        inputs = (input_ids, attention_mask, position_ids)
        for entry in self._entries:
            if entry.matches(implementation, prompt_width, inputs):
                self.hits += 1
                return entry.layout
        layout = shared_layout(model, input_ids, attention_mask, position_ids, prompt_width)
        self.builds += 1
        # copies: the memo's key stays what the layout was built from
        self._entries.append(_Entry(implementation, prompt_width, input_ids.clone(),
                                    attention_mask.clone(), position_ids.clone(), layout))
        return layout
