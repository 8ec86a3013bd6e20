"""Running workflows: timeouts, retries, concurrency.

:class:`WorkflowRunner` runs one workflow per task and never lets a bad task stop the
run: a workflow that raises is retried ``max_retry_times`` times and then recorded as
failed; one that runs longer than ``max_timeout`` seconds is abandoned and recorded as
timed out. As in Trinity-RFT, the tasks of a step are spread over ``runner_per_model``
runners; ``concurrent_mode`` says how they run: ``sequential`` (each runner one task at a
time), ``multi-threading`` (every task of the step in its own thread) or ``asynchronous``
(an event loop; workflows with an ``async def run_async()`` are awaited, others run in
threads).

**What can hang runs where it can be abandoned.** Every attempt of a workflow (its model
calls, its reward) runs on a daemon thread of its own (threads are reused by later
attempts once theirs has ended, never after it was abandoned), so one that hangs holds no
runner slot: when ``max_timeout`` passes the runner records the task as timed out and goes on
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
kept what finished. ``run_tasks(…, on_result=…)`` hands each result over as soon as its
task ends (``bench`` writes it to disk), so a stop loses nothing already done.

**Over-rollout and the dynamic timeout** (experimental in Trinity-RFT, as there). With
``run_tasks(…, min_done=…)`` (``explorer.over_rollout``) a batch returns once ``min_done``
tasks ended and then at most ``wait_after_min`` seconds more; the tasks still running are
abandoned as hung ones are (their attempts left to their daemon threads) and those not
started are not run: each is recorded ``cut_off`` and its result is dropped, even one that
ends later. With ``dynamic_timeout_ratio`` (``explorer.dynamic_timeout``) each attempt may
take ``ratio ×`` the mean seconds of the tasks that succeeded so far, at most
``max_timeout`` (:meth:`WorkflowRunner.task_timeout`).

The model calls of the workflows running at the same time are merged into one engine
call (:class:`~rft.rollout.model_wrapper.CallBatcher`), in task order, so a step makes
as few engine calls as its workflows allow.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import itertools
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rft.errors import RftError
from rft.experience import Experience
from rft.engines.call_batching import CallBatcher
from rft.rollout.runner_states import RunnerStates
from rft.workflow import Task, Workflow

WorkflowFactory = Callable[[Task], Workflow]

JOIN_TIMEOUT_S = 5.0
"""Seconds :meth:`WorkflowRunner.close` waits for the idle workflow threads to end (each
ends as soon as it is woken: it only returns)."""


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


class _AttemptThread(threading.Thread):
    """A daemon thread of :class:`_AttemptThreads`: runs the attempts it is given, one at a
    time; ends when its attempt was abandoned (it is never reused) or the pool closes."""

    def __init__(self, pool: _AttemptThreads) -> None:
        super().__init__(daemon=True, name="rft-workflow-idle")
        self._pool = pool
        self._given: queue.SimpleQueue[_Attempt | None] = queue.SimpleQueue()

    def give(self, attempt: _Attempt | None) -> None:
        """Run ``attempt`` next (``None``: end)."""
        if attempt is not None:
            self.name = attempt.name
        self._given.put(attempt)

    def run(self) -> None:
        while (attempt := self._given.get()) is not None:
            reusable = attempt.run()
            # Idle, the thread holds nothing: the attempt's result (experiences holding
            # torch tensors) is freed by whoever holds it last, never by this daemon
            # thread when it wakes up during interpreter finalization. There, freeing a
            # tensor releases and retakes the GIL, CPython 3.11-3.13 ends the thread with
            # pthread_exit, and the forced unwind through torch's C++ frames calls
            # std::terminate: "terminate called without an active exception", exit 134
            # after a successful run.
            del attempt
            if not reusable or not self._pool.put_back(self):
                return


class _AttemptThreads:
    """The daemon threads that run workflow attempts, reused from one attempt to the next
    (issue #23: starting a thread per attempt was a visible cost per task; figures in
    docs/benchmarks.md). Every attempt
    starts at once on an idle thread or a new one, never behind another attempt; a thread
    whose attempt is abandoned is not reused, so it ends with its attempt."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_AttemptThread] = []
        self._closed = False

    def start(self, attempt: _Attempt) -> threading.Thread:
        """Run ``attempt`` now; returns the thread that runs it."""
        with self._lock:
            thread = self._idle.pop() if self._idle else None
        if thread is None:
            thread = _AttemptThread(self)
            thread.give(attempt)
            thread.start()
        else:
            thread.give(attempt)
        return thread

    def put_back(self, thread: _AttemptThread) -> bool:
        """``thread`` finished its attempt: idle again, unless the pool is closed."""
        with self._lock:
            if self._closed:
                return False
            thread.name = "rft-workflow-idle"
            self._idle.append(thread)
            return True

    def close(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """End the idle threads and wait (at most ``timeout`` seconds in all) until they
        have ended; busy ones end with their attempts. Joining them is what keeps a
        finished run from aborting at interpreter exit: a daemon thread still alive then
        dies by ``pthread_exit`` as soon as it wants the GIL, which aborts the process
        when C++ frames (torch freeing a tensor) are on its stack (see ``run``)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for thread in idle:
            thread.give(None)
        deadline = time.monotonic() + timeout
        for thread in idle:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class _Attempt:
    """One call of ``target`` on a daemon thread (abandoned when it hangs)."""

    _numbers = itertools.count(1)

    def __init__(self, target: Callable[[], list[Experience]], name: str,
                 threads: _AttemptThreads) -> None:
        self._target = target
        self.name = f"rft-workflow-{name}-{next(self._numbers)}"
        self.done = threading.Event()
        self.result: list[Experience] | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._abandoned = False
        self.thread = threads.start(self)

    def run(self) -> bool:
        """Call the target (on the attempt's thread); whether the thread may be reused
        (the attempt was not abandoned meanwhile)."""
        try:
            self.result = self._target()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting runner
            self.error = exc
        with self._lock:  # done and abandoned never cross: see wait()
            self.done.set()
            return not self._abandoned

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        """Whether the attempt ended within ``timeout`` seconds (``False`` at once when
        ``stop`` is set: the runner is closing, e.g. on a fatal error or Ctrl-C). ``False``
        abandons it: its thread ends with it instead of running another attempt."""
        deadline = time.monotonic() + timeout
        while not self.done.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or stop.is_set():
                with self._lock:
                    if self.done.is_set():  # it ended just now
                        return True
                    self._abandoned = True
                return False
            self.done.wait(min(remaining, 0.25))
        return True


class WorkflowRunner:
    """Runs tasks through their workflows with the explorer's limits.

    :param make_workflow: builds the workflow of a task (class from the task's taskset).
    :param max_timeout: seconds one attempt may take.
    :param max_retry_times: extra attempts after a retryable failure (not after a timeout,
        not after a deterministic error; see the module docstring).
    :param concurrent_mode: ``sequential`` | ``multi-threading`` | ``asynchronous``.
    :param workers: threads for the concurrent modes (``runner_per_model``).
    :param dynamic_timeout_ratio: ``explorer.dynamic_timeout.ratio`` when enabled (see
        :meth:`task_timeout`); ``None``: every attempt gets ``max_timeout``.
    """

    def __init__(self, make_workflow: WorkflowFactory, *, max_timeout: float,
                 max_retry_times: int, concurrent_mode: str = "sequential",
                 workers: int = 1, dynamic_timeout_ratio: float | None = None) -> None:
        self.make_workflow = make_workflow
        self.max_timeout = max_timeout
        self.dynamic_timeout_ratio = dynamic_timeout_ratio
        self._success_lock = threading.Lock()
        self._success_seconds = 0.0
        self._successes = 0
        self.max_retry_times = max_retry_times
        self.concurrent_mode = concurrent_mode
        self.workers = max(1, workers)
        self.states = RunnerStates(self.workers)
        """Tasks running / done (``explorer.runner_state_report_interval`` logs them)."""
        self._participants: concurrent.futures.ThreadPoolExecutor | None = None
        self._participant_count = 0
        self._closing = threading.Event()
        self._batch_stop: threading.Event | None = None
        self._threads = _AttemptThreads()
        self._abandoned_lock = threading.Lock()
        self._abandoned: list[threading.Thread] = []
        self.abandoned = 0
        """Attempts abandoned after ``max_timeout`` so far (their threads may still run)."""
        self.fatal_error: BaseException | None = None
        """The fatal error that stopped the last :meth:`run_tasks`, if one did."""

    def abandoned_alive(self) -> int:
        """Threads of abandoned attempts that are still running."""
        with self._abandoned_lock:
            self._abandoned = [t for t in self._abandoned if t.is_alive()]
            return len(self._abandoned)

    def task_timeout(self) -> float:
        """Seconds the next attempt may take: ``max_timeout``; with the dynamic timeout,
        ``min(max_timeout, ratio · mean seconds of the tasks that succeeded so far)``
        (``max_timeout`` until one has)."""
        with self._success_lock:
            if self.dynamic_timeout_ratio is None or not self._successes:
                return float(self.max_timeout)
            mean = self._success_seconds / self._successes
        return min(float(self.max_timeout), self.dynamic_timeout_ratio * mean)

    def _timeout_message(self, timeout: float) -> str:
        if timeout < self.max_timeout:
            return (f"workflow timed out after {timeout:g} s (explorer.dynamic_timeout: "
                    f"{self.dynamic_timeout_ratio:g} x the mean time of successful tasks)")
        return f"workflow timed out after {self.max_timeout:g} s (explorer.max_timeout)"

    def _succeeded(self, result: TaskResult) -> None:
        with self._success_lock:
            self._success_seconds += result.seconds
            self._successes += 1

    def run_tasks(self, tasks: Sequence[Task], *,
                  on_result: Callable[[TaskResult], None] | None = None,
                  min_done: int | None = None, wait_after_min: float = 0.0) -> list[TaskResult]:
        """Results in task order, whatever the concurrency; ``on_result`` gets each one as
        its task ends (from the thread that ran it). After a fatal error the tasks not yet
        started are not run and :attr:`fatal_error` is set (see the module docstring).

        ``min_done`` (``explorer.over_rollout``): once that many tasks ended, wait at most
        ``wait_after_min`` seconds more, then return; the tasks not ended by then are
        abandoned like hung ones (``cut_off``; later results dropped, ``on_result`` not
        called for them)."""
        self.fatal_error = None
        if min_done is not None and min_done < len(tasks):
            return self._run_cut(tasks, on_result, min_done, wait_after_min)
        if self.concurrent_mode == "asynchronous" and len(tasks) > 1:
            return asyncio.run(self._run_async(tasks, on_result))
        workers = len(tasks) if self.concurrent_mode == "multi-threading" else self.workers
        if workers > 1 and len(tasks) > 1:
            batcher = CallBatcher(len(tasks), workers)

            def one(order: int, task: Task) -> TaskResult:
                try:
                    return self._run_one(task, on_result, batcher=batcher, order=order)
                finally:
                    batcher.task_done()

            return list(self._participant_pool(workers).map(one, range(len(tasks)), tasks))
        return [self._run_one(task, on_result) for task in tasks]

    def _run_one(self, task: Task, on_result: Callable[[TaskResult], None] | None, *,
                 batcher: CallBatcher | None = None, order: int = 0,
                 stop: threading.Event | None = None) -> TaskResult:
        """One task, unless a fatal error came first; then ``on_result``."""
        stopped = self.fatal_error
        if stopped is not None:
            result = TaskResult(task, ok=False, error=f"not run: {_one_line(stopped)}")
        else:
            result = self.run_task(task, batcher=batcher, order=order, stop=stop)
        if on_result is not None:
            on_result(result)
        return result

    def _participant_pool(self, workers: int) -> concurrent.futures.ThreadPoolExecutor:
        """Threads that wait for the attempts of one batch (kept between batches; they never
        hang: each waits at most ``max_timeout`` per attempt)."""
        if self._participants is None or self._participant_count < workers:
            if self._participants is not None:
                self._participants.shutdown(wait=False)
            self._participants = concurrent.futures.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="rft-task")
            self._participant_count = workers
        return self._participants

    def run_task(self, task: Task, *, batcher: CallBatcher | None = None,
                 order: int = 0, stop: threading.Event | None = None) -> TaskResult:
        """One task with retries and the timeout (model calls merged by ``batcher``);
        ``stop`` (set by the runner's close or an over-rollout cut) abandons it at once."""
        result = TaskResult(task)
        started = time.monotonic()
        self.states.started()
        for attempt_number in range(1, self.max_retry_times + 2):
            result.attempts = attempt_number
            attempt = _Attempt(lambda: self._attempt(task, batcher, order),
                               f"{task.taskset}[{task.index}]", self._threads)
            timeout = self.task_timeout()
            if not attempt.wait(timeout, stop or self._closing):
                self._abandon(attempt)
                result.ok, result.timed_out = False, True
                result.error = self._timeout_message(timeout)
                break  # a hung workflow is not retried: it would hang again
            if attempt.error is None:
                assert attempt.result is not None
                result.experiences = attempt.result
                result.ok, result.error = True, None
                break
            result.ok = False
            result.error = _one_line(attempt.error)
            if is_fatal(attempt.error):
                result.fatal, self.fatal_error = True, attempt.error
                break
            if not is_retryable(attempt.error):
                break
        result.seconds = time.monotonic() - started
        self.states.ended(result.ok)
        if result.ok:
            self._succeeded(result)
        return result

    def _run_cut(self, tasks: Sequence[Task], on_result: Callable[[TaskResult], None] | None,
                 min_done: int, wait_after_min: float) -> list[TaskResult]:
        """:meth:`run_tasks` with an over-rollout cut: every task on a participant thread
        (``runner_per_model`` of them in sequential mode, one per task otherwise; a
        coroutine workflow in asynchronous mode gets an event loop of its own there)."""
        stop = self._batch_stop = threading.Event()
        if self._closing.is_set():
            stop.set()
        workers = self.workers if self.concurrent_mode == "sequential" else len(tasks)
        batcher = CallBatcher(len(tasks), workers) if workers > 1 else None
        lock, kept, cut = threading.Lock(), {}, [False]

        def one(order: int, task: Task) -> None:
            try:
                result = self._run_unit(task, batcher, order, stop)
            finally:
                if batcher is not None:
                    batcher.task_done()
            with lock:  # a result that ends after the cut is dropped, never handed over
                if cut[0]:
                    return
                kept[order] = result
                if on_result is not None:
                    on_result(result)

        pool = self._participant_pool(workers)
        futures = [pool.submit(one, order, task) for order, task in enumerate(tasks)]
        pending = set(futures)
        while len(futures) - len(pending) < min_done and pending:
            _, pending = concurrent.futures.wait(pending, return_when="FIRST_COMPLETED")
        if pending:
            concurrent.futures.wait(pending, timeout=wait_after_min)
        with lock:
            cut[0] = True
        stop.set()  # the unfinished ones give up their attempts at once
        for future in futures:
            future.cancel()
        return [kept.get(order) or TaskResult(
                    task, ok=False, cut_off=True,
                    error=f"not finished when {min_done} of {len(tasks)} tasks had "
                          f"(explorer.over_rollout)")
                for order, task in enumerate(tasks)]

    def _run_unit(self, task: Task, batcher: CallBatcher | None, order: int,
                  stop: threading.Event) -> TaskResult:
        if self.fatal_error is None and self.concurrent_mode == "asynchronous":
            run_async = getattr(self.make_workflow(task), "run_async", None)
            if run_async is not None and inspect.iscoroutinefunction(run_async):
                return asyncio.run(self._await_with_retries(task, run_async))
        return self._run_one(task, None, batcher=batcher, order=order, stop=stop)

    def _abandon(self, attempt: _Attempt) -> None:
        with self._abandoned_lock:
            self.abandoned += 1
            self._abandoned.append(attempt.thread)

    async def _run_async(self, tasks: Sequence[Task],
                         on_result: Callable[[TaskResult], None] | None = None
                         ) -> list[TaskResult]:
        limit = asyncio.Semaphore(self.workers)

        async def one(task: Task) -> TaskResult:
            async with limit:
                if self.fatal_error is not None:
                    return self._run_one(task, on_result)
                workflow = self.make_workflow(task)
                run_async = getattr(workflow, "run_async", None)
                if run_async is not None and inspect.iscoroutinefunction(run_async):
                    result = await self._await_with_retries(task, run_async)
                    if on_result is not None:
                        on_result(result)
                    return result
                # run_task returns within max_timeout per attempt (a hung attempt is left
                # in its daemon thread), so the loop's executor thread is never held
                return await asyncio.get_running_loop().run_in_executor(
                    None, self._run_one, task, on_result)

        return list(await asyncio.gather(*(one(task) for task in tasks)))

    async def _await_with_retries(self, task: Task, first_call: Callable[[], Any]) -> TaskResult:
        result = TaskResult(task)
        started = time.monotonic()
        self.states.started()
        call = first_call
        for attempt in range(1, self.max_retry_times + 2):
            result.attempts = attempt
            timeout = self.task_timeout()
            try:
                result.experiences = _checked(await asyncio.wait_for(call(), timeout))
                result.ok, result.error = True, None
                break
            except TimeoutError:
                result.ok, result.timed_out = False, True
                result.error = self._timeout_message(timeout)
                with self._abandoned_lock:
                    self.abandoned += 1
                break
            except Exception as exc:  # noqa: BLE001
                result.ok, result.error = False, _one_line(exc)
                if is_fatal(exc):
                    result.fatal, self.fatal_error = True, exc
                    break
                if not is_retryable(exc):
                    break
                call = getattr(self.make_workflow(task), "run_async")  # noqa: B009 (see above)
        result.seconds = time.monotonic() - started
        self.states.ended(result.ok)
        if result.ok:
            self._succeeded(result)
        return result

    def _attempt(self, task: Task, batcher: CallBatcher | None = None,
                 order: int = 0) -> list[Experience]:
        if batcher is None:
            return _checked(self.make_workflow(task).run())
        with batcher.participant(order):
            return _checked(self.make_workflow(task).run())

    def close(self) -> None:
        """Stop the waiting threads at once (they give up the attempts they wait for) and
        end the idle workflow threads before returning (:meth:`_AttemptThreads.close`);
        abandoned attempts are left to their daemon threads."""
        self._closing.set()
        if self._batch_stop is not None:
            self._batch_stop.set()
        self._threads.close()
        if self._participants is not None:
            self._participants.shutdown(wait=False, cancel_futures=True)


def _checked(experiences: Any) -> list[Experience]:
    if not isinstance(experiences, list) or not all(isinstance(e, Experience) for e in experiences):
        error = TypeError(f"workflow run() must return a list of Experience, got "
                          f"{type(experiences).__name__}")
        # a flag on a built-in TypeError (read by is_retryable): the same code returns it again
        error.retryable = False  # type: ignore[attr-defined]
        raise error
    return experiences


def _one_line(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    location = f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(exc).__name__}: {message[0] if message else ''}{location}"
