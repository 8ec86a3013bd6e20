"""Tensors in a form that pickles as raw buffers (what crosses Ray's object store).

Pickle protocol 5 — Ray's serializer — carries a numpy array as one raw buffer, out of
band, while a ``torch.Tensor`` goes through torch's own storage reducer: arrays cross
``ray.put`` + ``ray.get`` several times faster (weights and experiences alike; the figures
are in docs/benchmarks.md).

:func:`to_wire` turns a CPU tensor into an array (bfloat16 and the float8 types, which
numpy lacks, as their raw bits with the dtype's name); :func:`from_wire` inverts it,
bit for bit. Anything else passes through unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

_BITS_OF = {torch.bfloat16: torch.int16}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _BITS_OF[getattr(torch, _name)] = torch.uint8


class Bits(tuple):
    """``(dtype name, array of its raw bits)``: a tensor of a dtype numpy lacks."""


def to_wire(value: Any) -> Any:
    """A CPU tensor without autograd as a numpy array (or :class:`Bits`); else ``value``."""
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu" or value.requires_grad:
        return value
    bits = _BITS_OF.get(value.dtype)
    if bits is not None:
        return Bits((str(value.dtype).removeprefix("torch."), value.view(bits).numpy()))
    return value.numpy()


def from_wire(value: Any, *, writable: bool = True) -> Any:
    """Inverse of :func:`to_wire`. Arrays unpickled from Ray's store are read-only views
    of it: with ``writable`` they are copied; without, the tensor shares the read-only
    memory (for tensors that are only read, e.g. weights copied into a model)."""
    if isinstance(value, Bits):
        name, array = value
        return from_wire(array, writable=writable).view(getattr(torch, name))
    if not isinstance(value, np.ndarray):
        return value
    if value.flags.writeable:
        return torch.from_numpy(value)
    if writable:
        return torch.from_numpy(value.copy())
    with warnings.catch_warnings():  # "non-writable array": only read by the caller
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(value)


def _named_from_wire(items: list[tuple[str, Any]]) -> NamedTensors:
    return NamedTensors((name, from_wire(value, writable=False)) for name, value in items)


class NamedTensors(list):
    """A list of ``(name, tensor)`` (weights) that pickles its tensors as raw buffers.
    Unpickled tensors may share read-only memory: they are for reading (loading into a
    model), not for writing in place."""

    def __init__(self, items: Iterable[tuple[str, torch.Tensor]] = ()) -> None:
        super().__init__(items)

    def __reduce__(self) -> tuple[Any, ...]:
        return _named_from_wire, ([(name, to_wire(t)) for name, t in self],)
