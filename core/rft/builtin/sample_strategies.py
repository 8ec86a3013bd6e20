"""Built-in sample strategies: ``default`` and ``staleness_control``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft.buffer.sampling import SampleStrategy
from rft.buffer.storage import BufferEmpty
from rft.experience import Experience
from rft.hookspecs import hookimpl


def staleness_metrics(experiences: list[Experience], model_version: int) -> dict[str, float]:
    """``sample/staleness_{mean,max}``: how many weight versions behind the batch is.

    An experience's lag is ``v − v_e``, ``v_e`` the version of its oldest token
    (``Experience.oldest_version``: a partial rollout resumed across a weight sync is as
    old as the tokens the oldest weights produced; else ``model_version``)."""
    lags = [model_version - e.oldest_version for e in experiences] or [0]
    return {"sample/staleness_mean": sum(lags) / len(lags), "sample/staleness_max": max(lags)}


class DefaultSampleStrategy(SampleStrategy):
    """The ``train_batch_size`` oldest experiences of the experience buffer (FIFO)."""

    def sample(self, step: int, model_version: int) -> tuple[list[Experience], dict[str, float]]:
        batch = self.buffers.experience.read(self.batch_size, self.timeout)
        return batch, staleness_metrics(batch, model_version)


@dataclass
class StalenessArgs:
    """Arguments of ``staleness_control``."""

    max_staleness: int = 1
    """Experiences sampled more than this many weight versions ago are dropped."""


class StalenessControlSampleStrategy(SampleStrategy):
    """Like ``default``, but drops experiences older than ``max_staleness`` versions and
    reads more until the batch is full (``sample/dropped_stale`` counts the drops)."""

    Args = StalenessArgs

    def sample(self, step: int, model_version: int) -> tuple[list[Experience], dict[str, float]]:
        max_staleness = (self.args or StalenessArgs()).max_staleness
        batch: list[Experience] = []
        dropped = 0
        while len(batch) < self.batch_size:
            wanted = self.batch_size - len(batch)
            got = self.buffers.experience.read(wanted, self.timeout)
            for exp in got:
                if model_version - exp.model_version > max_staleness:
                    dropped += 1
                else:
                    batch.append(exp)
            if len(got) < wanted:  # the writers are idle: no more this step
                break
        if not batch:
            raise BufferEmpty(f"experience buffer {self.buffers.experience.name!r}: all "
                              f"{dropped} experiences read were more than {max_staleness} "
                              "weight versions old")
        return batch, {**staleness_metrics(batch, model_version),
                       "sample/dropped_stale": float(dropped)}


@hookimpl
def register_sample_strategies() -> dict[str, Any]:
    return {"default": DefaultSampleStrategy, "staleness_control": StalenessControlSampleStrategy}
