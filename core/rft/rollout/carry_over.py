"""Carry-over explore steps (fully async RL, #35): tasks that outlive their explore step.

With ``synchronizer.partial_rollout`` and ``synchronizer.streaming_batches`` both on, an
explore step does not wait for its slowest task. :class:`CarryOver` keeps the tasks in
flight across steps on the runner's event loop (:meth:`WorkflowRunner.run_one
<rft.rollout.runner.WorkflowRunner.run_one>`, each model call straight to the engine,
whose concurrent calls share engine steps: :mod:`rft.engines.vllm_stepper`):

- step ``s`` submits a batch (``buffer.batch_size`` tasks) while at most one batch is in
  flight, so at most two run (at the first step two batches are submitted, later one);
- it returns once ``batch_size`` tasks ended — its own or ones carried over from an
  earlier step, in the order they end — and those go to the buffer; with
  ``synchronizer.max_staleness = k`` it also waits for every task in flight that started
  under weights ``k − 1`` or more versions older than the explorer's now (``v − v_u ≥
  max(k − 1, 0)``: a carried task's oldest token is then at most about ``k`` versions old
  when it is trained, the trainer's gate dropping what is older still);
- the tasks still running carry over: they keep generating (their workflows run on
  threads) while the step's caller trains and syncs, and end in a later step. None is
  dropped; each ends, and is written, once.

A carried task keeps the explore step that submitted it as its ``eid.batch`` (its group:
all ``repeat_times`` runs of the task), so the trainer's streaming batches
(:mod:`rft.buffer.streaming`) see whole groups whatever step wrote them. The tasks in
flight after a step are part of the explorer's run state (:attr:`RunState.carried_tasks
<rft.modes.run_state.RunState.carried_tasks>`): a run resumed from a checkpoint of that
step submits them again first, so none is lost and none is written twice.

Workflows with an ``async def run_async`` (``explorer.concurrent_mode: asynchronous``) are
awaited on the loop, which runs only while a step waits: theirs progress then only.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rft.rollout.runner import TaskResult, WorkflowRunner
from rft.workflow import Task


@dataclass(frozen=True)
class Unit:
    """One runner unit of a task (``max_repeat_times_per_runner`` splits a task)."""

    task: Task
    first_run: int
    """The number of its first run within the task."""
    step: int
    """The explore step that submitted it (its experiences' ``eid.batch``)."""
    version: int = 0
    """The explorer's model version when it was submitted (its oldest token's, at least)."""

    def to_state(self) -> list[Any]:
        """``[taskset, index, first_run, repeat_times, step, version]`` (the run state's
        form)."""
        return [self.task.taskset, self.task.index, self.first_run, self.task.repeat_times,
                self.step, self.version]


class CarryOver:
    """The tasks in flight across explore steps (module docstring).

    :param runner: the explorer's workflow runner (its loop runs the tasks).
    """

    def __init__(self, runner: WorkflowRunner) -> None:
        self.runner = runner
        self._loop = runner._event_loop()
        self._running: dict[int, tuple[Unit, asyncio.Task[TaskResult]]] = {}
        self._ended: asyncio.Queue[int] | None = None
        self._numbers = 0

    def in_flight(self) -> list[Unit]:
        """The units submitted and not collected, in submission order."""
        return [unit for unit, _ in self._running.values()]

    def submit(self, units: Sequence[Unit]) -> None:
        """Start ``units`` (they run from the next :meth:`collect` on; thread workflows
        as soon as the loop starts their attempt)."""
        if self._ended is None:
            self._ended = asyncio.Queue()
        for unit in units:
            number = self._numbers
            self._numbers += 1
            task = self._loop.create_task(self._one(number, unit.task))
            self._running[number] = (unit, task)

    async def _one(self, number: int, task: Task) -> TaskResult:
        try:
            return await self.runner.run_one(task, None)
        finally:
            assert self._ended is not None
            self._ended.put_nowait(number)

    def collect(self, count: int, due: Callable[[Unit], bool] = lambda unit: False
                ) -> list[tuple[Unit, TaskResult]]:
        """Wait until ``count`` units ended (all in flight when fewer run) and no unit
        in flight is ``due`` (asked again as each ends), and take the ended ones, in the
        order they ended."""
        if not self._running or self._ended is None:
            return []
        ended = self._ended
        count = min(count, len(self._running))

        def waiting(numbers: list[int]) -> bool:
            if len(numbers) < count:
                return True
            taken = set(numbers)
            return any(due(unit) for number, (unit, _) in self._running.items()
                       if number not in taken)

        async def take() -> list[int]:
            numbers: list[int] = []
            while waiting(numbers):
                numbers.append(await ended.get())
            return numbers

        taken: list[tuple[Unit, TaskResult]] = []
        for number in self._loop.run_until_complete(take()):
            unit, task = self._running.pop(number)
            if task.cancelled():
                result = TaskResult(unit.task, ok=False, timed_out=True,
                                    error="not finished: the workflow runner was closed")
            else:
                result = task.result()
            taken.append((unit, result))
        return taken

    def close(self) -> None:
        """Give up the units in flight (their attempts left to their daemon threads)."""
        running = [task for _, task in self._running.values()]
        self._running = {}
        for task in running:
            task.cancel()
        if running and not self._loop.is_closed():
            self._loop.run_until_complete(asyncio.gather(*running, return_exceptions=True))


def unit_of_state(saved: Sequence[Any], tasks: Mapping[str, Sequence[Task]]) -> Unit:
    """A unit recorded by :meth:`Unit.to_state` (``tasks``: each training taskset's tasks
    by name)."""
    taskset, index, first_run, repeat_times, step, version = saved
    task = dataclasses.replace(tasks[str(taskset)][int(index)], repeat_times=int(repeat_times))
    return Unit(task, int(first_run), int(step), int(version))


__all__ = ["CarryOver", "Unit", "unit_of_state"]
