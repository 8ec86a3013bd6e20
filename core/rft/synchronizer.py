"""Weight synchronisation: trainer weights → inference engines, with a model version.

``memory`` (this module's :class:`MemorySynchronizer`) copies the trainer's tensors into
engines in the same process; the version an engine serves is the trainer step whose
weights it holds, and experiences carry the version that sampled them (staleness). With
LoRA only the adapter moves (:meth:`rft.trainer.base.Trainer.adapter_weights`). The bytes
a sync moved into each engine are reported as ``sync/bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

import torch

from rft.engines.engine import InferenceEngine
from rft.engines.engine_sleep import EngineSleep
from rft.trainer.base import Trainer


class MemorySynchronizer:
    """In-process weight copy from a trainer to its engines (engines that can release their
    device memory while the trainer steps: :meth:`sleep`, then woken by :meth:`sync`)."""

    def __init__(self, trainer: Trainer,
                 engines: Sequence[InferenceEngine | EngineSleep]) -> None:
        self.trainer = trainer
        self.engines = [engine if isinstance(engine, EngineSleep) else EngineSleep(engine)
                        for engine in engines]
        self.version = 0
        """Version last pushed (0: the initial checkpoint)."""

    def sleep(self) -> None:
        """Before a train step: engines with a sleep mode release their device memory."""
        for engine in self.engines:
            engine.sleep()

    def sync(self, version: int) -> dict[str, float]:
        """Push the trainer's weights as ``version``; return ``timing_s/update_weights``."""
        started = time.monotonic()
        adapter = self.trainer.adapter_weights()  # LoRA: the adapter only
        moved = 0
        for engine in self.engines:
            if adapter is not None:
                engine.load(adapter, version=version)
                moved += adapter.nbytes
            else:
                sizes: list[int] = []
                engine.load(counted_tensors(self.trainer.named_weights(), sizes), version=version)
                moved += sum(sizes)
        self.version = version
        return {"timing_s/update_weights": time.monotonic() - started,
                "sync/model_version": float(version), "sync/bytes": float(moved)}


def counted_tensors(named: Iterable[tuple[str, torch.Tensor]], sizes: list[int]
             ) -> Iterator[tuple[str, torch.Tensor]]:
    """``named`` passed through, each tensor's bytes appended to ``sizes``."""
    for name, tensor in named:
        sizes.append(tensor.numel() * tensor.element_size())
        yield name, tensor
