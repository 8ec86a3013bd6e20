"""Weight synchronisation: trainer weights → inference engines, with a model version.

``memory`` (this module's :class:`MemorySynchronizer`) copies the trainer's tensors into
engines in the same process; the version an engine serves is the trainer step whose
weights it holds, and experiences carry the version that sampled them (staleness).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rft.explorer.engine import InferenceEngine
from rft.trainer.base import Trainer


class MemorySynchronizer:
    """In-process weight copy from a trainer to its engines."""

    def __init__(self, trainer: Trainer, engines: Sequence[InferenceEngine]) -> None:
        self.trainer = trainer
        self.engines = list(engines)
        self.version = 0
        """Version last pushed (0: the initial checkpoint)."""

    def sync(self, version: int) -> dict[str, float]:
        """Push the trainer's weights as ``version``; return ``timing_s/update_weights``."""
        started = time.monotonic()
        for engine in self.engines:
            engine.update_weights(self.trainer.named_weights(), version=version)
        self.version = version
        return {"timing_s/update_weights": time.monotonic() - started, "sync/model_version": float(version)}
