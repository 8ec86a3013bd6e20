"""Row-sliceable tensors of a training batch, and mini-/micro-batch plans.

A :class:`TensorBatch` keeps the :func:`rft.experience.pad_batch` layout: sequence
tensors ``(B, P + R)`` with prompts left-padded and responses right-padded (responses
start at column ``P``), and response tensors ``(B, R)``. Selecting rows trims the columns
that are padding in every selected row, so a micro-batch of short sequences runs short.

Micro-batches are formed of *units*: one row, or two consecutive rows for preference
pairs (``dpo``), so a pair is never split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rft.errors import RftError
from rft.multimodal.inputs import MultiModalInputs, join_inputs

SEQUENCE_KEYS = frozenset({"input_ids", "attention_mask", "position_ids"})
"""Tensors laid out over prompt + response columns."""
ROW_KEYS = frozenset({"is_expert"})
"""Per-row tensors ``(B,)``; all other tensors are ``(B, R)``."""


@dataclass
class TensorBatch:
    """Named tensors of ``B`` rows (see the module docstring for the layout)."""

    prompt_width: int
    """``P``: responses start at this column of the sequence tensors."""
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    multi_modal: tuple[MultiModalInputs | None, ...] = ()
    """Per row, its vision inputs (``Experience.multi_modal_inputs``; ``None`` for a text
    row); empty for a text-only batch. :meth:`select` keeps them with their rows, and the
    forward joins them in row order (:func:`rft.multimodal.join_inputs`)."""

    def vision_inputs(self) -> MultiModalInputs | None:
        """The rows' vision inputs joined in row order; ``None`` for a text-only batch."""
        return join_inputs(self.multi_modal)

    def __len__(self) -> int:
        return int(self.tensors["input_ids"].shape[0])

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.tensors[key]

    def get(self, key: str) -> torch.Tensor | None:
        return self.tensors.get(key)

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        self.tensors[key] = value

    @property
    def response_width(self) -> int:
        """``R``."""
        return int(self.tensors["input_ids"].shape[1]) - self.prompt_width

    def response_lengths(self) -> torch.Tensor:
        """``(B,)`` real response tokens per row (attention over the response columns)."""
        return self.tensors["attention_mask"][:, self.prompt_width:].sum(dim=-1)

    def sequence_lengths(self) -> torch.Tensor:
        """``(B,)`` real tokens per row (prompt + response)."""
        return self.tensors["attention_mask"].sum(dim=-1)

    def select(self, rows: Sequence[int]) -> TensorBatch:
        """The given rows, with all-padding columns on both ends trimmed."""
        index = torch.as_tensor(list(rows), dtype=torch.long)
        picked = {k: v.index_select(0, index) for k, v in self.tensors.items()}
        attention = picked["attention_mask"]  # (b, P + R)
        prompt_lengths = attention[:, : self.prompt_width].sum(dim=-1)
        new_prompt_width = int(prompt_lengths.max().item()) if len(index) else 0
        left = self.prompt_width - new_prompt_width
        response_width = max(int(attention[:, self.prompt_width:].sum(dim=-1).max().item()), 1)
        trimmed = {}
        for key, value in picked.items():
            if key in SEQUENCE_KEYS:
                trimmed[key] = value[:, left: self.prompt_width + response_width]
            elif key in ROW_KEYS:
                trimmed[key] = value
            else:
                trimmed[key] = value[:, :response_width]
        multi_modal = (tuple(self.multi_modal[int(i)] for i in index) if self.multi_modal
                       else ())
        return TensorBatch(new_prompt_width, trimmed, multi_modal)


def unit_rows(num_rows: int, unit: int) -> list[list[int]]:
    """Rows grouped into units of ``unit`` consecutive rows."""
    if num_rows % unit:
        raise RftError(f"trainer: a batch of {num_rows} rows cannot be split into units of "
                       f"{unit} (preference pairs need an even number of experiences)")
    return [list(range(start, start + unit)) for start in range(0, num_rows, unit)]


def split_fixed(units: list[list[int]], rows_per_batch: int | None) -> list[list[int]]:
    """Consecutive groups of at most ``rows_per_batch`` rows (whole units; at least one
    unit each); ``None`` or ``<= 0``: one group."""
    if not units:
        return []
    if rows_per_batch is None or rows_per_batch <= 0:
        return [[row for u in units for row in u]]
    groups: list[list[int]] = []
    current: list[int] = []
    for unit in units:
        if current and len(current) + len(unit) > rows_per_batch:
            groups.append(current)
            current = []
        current.extend(unit)  # in place: a batch of B rows costs O(B), not O(B²)
    groups.append(current)
    return groups


def split_by_tokens(units: list[list[int]], lengths: torch.Tensor,
                    max_tokens: int | None) -> list[list[int]]:
    """Consecutive groups whose real tokens (``Σ lengths``) stay within ``max_tokens``.

    ``None``: one group. A unit longer than the budget is an error (veRL asserts the same).
    """
    if max_tokens is None:
        return split_fixed(units, None)
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    per_row = lengths.tolist()  # one conversion, not one tensor read per row
    for unit in units:
        size = int(sum(per_row[row] for row in unit))
        if size > max_tokens:
            raise RftError(f"trainer.max_token_len_per_gpu: {max_tokens} tokens cannot hold "
                           f"a sequence of {size} tokens (rows {unit}); raise it to at least "
                           "the longest sequence")
        if current and used + size > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.extend(unit)
        used += size
    if current:
        groups.append(current)
    return groups
