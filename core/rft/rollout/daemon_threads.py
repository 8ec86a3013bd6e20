"""The daemon threads that the rollout loop runs blocking work on (synchronous workflow
attempts, merged engine calls).

Why not ``asyncio.to_thread``: its executor's threads are not daemons and are joined at
interpreter exit, so one hung workflow (abandoned after ``max_timeout``; a Python thread
cannot be killed) would keep a finished run from exiting. :class:`DaemonThreads` is a
:class:`concurrent.futures.Executor` for ``loop.run_in_executor`` whose threads are daemons,
start the work they are given at once (never queued behind another), are reused from one
piece of work to the next (issue #23: a thread per attempt cost about 0.1 ms a task), and
hold nothing of the work they finished while idle. A thread whose work was abandoned
(:meth:`DaemonThreads.retire`) ends with that work instead of being reused.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

JOIN_TIMEOUT_S = 5.0
"""Seconds :meth:`DaemonThreads.shutdown` waits for the idle threads to end (each ends as
soon as it is woken: it only returns)."""

IDLE_NAME = "rft-workflow-idle"
"""The name of a thread waiting for work."""

_Work = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...],
              dict[str, Any]]


class _DaemonThread(threading.Thread):
    """Runs the work it is given, one piece at a time; ends when retired or closed."""

    def __init__(self, pool: DaemonThreads) -> None:
        super().__init__(daemon=True, name=IDLE_NAME)
        self._pool = pool
        self._given: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self.retired = False

    def give(self, work: _Work | None) -> None:
        """Run ``work`` next (``None``: end)."""
        self._given.put(work)

    def run(self) -> None:
        while (work := self._given.get()) is not None:
            future, fn, args, kwargs = work
            del work
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting loop
                    future.set_exception(exc)
            # Idle, the thread holds nothing: the result (experiences holding torch
            # tensors) is freed by whoever holds it last, never by this daemon thread when
            # it wakes up during interpreter finalization. There, freeing a tensor releases
            # and retakes the GIL, CPython 3.11-3.13 ends the thread with pthread_exit, and
            # the forced unwind through torch's C++ frames calls std::terminate:
            # "terminate called without an active exception", exit 134 after a good run.
            del future, fn, args, kwargs
            if self.retired or not self._pool.put_back(self):
                return


class DaemonThreads(concurrent.futures.Executor):
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_DaemonThread] = []
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args, **kwargs)`` now on an idle thread or a new one."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("rft: the workflow threads are closed")
            thread = self._idle.pop() if self._idle else None
        if thread is None:
            thread = _DaemonThread(self)
            thread.give((future, fn, args, kwargs))
            thread.start()
        else:
            thread.give((future, fn, args, kwargs))
        return future

    def put_back(self, thread: _DaemonThread) -> bool:
        """``thread`` finished its work: idle again, unless the pool is closed."""
        with self._lock:
            if self._closed:
                return False
            thread.name = IDLE_NAME
            self._idle.append(thread)
            return True

    @staticmethod
    def retire(thread: threading.Thread) -> None:
        """``thread`` ends once its current work ends (that work was abandoned)."""
        if isinstance(thread, _DaemonThread):
            thread.retired = True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """End the idle threads and, with ``wait``, wait (at most :data:`JOIN_TIMEOUT_S`
        in all) until they have ended; busy ones end with their work. Joining them is what
        keeps a finished run from aborting at interpreter exit: a daemon thread still alive
        then dies by ``pthread_exit`` as soon as it wants the GIL, which aborts the process
        when C++ frames (torch freeing a tensor) are on its stack (see ``run``)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for thread in idle:
            thread.give(None)
        if not wait:
            return
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for thread in idle:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
