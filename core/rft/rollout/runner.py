"""Running workflows: timeouts, retries, concurrency — the one place a rollout runs.

:class:`WorkflowRunner` runs one workflow per task and never lets a bad task stop the
run: a workflow that raises is retried ``max_retry_times`` times and then recorded as
failed; one that runs longer than ``max_timeout`` seconds is abandoned and recorded as
timed out. As in Trinity-RFT, the tasks of a step are spread over ``runner_per_model``
runners; ``concurrent_mode`` says how they run: ``sequential`` (each runner one task at a
time), ``multi-threading`` (every task of the step at once) or ``asynchronous`` (workflows
with an ``async def run_async()`` are awaited, others run in threads).

**One event loop.** :meth:`WorkflowRunner.run` takes an iterable of tasks and yields each
task's :class:`TaskResult` as the task ends; the caller (the explorer) drives it. Behind it
is one asyncio loop (the runner's, run on the caller's thread while it waits for the next
result): a runner is a coroutine that takes the next task and runs its attempts, each
under ``asyncio.timeout``; a coroutine workflow is awaited on the loop, a synchronous one
runs on a daemon thread through ``loop.run_in_executor``
(:class:`~rft.rollout.daemon_threads.DaemonThreads`: ``asyncio.to_thread``'s threads would
keep a process with a hung workflow from exiting). The model calls of the workflows of
a batch meet in the batch's :class:`~rft.engines.call_batching.CallBatcher` (the loop counts
its running workflows and times its waits), handed to each workflow's model explicitly (a
:class:`~rft.engines.call_batching.CallSlot`).

**What can hang runs where it can be abandoned.** Every synchronous attempt of a workflow
(its model calls, its reward) runs on a daemon thread (threads are reused by later
attempts once theirs has ended, never after it was abandoned), so one that hangs holds no
runner: when ``max_timeout`` passes the runner records the task as timed out and goes on
with the others, and the thread is left to finish (a Python thread cannot be killed). It
is counted (:attr:`WorkflowRunner.abandoned`, ``rollout/timed_out_tasks``,
``rollout/abandoned_threads``), its result is dropped, and, being a daemon thread, it
never keeps the process alive once the run ends. A timed-out task is not retried: it
would hang again. The other threads do not outlive the run: :meth:`WorkflowRunner.close`
ends the idle ones and waits for them, and an idle one holds nothing of its last attempt
(a daemon thread that frees tensors during interpreter exit aborts the process).

**Deterministic failures are not retried.** A retry helps with what may go differently
the next time (a sampled response, a network call); it does not help with an error that
the task's own inputs cause. An exception is retried unless it says otherwise with a
``retryable = False`` attribute (on the exception or its class); rft's own errors
(:class:`~rft.errors.RftError`: a prompt longer than the limit with truncation off, a
reward that is not a number, a missing auxiliary model, …) and a workflow returning the
wrong type are such errors and fail the task at the first attempt.

**A fatal error stops the batch.** An exception with ``fatal = True`` (a
:class:`~rft.errors.ServerUnavailableError`: the external model's server is down) says
that every later task would fail the same way: the task fails at once, the tasks not yet
started are not run (each recorded as failed, ``not run: …``), and
:attr:`WorkflowRunner.fatal_error` holds the error for the caller to raise once it has
kept what finished. :meth:`WorkflowRunner.run` yields each result as soon as its task
ends (``bench`` writes it to disk), so a stop loses nothing already done.

**Over-rollout and the dynamic timeout** (experimental in Trinity-RFT, as there). With
``run(…, min_done=…)`` (``explorer.over_rollout``) a batch ends once ``min_done`` tasks
ended and then at most ``wait_after_min`` seconds more; the tasks still running are
abandoned as hung ones are (their attempts left to their daemon threads) and those not
started are not run: each is yielded ``cut_off`` and its result is dropped, even one that
ends later. With ``dynamic_timeout_ratio`` (``explorer.dynamic_timeout``) each attempt may
take ``ratio ×`` the mean seconds of the tasks that succeeded so far, at most
``max_timeout`` (:meth:`WorkflowRunner.task_timeout`).

The model calls of the workflows running at the same time are merged into one engine
call (:class:`~rft.engines.call_batching.CallBatcher`), in task order, so a step makes
as few engine calls as its workflows allow. In ``asynchronous`` mode they are merged only
in a batch with an over-rollout cut, and only for workflows run on threads (a coroutine
workflow's direct call is made on the loop's thread, where waiting would stop the loop).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rft.engines.call_batching import CallBatcher, CallSlot
from rft.errors import RftError
from rft.experience import Experience
from rft.rollout.daemon_threads import DaemonThreads
from rft.rollout.runner_states import RunnerStates
from rft.workflow import Task, Workflow

WorkflowFactory = Callable[[Task, CallSlot | None], Workflow]
"""Builds the workflow of a task, its model calling the engine through the slot (``None``:
straight to the engine)."""


@dataclass
class TaskResult:
    """Outcome of one task."""

    task: Task
    experiences: list[Experience] = field(default_factory=list)
    ok: bool = True
    error: str | None = None
    """One line: ``ExceptionType: message`` of the last attempt, or the timeout."""
    attempts: int = 0
    seconds: float = 0.0
    timed_out: bool = False
    """The last attempt ran past ``max_timeout`` and was abandoned."""
    fatal: bool = False
    """The last attempt raised a fatal error (see the module docstring)."""
    cut_off: bool = False
    """Not finished when the batch went on without it (``explorer.over_rollout``): dropped."""
    order: int = 0
    """The task's position in the tasks given to :meth:`WorkflowRunner.run`."""


