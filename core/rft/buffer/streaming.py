"""Streaming batches (``synchronizer.streaming_batches``): the trainer takes a batch as
soon as enough *complete groups* are in the experience buffer, in the order the groups
completed, instead of the oldest experiences in write order, so one long rollout never
stalls a step.

A group is the rollouts of one task in one explore step (``Experience.eid.group``); it is
complete when ``repeat_times`` distinct runs (``eid.run``) of it have arrived. The
buffer's :meth:`~rft.buffer.storage_base.ExperienceStorage.read` hands what it takes to a
:class:`GroupAssembler`, which holds a group back until it is complete and then releases
it whole; a batch is formed from released groups (whole groups, up to the batch size;
a single group larger than the batch is taken whole). The group whose last rollout is
late is trained in a later batch, once complete: nothing is lost, nothing read twice.
A writer that knows a group's size records it in each experience's ``info`` under
:data:`GROUP_SIZE_INFO` (mode ``serve``: an episode, committed whole, is one group of as
many experiences as it holds); that size then decides completeness instead of
``repeat_times``. A group whose runs failed or were cut off never completes: it is released as it is once
an experience of a later explore step arrives (the explorer writes each step's
experiences in one write), when the writers are idle with nothing left to read (mode
``colocate`` between steps, a finished explorer), or, with a warning, when a read has
waited its whole timeout for it (the last explore step of a run).

Held-back experiences were read from the buffer under the lease of an earlier step, so
a checkpoint keeps them (:attr:`rft.modes.run_state.RunState.held_experiences`,
:meth:`GroupAssembler.state` / :meth:`GroupAssembler.load`) and a resumed trainer starts
with the same held-back groups as the uninterrupted one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rft.buffer.experience_codec import experience_from_dict, experience_to_dict
from rft.buffer.sampling import SampleStrategy
from rft.buffer.staleness import StalenessGatedStrategy
from rft.experience import Experience

GROUP_SIZE_INFO = "group_size"
"""``Experience.info`` key: how many experiences the experience's group holds, when its
writer knows (serve episodes); absent, a group is complete at ``repeat_times`` runs."""


class GroupAssembler:
    """Holds experiences back until their group is complete (module docstring)."""

    def __init__(self, group_size: int) -> None:
        self.group_size = max(1, group_size)
        self.pending: dict[str, list[Experience]] = {}
        """Incomplete groups by ``eid.group``, in order of their first arrival."""
        self.ready: deque[list[Experience]] = deque()
        """Complete groups not yet taken, in order of completion."""

    def add(self, experiences: list[Experience]) -> None:
        """Take in what a read took; a group that completes moves to :attr:`ready`, and so
        does every incomplete group of an earlier explore step once an experience of a
        later one arrives (the explorer writes a step's experiences in one write, so the
        runs still missing failed or were cut off and never come)."""
        for exp in experiences:
            step = exp.eid.batch
            if isinstance(step, int):
                self._release_before(step)
            group = self.pending.setdefault(exp.eid.group, [])
            group.append(exp)
            if len({e.eid.run for e in group}) >= self._size_of(exp):
                self.ready.append(self.pending.pop(exp.eid.group))

    def _size_of(self, exp: Experience) -> int:
        """Runs that complete ``exp``'s group: its :data:`GROUP_SIZE_INFO` when its writer
        recorded one, else :attr:`group_size`."""
        size = exp.info.get(GROUP_SIZE_INFO)
        return size if isinstance(size, int) and size >= 1 else self.group_size

    def _release_before(self, step: int) -> None:
        """Move the incomplete groups of explore steps before ``step`` to :attr:`ready`."""
        done = [key for key, group in self.pending.items()
                if isinstance(group[0].eid.batch, int) and group[0].eid.batch < step]
        for key in done:
            self.ready.append(self.pending.pop(key))

    def flush(self) -> None:
        """Release the incomplete groups as they are (the writers are idle)."""
        self.ready.extend(self.pending.values())
        self.pending.clear()

    @property
    def ready_count(self) -> int:
        """Experiences in complete groups not yet taken."""
        return sum(len(group) for group in self.ready)

    @property
    def held_count(self) -> int:
        """Experiences held back in incomplete groups."""
        return sum(len(group) for group in self.pending.values())

    def take(self, count: int, *, whole_first: bool = True) -> list[Experience]:
        """Whole complete groups, oldest completed first, up to ``count`` experiences
        (with ``whole_first`` the first group even when larger)."""
        out: list[Experience] = []
        while self.ready and ((whole_first and not out)
                              or len(out) + len(self.ready[0]) <= count):
            out.extend(self.ready.popleft())
        return out

    def state(self) -> list[dict[str, Any]]:
        """Every experience held (complete groups first, then incomplete), encoded."""
        held = [e for group in self.ready for e in group]
        held += [e for group in self.pending.values() for e in group]
        return [experience_to_dict(e) for e in held]

    def load(self, state: list[dict[str, Any]]) -> None:
        """Restore :meth:`state` (a checkpoint's) into an empty assembler."""
        self.pending.clear()
        self.ready.clear()
        self.add([experience_from_dict(item) for item in state])


class StreamingStrategy(SampleStrategy):
    """A sample strategy whose experience-buffer reads form batches of complete groups
    (the buffer's :attr:`~rft.buffer.storage_base.ExperienceStorage.assembler`); adds
    ``streaming/held_experiences`` (held back in incomplete groups after the read)."""

    def __init__(self, inner: SampleStrategy, assembler: GroupAssembler) -> None:
        super().__init__(inner.buffers, inner.batch_size, inner.timeout, inner.args)
        self.inner = inner
        self.assembler = assembler

    def sample(self, step: int, model_version: int) -> tuple[list[Experience], dict[str, float]]:
        batch, metrics = self.inner.sample(step, model_version)
        return batch, {**metrics, "streaming/held_experiences": float(self.assembler.held_count)}


def stream_strategy(strategy: SampleStrategy, group_size: int | None) -> SampleStrategy:
    """``strategy`` itself when ``group_size`` is ``None`` (streaming off); else the
    strategy reading its experience buffer in complete groups of ``group_size`` runs."""
    if group_size is None:
        return strategy
    assembler = GroupAssembler(group_size)
    strategy.buffers.experience.assembler = assembler
    return StreamingStrategy(strategy, assembler)


def assembler_of(strategy: SampleStrategy) -> GroupAssembler | None:
    """The :class:`GroupAssembler` a strategy streams through (under a staleness gate
    too), if any."""
    if isinstance(strategy, StalenessGatedStrategy):
        strategy = strategy.inner
    return strategy.assembler if isinstance(strategy, StreamingStrategy) else None
