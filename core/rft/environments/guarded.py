"""An environment in this process whose calls run under a time-out.

Each call (``__init__``, ``reset``, ``step``, ``close``) of the wrapped instance runs on a
daemon thread; the caller waits at most ``timeout`` seconds. A call that raises, returns
the wrong types, or does not return in time becomes one
:class:`~rft.environment.EnvironmentFailure` line naming the environment and the call.
After a failure the instance is *broken*: later ``reset`` / ``step`` calls fail at once
(a hung call may still be running on its thread: a Python thread cannot be stopped —
environments that may hang for good belong out of process, ``out_of_process = True``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rft.environment import Environment, EnvironmentFailure, StepResult

if TYPE_CHECKING:
    from rft.workflow import Task

R = TypeVar("R")


def environment_name(env_class: type) -> str:
    """How messages name an environment class: ``module.Class``."""
    return f"{env_class.__module__}.{env_class.__qualname__}"


def check_reset(name: str, returned: Any) -> tuple[str, dict[str, Any]]:
    """``returned`` is ``(str, dict)`` as :meth:`Environment.reset` promises; else one line."""
    if (not isinstance(returned, tuple) or len(returned) != 2
            or not isinstance(returned[0], str) or not isinstance(returned[1], dict)):
        raise EnvironmentFailure(f"environment {name}: reset returned {_shape(returned)}, "
                                 "expected (observation: str, info: dict)")
    return returned[0], returned[1]


def check_step(name: str, returned: Any) -> StepResult:
    """``returned`` is a :class:`StepResult` with a str observation; else one line."""
    if not isinstance(returned, StepResult) or not isinstance(returned.observation, str):
        raise EnvironmentFailure(f"environment {name}: step returned {_shape(returned)}, "
                                 "expected a StepResult with a str observation")
    return returned


def _shape(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(type(v).__name__ for v in value) + ")"
    if isinstance(value, StepResult):
        return f"StepResult(observation: {type(value.observation).__name__})"
    return type(value).__name__


def call_with_timeout(name: str, call: str, fn: Callable[[], R], timeout: float | None, *,
                      setting: str = "workflow_args.env_timeout") -> R:
    """Run ``fn`` on a daemon thread and wait at most ``timeout`` seconds for it
    (``setting``: what the time-out message names as the limit).

    :raises EnvironmentFailure: it raised (type and message in the line) or timed out.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=f"rft-env-{call}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise EnvironmentFailure(f"environment {name}: {call} did not return within "
                                 f"{timeout:g} s ({setting})")
    if "error" in outcome:
        exc = outcome["error"]
        if isinstance(exc, EnvironmentFailure):
            raise exc
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise EnvironmentFailure(f"environment {name}: {call} raised "
                                 f"{type(exc).__name__}: {first}") from exc
    value: R = outcome["value"]
    return value


class GuardedEnvironment(Environment):
    """``env_class(args)`` in this process, every call under ``timeout`` (module docstring).

    :param env_class: the environment class.
    :param args: its ``Args`` instance (or ``None``).
    :param timeout: seconds per call; ``None``: no limit.
    """

    def __init__(self, env_class: type[Environment], args: Any = None, *,
                 timeout: float | None = None) -> None:
        super().__init__(args)
        self.env_class = env_class
        self.name = environment_name(env_class)
        self.timeout = timeout
        self.broken: str | None = None
        self.closed = False
        self.inner: Environment = self._call("__init__", lambda: env_class(args))

    def _call(self, call: str, fn: Callable[[], R]) -> R:
        if self.broken is not None:
            raise EnvironmentFailure(f"environment {self.name}: {call} refused: it failed "
                                     f"before ({self.broken})")
        try:
            return call_with_timeout(self.name, call, fn, self.timeout)
        except EnvironmentFailure as exc:
            self.broken = str(exc).split(": ", 1)[-1]
            raise

    def system_prompt(self) -> str | None:
        return self.inner.system_prompt()

    def reset(self, task: Task, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return check_reset(self.name, self._call("reset", lambda: self.inner.reset(task, seed)))

    def step(self, action: str) -> StepResult:
        return check_step(self.name, self._call("step", lambda: self.inner.step(action)))

    def close(self) -> None:
        """Close the instance once (under the time-out, even when it is broken)."""
        if self.closed or not hasattr(self, "inner"):
            return
        self.closed = True
        call_with_timeout(self.name, "close", self.inner.close, self.timeout)


__all__ = ["GuardedEnvironment", "call_with_timeout", "check_reset", "check_step",
           "environment_name"]