def split_repeats(task: Task, limit: int | None) -> list[tuple[Task, int]]:
    """``task`` as sub-tasks of at most ``limit`` repeats: ``[(sub_task, first_run), …]``."""
    if limit is None or task.repeat_times <= limit:
        return [(task, 0)]
    parts = []
    for first in range(0, task.repeat_times, limit):
        parts.append((dataclasses.replace(task, repeat_times=min(limit, task.repeat_times - first)),
                      first))
    return parts


def is_retryable(exc: BaseException) -> bool:
    """Whether another attempt may end differently (see the module docstring): an explicit
    ``retryable`` attribute wins; else every exception but rft's own errors (and what is not
    an :class:`Exception` at all, such as ``SystemExit``)."""
    flag = getattr(exc, "retryable", None)
    if flag is not None:
        return bool(flag)
    return isinstance(exc, Exception) and not isinstance(exc, RftError)


def is_fatal(exc: BaseException) -> bool:
    """Whether ``exc`` stops the batch: its ``fatal`` attribute (see the module docstring)."""
    return bool(getattr(exc, "fatal", False))


class _Attempt:
    """One synchronous attempt, called on a daemon thread; abandoned when it hangs."""

    _numbers = itertools.count(1)

    def __init__(self, target: Callable[[], list[Experience]], name: str) -> None:
        self._target: Callable[[], list[Experience]] | None = target
        self.name = f"rft-workflow-{name}-{next(self._numbers)}"
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self._abandoned = False
        self._ended = False

    def __call__(self) -> list[Experience]:
        thread = threading.current_thread()
        with self._lock:
            target, self._target = self._target, None
            if self._abandoned or target is None:  # given up before it started
                raise asyncio.CancelledError
            self.thread = thread
        thread.name = self.name
        try:
            return target()
        finally:
            del target
            with self._lock:  # ended and abandoned never cross: see abandon()
                self._ended = True
                if self._abandoned:  # the thread ends with its attempt
                    DaemonThreads.retire(thread)

    def abandon(self) -> threading.Thread | None:
        """Give the attempt up: the thread that runs it (ends with it), unless it ended."""
        with self._lock:
            self._abandoned = True
            return None if self._ended else self.thread


