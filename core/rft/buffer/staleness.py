"""``synchronizer.max_staleness``: experiences too old to train on are dropped as the
trainer reads them.

An experience's *age* when a step reads it is ``v − v_e``: ``v`` the trainer's model
version at that step, ``v_e`` the version of its oldest token (``Experience.token_versions``
where the explorer records one per token, partial rollouts resumed across a weight sync;
else ``Experience.model_version``). An experience with ``age > max_staleness`` is not
trained: the read drops it and reads more in its place (:meth:`rft.buffer.storage_base.
ExperienceStorage.read` with a :class:`StalenessGate` as its read filter), so every sample
strategy (``default``, ``mix``, …) gets a full batch of fresh experiences.

Every step reports ``staleness/dropped`` (experiences dropped by this step's reads) and
the histogram of the ages of what it trains, ``staleness/age_<k>`` (count of experiences
of age ``k``), so a run shows how off-policy its batches are.

Drops happen under the step's lease: a trainer that dies before the checkpoint covering
the step gets those rows back on resume and drops them again at the same version (the
resumed step's version is the checkpoint's), so nothing is trained twice and nothing is
silently lost.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rft.buffer.sampling import SampleStrategy
from rft.experience import Experience


def age_of(exp: Experience, version: int) -> int:
    """``version − exp.oldest_version`` (the version of its oldest token; 0 for an
    experience newer than ``version``)."""
    return max(0, version - exp.oldest_version)


@dataclass
class StalenessGate:
    """The read filter of the experience buffer: keeps experiences at most
    ``max_staleness`` versions old at :attr:`version`, counts the others."""

    max_staleness: int
    version: int = 0
    """The trainer's model version of the step being read (set before each sample)."""
    dropped: int = 0
    """Experiences dropped since the last :meth:`metrics`."""
    dropped_ages: Counter[int] = field(default_factory=Counter)

    def __call__(self, experiences: list[Experience]) -> list[Experience]:
        """``experiences`` without those older than ``max_staleness`` (the read filter)."""
        kept = []
        for exp in experiences:
            age = age_of(exp, self.version)
            if age > self.max_staleness:
                self.dropped += 1
                self.dropped_ages[age] += 1
            else:
                kept.append(exp)
        return kept

    def metrics(self, batch: list[Experience]) -> dict[str, float]:
        """``staleness/dropped`` and the age histogram ``staleness/age_<k>`` of ``batch``
        (the experiences trained); resets the drop count."""
        ages = Counter(age_of(exp, self.version) for exp in batch)
        out = {"staleness/dropped": float(self.dropped)}
        out.update({f"staleness/age_{age}": float(n) for age, n in sorted(ages.items())})
        self.dropped = 0
        self.dropped_ages.clear()
        return out


class StalenessGatedStrategy(SampleStrategy):
    """A sample strategy whose experience-buffer reads pass through a
    :class:`StalenessGate` (set on the buffer by :func:`gate_strategy`)."""

    def __init__(self, inner: SampleStrategy, gate: StalenessGate) -> None:
        super().__init__(inner.buffers, inner.batch_size, inner.timeout, inner.args)
        self.inner = inner
        self.gate = gate

    def sample(self, step: int, model_version: int) -> tuple[list[Experience], dict[str, float]]:
        self.gate.version = model_version
        batch, metrics = self.inner.sample(step, model_version)
        return batch, {**metrics, **self.gate.metrics(batch)}


def gate_strategy(strategy: SampleStrategy, max_staleness: int | None) -> SampleStrategy:
    """``strategy`` itself without a bound; else the strategy with its experience buffer's
    reads gated by ``max_staleness``."""
    if max_staleness is None:
        return strategy
    gate = StalenessGate(max_staleness)
    strategy.buffers.experience.read_filter = gate
    return StalenessGatedStrategy(strategy, gate)
