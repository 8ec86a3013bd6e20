"""An environment in a child process of its own (``Environment.out_of_process``).

:class:`ProcessEnvironment` starts a ``spawn`` child that builds ``env_class(args)`` and
answers ``reset`` / ``step`` / ``system_prompt`` / ``close`` requests over a pipe. The
parent waits for each answer at most ``timeout`` seconds while watching the child:

- the child dies (a crash in native code, ``os._exit``, a kill) → one
  :class:`~rft.environment.EnvironmentFailure` line naming the environment, the call, the
  child's pid and exit code;
- no answer in time → the child is killed, and one line says so;
- the call raised in the child → one line with its type and message.

After a failure, or on :meth:`ProcessEnvironment.close`, the child is gone: ``close`` asks
it to close the environment, then terminates and kills it if it lingers, and reaps it. A
child whose parent disappears (killed without running its clean-up) exits by itself
within a second, and children still alive when this interpreter exits are killed then.
What crosses the pipe must pickle: the class (importable by module path), its ``Args``,
the task (sent without its workflow / reward plugins) and the results.
"""

from __future__ import annotations

import atexit
import dataclasses
import multiprocessing
import os
import time
import weakref
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from rft.environment import Environment, EnvironmentFailure, StepResult
from rft.environments.guarded import check_reset, check_step, environment_name

if TYPE_CHECKING:
    from rft.workflow import Task

POLL_SECONDS = 0.05
"""How often the parent checks that the child still lives while it waits."""
CLOSE_GRACE_SECONDS = 5.0
"""How long ``close`` waits for the child to close the environment and exit."""

_LIVE: weakref.WeakSet[ProcessEnvironment] = weakref.WeakSet()
"""Hosts whose child may still run (killed at interpreter exit)."""


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def serve(conn: Connection, env_class: type[Environment], args: Any, parent: int) -> None:
    """The child's loop: build the environment, answer requests until ``close`` or until
    the pipe or the parent is gone."""
    try:
        env = env_class(args)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", _error_line(exc)))
        return
    conn.send(("ok", None))
    while True:
        if not conn.poll(1.0):
            if os.getppid() != parent:  # orphaned: the parent died without closing us
                env.close()
                return
            continue
        try:
            method, payload = conn.recv()
        except (EOFError, OSError):
            env.close()
            return
        try:
            if method == "reset":
                result: Any = env.reset(*payload)
            elif method == "step":
                result = env.step(payload)
            elif method == "system_prompt":
                result = env.system_prompt()
            else:  # close
                env.close()
                conn.send(("ok", None))
                return
            conn.send(("ok", result))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            conn.send(("error", _error_line(exc)))


class ProcessEnvironment(Environment):
    """``env_class(args)`` in a child process (module docstring).

    :param env_class: the environment class (importable by its module path).
    :param args: its ``Args`` instance (or ``None``); must pickle.
    :param timeout: seconds per ``reset`` / ``step`` / ``close`` call; ``None``: no limit.
    :param start_timeout: seconds for the child to start and build the environment.
    """

    def __init__(self, env_class: type[Environment], args: Any = None, *,
                 timeout: float | None = None, start_timeout: float = 120.0) -> None:
        super().__init__(args)
        self.name = environment_name(env_class)
        self.timeout = timeout
        self.broken: str | None = None
        self.closed = False
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self.process: BaseProcess = context.Process(
            target=serve, args=(child_conn, env_class, args, os.getpid()),
            name=f"rft-env-{env_class.__name__}", daemon=True)
        self.process.start()
        child_conn.close()
        _LIVE.add(self)
        self._request("__init__", None, start_timeout, send=False)

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return self.process.pid

    def _fail(self, message: str) -> EnvironmentFailure:
        self.broken = message
        self._stop()
        return EnvironmentFailure(f"environment {self.name}: {message}")

    def _request(self, call: str, payload: Any, timeout: float | None, *,
                 send: bool = True) -> Any:
        """Send ``call`` (unless ``send`` is false: wait for the start-up answer) and
        return the child's answer (see the module docstring for the failures)."""
        if self.broken is not None:
            raise EnvironmentFailure(f"environment {self.name}: {call} refused: it failed "
                                     f"before ({self.broken})")
        if self.closed:
            raise EnvironmentFailure(f"environment {self.name}: {call} after close")
        if send:
            try:
                self._conn.send((call, payload))
            except (OSError, ValueError) as exc:
                raise self._died(call) from exc
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._conn.poll(POLL_SECONDS):
                try:
                    status, value = self._conn.recv()
                except (EOFError, OSError) as exc:
                    raise self._died(call) from exc
                if status == "error":
                    raise self._fail(f"{call} raised {value}")
                return value
            if not self.process.is_alive():
                raise self._died(call)
            if deadline is not None and time.monotonic() > deadline:
                raise self._fail(f"{call} did not return within {timeout:g} s "
                                 f"(workflow_args.env_timeout); its process (pid "
                                 f"{self.pid}) was killed")

    def _died(self, call: str) -> EnvironmentFailure:
        self.process.join(1.0)
        code = self.process.exitcode
        return self._fail(f"its process (pid {self.pid}) died during {call} (exit code "
                          f"{code})")

    def system_prompt(self) -> str | None:
        prompt = self._request("system_prompt", None, self.timeout)
        return prompt if isinstance(prompt, str) else None

    def reset(self, task: Task, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        slim = dataclasses.replace(task, reward_fn=None, reward_args=None, workflow=None,
                                   workflow_args=None, action_parser=None)
        return check_reset(self.name, self._request("reset", (slim, seed), self.timeout))

    def step(self, action: str) -> StepResult:
        return check_step(self.name, self._request("step", action, self.timeout))

    def close(self) -> None:
        """Close the environment in the child, then make sure the child is gone
        (idempotent)."""
        if self.closed:
            return
        if self.broken is None and self.process.is_alive():
            try:
                grace = CLOSE_GRACE_SECONDS if self.timeout is None else min(
                    self.timeout, CLOSE_GRACE_SECONDS)
                self._request("close", None, grace)
                self.process.join(grace)  # it exits by itself after closing
            except EnvironmentFailure:
                pass  # the child is stopped below either way
        self.closed = True
        self._stop()

    def _stop(self) -> None:
        """Terminate, then kill, the child if it still runs; reap it; close the pipe."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(CLOSE_GRACE_SECONDS)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(CLOSE_GRACE_SECONDS)
        self._conn.close()
        _LIVE.discard(self)


@atexit.register
def _kill_children() -> None:
    """Children still alive when the interpreter exits are stopped."""
    for host in list(_LIVE):
        host._stop()


__all__ = ["ProcessEnvironment", "serve"]