class WorkflowRunner:
    """Runs tasks through their workflows with the explorer's limits.

    :param make_workflow: builds the workflow of a task (class from the task's taskset),
        its model calling the engine through the given slot.
    :param max_timeout: seconds one attempt may take.
    :param max_retry_times: extra attempts after a retryable failure (not after a timeout,
        not after a deterministic error; see the module docstring).
    :param concurrent_mode: ``sequential`` | ``multi-threading`` | ``asynchronous``.
    :param workers: runners for ``sequential`` and ``asynchronous`` (``runner_per_model``).
    :param dynamic_timeout_ratio: ``explorer.dynamic_timeout.ratio`` when enabled (see
        :meth:`task_timeout`); ``None``: every attempt gets ``max_timeout``.
    """

    def __init__(self, make_workflow: WorkflowFactory, *, max_timeout: float,
                 max_retry_times: int, concurrent_mode: str = "sequential",
                 workers: int = 1, dynamic_timeout_ratio: float | None = None) -> None:
        self.make_workflow = make_workflow
        self.max_timeout = max_timeout
        self.dynamic_timeout_ratio = dynamic_timeout_ratio
        self._success_seconds = 0.0
        self._successes = 0
        self.max_retry_times = max_retry_times
        self.concurrent_mode = concurrent_mode
        self.workers = max(1, workers)
        self.states = RunnerStates(self.workers)
        """Tasks running / done (``explorer.runner_state_report_interval`` logs them)."""
        self._threads = DaemonThreads()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batch: _Batch | None = None
        self._closed = False
        self._abandoned: list[threading.Thread] = []
        self.abandoned = 0
        """Attempts abandoned after ``max_timeout`` so far (their threads may still run)."""
        self.fatal_error: BaseException | None = None
        """The fatal error that stopped the last :meth:`run`, if one did."""

    def abandoned_alive(self) -> int:
        """Threads of abandoned attempts that are still running."""
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        return len(self._abandoned)

    def task_timeout(self) -> float:
        """Seconds the next attempt may take: ``max_timeout``; with the dynamic timeout,
        ``min(max_timeout, ratio · mean seconds of the tasks that succeeded so far)``
        (``max_timeout`` until one has)."""
        if self.dynamic_timeout_ratio is None or not self._successes:
            return float(self.max_timeout)
        mean = self._success_seconds / self._successes
        return min(float(self.max_timeout), self.dynamic_timeout_ratio * mean)

    def _timeout_message(self, timeout: float) -> str:
        if timeout < self.max_timeout:
            return (f"workflow timed out after {timeout:g} s (explorer.dynamic_timeout: "
                    f"{self.dynamic_timeout_ratio:g} x the mean time of successful tasks)")
        return f"workflow timed out after {self.max_timeout:g} s (explorer.max_timeout)"

    # ---- driving ------------------------------------------------------------------------

    def run(self, tasks: Iterable[Task], *, min_done: int | None = None,
            wait_after_min: float = 0.0) -> Iterator[TaskResult]:
        """Run ``tasks``, yielding each one's result (``order``: its position) as it ends.
        After a fatal error the tasks not yet started are not run and :attr:`fatal_error`
        is set (see the module docstring).

        ``min_done`` (``explorer.over_rollout``): once that many tasks ended, wait at most
        ``wait_after_min`` seconds more, then yield the tasks not ended by then as
        ``cut_off`` (abandoned like hung ones; their later results dropped)."""
        if self._closed:
            raise RftError("the workflow runner is closed")
        self.fatal_error = None
        loop = self._event_loop()
        batch = self._batch = _Batch(self, loop, tasks, cut=min_done is not None)
        try:
            done, deadline = 0, None
            while not batch.finished():
                if min_done is not None and done >= min_done and deadline is None:
                    deadline = loop.time() + wait_after_min
                results = loop.run_until_complete(batch.next_results(deadline))
                if not results:  # the over-rollout cut, or the runner closed
                    break
                done += len(results)
                yield from results
            yield from batch.left_over(min_done, closed=self._closed)
        finally:
            self._batch = None
            if not loop.is_closed():
                loop.run_until_complete(batch.stop())

    def run_tasks(self, tasks: Sequence[Task], *,
                  on_result: Callable[[TaskResult], None] | None = None,
                  min_done: int | None = None, wait_after_min: float = 0.0) -> list[TaskResult]:
        """:meth:`run`'s results in task order (``min_done`` only when it cuts);
        ``on_result`` gets each one that was not cut off as it is yielded."""
        cut = min_done if min_done is not None and min_done < len(tasks) else None
        results: list[TaskResult | None] = [None] * len(tasks)
        for result in self.run(tasks, min_done=cut, wait_after_min=wait_after_min):
            results[result.order] = result
            if on_result is not None and not result.cut_off:
                on_result(result)
        return [r for r in results if r is not None]

    def run_task(self, task: Task) -> TaskResult:
        """One task with retries and the timeout."""
        [result] = self.run_tasks([task])
        return result

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    # ---- one task -----------------------------------------------------------------------

    async def run_one(self, task: Task, slot: CallSlot | None) -> TaskResult:
        """One task with retries and the timeout (model calls through ``slot``), unless a
        fatal error came first."""
        if self.fatal_error is not None:
            return TaskResult(task, ok=False, error=f"not run: {_one_line(self.fatal_error)}")
        result = TaskResult(task)
        started = time.monotonic()
        self.states.started()
        try:
            for attempt_number in range(1, self.max_retry_times + 2):
                result.attempts = attempt_number
                timeout = self.task_timeout()
                deadline = asyncio.timeout(timeout)
                try:
                    async with deadline:
                        experiences = await self._attempt(task, slot)
                except TimeoutError:
                    if not deadline.expired():
                        raise
                    result.ok, result.timed_out = False, True
                    result.error = self._timeout_message(timeout)
                    break  # a hung workflow is not retried: it would hang again
                except asyncio.CancelledError:  # cut off, or the runner closed
                    result.ok, result.timed_out = False, True
                    raise
                except BaseException as exc:  # noqa: BLE001 - the task's failure
                    result.ok, result.error = False, _one_line(exc)
                    if is_fatal(exc):
                        result.fatal, self.fatal_error = True, exc
                        break
                    if not is_retryable(exc):
                        break
                    continue
                result.experiences = experiences
                result.ok, result.error = True, None
                break
        finally:
            result.seconds = time.monotonic() - started
            self.states.ended(result.ok)
        if result.ok:
            self._success_seconds += result.seconds
            self._successes += 1
        return result

    async def _attempt(self, task: Task, slot: CallSlot | None) -> list[Experience]:
        """One attempt: a coroutine workflow (``asynchronous`` mode) awaited here, any
        other on a daemon thread."""
        name = f"{task.taskset}[{task.index}]"
        if self.concurrent_mode == "asynchronous":
            workflow = self.make_workflow(task, slot)
            run_async = getattr(workflow, "run_async", None)
            if run_async is not None and inspect.iscoroutinefunction(run_async):
                try:
                    return _checked(await run_async())
                except asyncio.CancelledError:
                    self.abandoned += 1
                    raise
            attempt = _Attempt(lambda: _checked(workflow.run()), name)
        else:
            attempt = _Attempt(lambda: _checked(self.make_workflow(task, slot).run()), name)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, attempt)
        except asyncio.CancelledError:  # timed out, cut off or closing: left to its thread
            self.abandoned += 1
            thread = attempt.abandon()
            if thread is not None:
                self._abandoned.append(thread)
            raise

    def close(self) -> None:
        """Give up the running batch's attempts (left to their daemon threads), end the
        idle workflow threads before returning and close the event loop."""
        self._closed = True
        batch, loop = self._batch, self._loop
        if batch is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(batch.cancel)
        self._threads.shutdown(wait=True)
        if loop is not None and batch is None and not loop.is_running():
            loop.close()


class _RunnerEnded:
    """Put in :attr:`_Batch.results` by a runner coroutine as it ends."""


_ENDED = _RunnerEnded()


class _Batch:
    """The coroutines of one :meth:`WorkflowRunner.run`: runners taking the next task from
    the shared source, their results (then an end mark each) in a queue for the driver.

    Runners: ``workers`` of them in ``sequential`` and ``asynchronous`` mode, one per task
    in ``multi-threading`` mode (and ``asynchronous`` with a cut). A
    :class:`~rft.engines.call_batching.CallBatcher` merges the model calls when more than
    one task may run at once (not in ``asynchronous`` mode without a cut)."""

    def __init__(self, runner: WorkflowRunner, loop: asyncio.AbstractEventLoop,
                 tasks: Iterable[Task], *, cut: bool) -> None:
        self.runner = runner
        mode = runner.concurrent_mode
        unbounded = mode == "multi-threading" or (cut and mode == "asynchronous")
        source = iter(enumerate(tasks))
        first = list(itertools.islice(source, max(2, runner.workers)))  # runners to start
        self.source: Iterator[tuple[int, Task]] = itertools.chain(first, source)
        self.pulled = 0
        """Tasks taken from the source so far."""
        self.running: dict[int, Task] = {}
        """Tasks started and not ended, by order."""
        self.results: asyncio.Queue[TaskResult | BaseException | _RunnerEnded] = asyncio.Queue()
        sources: list[Iterator[tuple[int, Task]]]
        if unbounded:
            every = list(self.source)  # all taken before any runs (the source may raise)
            self.pulled = len(every)
            sources = [iter([item]) for item in every]
        else:
            sources = [self.source] * min(runner.workers, len(first))
        batched = (len(first) > 1 and (unbounded or runner.workers > 1)
                   and (cut or mode != "asynchronous"))
        # every runner counts from the start: a workflow's thread may call the model
        # before the loop has run the other runners' first steps
        self.batcher = (CallBatcher(loop, runner._threads, running=len(sources)) if batched
                        else None)
        self.tasks = [loop.create_task(self._runner(source)) for source in sources]
        self.live = len(self.tasks)
        """Runner coroutines whose end mark the driver has not taken yet."""

    def finished(self) -> bool:
        """Every runner ended and the driver took every result."""
        return self.live == 0

    async def _runner(self, source: Iterator[tuple[int, Task]]) -> None:
        try:
            for order, task in source:
                if source is self.source:
                    self.pulled += 1
                self.running[order] = task
                slot = self.batcher.slot(order) if self.batcher is not None else None
                result = await self.runner.run_one(task, slot)
                result.order = order
                del self.running[order]
                self.results.put_nowait(result)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the task source failed: the driver raises
            self.results.put_nowait(exc)
        finally:
            if self.batcher is not None:
                self.batcher.leave()
            self.results.put_nowait(_ENDED)

    async def next_results(self, deadline: float | None) -> list[TaskResult]:
        """The results in so far, waiting for one if there is none (the loop is entered
        once for all of them); ``[]`` once every runner ended, or when ``deadline`` (loop
        time) passes first."""
        results: list[TaskResult] = []
        try:
            async with asyncio.timeout_at(deadline):
                while not results and self.live:
                    self._take(await self.results.get(), results)
                    while not self.results.empty():
                        self._take(self.results.get_nowait(), results)
        except TimeoutError:
            pass
        return results

    def _take(self, item: TaskResult | BaseException | _RunnerEnded,
              into: list[TaskResult]) -> None:
        if isinstance(item, _RunnerEnded):
            self.live -= 1
        elif isinstance(item, BaseException):
            raise item
        else:
            into.append(item)

    def left_over(self, min_done: int | None, *, closed: bool) -> Iterator[TaskResult]:
        """After the driver stopped taking results (an over-rollout cut after ``min_done``
        tasks, or the runner ``closed``): the results already in (tasks that ended first),
        then the tasks still running and those never started (the rest of the source):
        ``cut_off``, or failed when the runner closed."""
        self.cancel()
        while not self.results.empty():
            item = self.results.get_nowait()
            if isinstance(item, TaskResult):
                yield item
        rest = list(self.source)
        left, self.running = sorted(self.running.items()) + rest, {}
        total = self.pulled + len(rest)
        for order, task in left:
            if closed:
                yield TaskResult(task, ok=False, timed_out=True, order=order,
                                 error="not finished: the workflow runner was closed")
            else:
                yield TaskResult(task, ok=False, cut_off=True, order=order,
                                 error=f"not finished when {min_done} of {total} tasks had "
                                       f"(explorer.over_rollout)")

    def cancel(self) -> None:
        """Give up every runner (on the loop)."""
        for task in self.tasks:
            task.cancel()

    async def stop(self) -> None:
        """Cancel what still runs and wait until the runners have ended."""
        self.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.batcher is not None:
            self.batcher.close()


def _checked(experiences: Any) -> list[Experience]:
    if not isinstance(experiences, list) or not all(isinstance(e, Experience) for e in experiences):
        error = TypeError(f"workflow run() must return a list of Experience, got "
                          f"{type(experiences).__name__}")
        error.retryable = False  # type: ignore[attr-defined]  # the same code returns it again
        raise error
    return experiences


def _one_line(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    location = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(exc).__name__}: {message[0] if message else ''}{location}"
