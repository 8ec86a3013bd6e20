"""The contract check of environments (:class:`rft.environment.Environment`):
:func:`check_environment` (re-exported by :mod:`rft.testing.checks`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rft.environment import Environment, EnvironmentFailure, StepResult
from rft.environments.guarded import call_with_timeout
from rft.testing.check_base import _Check
from rft.workflow import Task

DEFAULT_ACTIONS = ("look", "1", "up", "help", "")
"""Actions played when the caller gives none: text any environment must answer (with an
observation, not an exception: a model writes anything)."""

SETTING = "check_environment's timeout"
"""What a time-out message names as the limit."""

Trajectory = tuple[str, list[tuple[str, float, bool, bool]]]
"""``(first observation, [(observation, reward, terminated, truncated) per step])``."""


def check_environment(env_class: type[Environment], task_rows: Sequence[Mapping[str, Any]],
                      args: Any = None, seed: int = 0,
                      actions: Sequence[str] = DEFAULT_ACTIONS,
                      timeout: float = 30.0) -> list[Trajectory]:
    """Check an environment class the way ``environment_workflow`` uses it, on one task per
    row of ``task_rows`` (``Task.raw``), playing ``actions`` until the episode ends.

    1. ``env_class(args)`` builds (``args``: the ``Args`` defaults when ``None``);
    2. ``reset(task, seed)`` returns ``(str, dict)``; ``step(action)`` a
       :class:`~rft.environment.StepResult` with a str observation, a finite reward, bool
       ``terminated`` / ``truncated`` and a dict ``info``; any text action is answered,
       not raised on;
    3. determinism under a seed: a second reset with the same seed — on the same instance
       when ``reusable``, and on a fresh one — gives the same first observation and the
       same trajectory for the same actions;
    4. a step after the episode ended is refused (raises) or harmless (a well-typed
       :class:`StepResult`);
    5. ``close()`` may be called twice;
    6. every call returns within ``timeout`` seconds (a hanging call fails the check);
    7. with ``out_of_process``: the class, its args, the task and the results cross a
       process boundary, and the child plays the same trajectory.

    :raises AssertionError: one line ``check_environment(Class): property (detail)``.
    :return: the trajectory of each row.
    """
    check = _Check("check_environment", env_class)
    if args is None and env_class.Args is not None:
        args = env_class.Args()
    check.ensure(len(task_rows) > 0, "needs at least one task row")
    trajectories = []
    for index, row in enumerate(task_rows):
        task = Task(raw=dict(row), index=index, taskset="check_environment")
        env = _call(check, "__init__", lambda: env_class(args), timeout)
        try:
            first = _play(check, env, task, seed, actions, timeout)
            _after_the_end(check, env, first, timeout)
            if env_class.reusable:
                again = _play(check, env, task, seed, actions, timeout)
                check.ensure(again == first, "not deterministic: a second reset with the same "
                             "seed on the same instance played differently",
                             _difference(first, again))
        finally:
            _call(check, "close", env.close, timeout)
        _call(check, "close", env.close, timeout)  # idempotent
        fresh = _call(check, "__init__", lambda: env_class(args), timeout)
        try:
            other = _play(check, fresh, task, seed, actions, timeout)
        finally:
            _call(check, "close", fresh.close, timeout)
        check.ensure(other == first, "not deterministic: a fresh instance reset with the same "
                     "seed played differently", _difference(first, other))
        if env_class.out_of_process:
            _in_a_child(check, env_class, args, task, seed, actions, timeout, first)
        trajectories.append(first)
    return trajectories


def _call(check: _Check, call: str, fn: Any, timeout: float, where: str = "") -> Any:
    try:
        return call_with_timeout(check.prefix, call, fn, timeout, setting=SETTING)
    except EnvironmentFailure as exc:
        check.fail(where + str(exc).split(": ", 1)[-1])


def _play(check: _Check, env: Environment, task: Task, seed: int, actions: Sequence[str],
          timeout: float, where: str = "") -> Trajectory:
    """Reset and play ``actions`` until the episode ends (``where``: put before a failure's
    property)."""
    returned = _call(check, "reset", lambda: env.reset(task, seed), timeout, where)
    check.ensure(isinstance(returned, tuple) and len(returned) == 2
                 and isinstance(returned[0], str) and isinstance(returned[1], dict),
                 "reset must return (observation: str, info: dict)", f"got {returned!r:.80}")
    steps = []
    for action in actions:
        result = _call(check, "step", lambda action=action: env.step(action), timeout, where)
        _check_result(check, result, f"step({action!r})")
        steps.append((result.observation, float(result.reward), result.terminated,
                       result.truncated))
        if result.terminated or result.truncated:
            break
    return returned[0], steps


def _check_result(check: _Check, result: Any, call: str) -> None:
    check.ensure(isinstance(result, StepResult), f"{call} must return a StepResult",
                 f"got {type(result).__name__}")
    check.ensure(isinstance(result.observation, str), f"{call}: observation must be a str",
                 f"got {type(result.observation).__name__}")
    reward = result.reward
    check.ensure(isinstance(reward, (int, float)) and not isinstance(reward, bool)
                 and math.isfinite(reward), f"{call}: reward must be a finite number",
                 f"got {reward!r}")
    check.ensure(isinstance(result.terminated, bool) and isinstance(result.truncated, bool),
                 f"{call}: terminated and truncated must be bools")
    check.ensure(isinstance(result.info, dict), f"{call}: info must be a dict",
                 f"got {type(result.info).__name__}")


def _after_the_end(check: _Check, env: Environment, played: Trajectory,
                   timeout: float) -> None:
    steps = played[1]
    if not steps or not (steps[-1][2] or steps[-1][3]):
        return  # the actions did not end the episode
    try:
        result = call_with_timeout(check.prefix, "step", lambda: env.step("look"), timeout,
                                   setting=SETTING)
    except EnvironmentFailure as exc:
        if "did not return" in str(exc):
            check.fail(f"a step after the episode ended {str(exc).split(': ', 1)[-1]}")
        return  # refused
    _check_result(check, result, "step after the episode ended")


def _in_a_child(check: _Check, env_class: type[Environment], args: Any, task: Task,
                seed: int, actions: Sequence[str], timeout: float,
                expected: Trajectory) -> None:
    from rft.environments import ProcessEnvironment

    try:
        host = ProcessEnvironment(env_class, args, timeout=timeout)
        try:
            played = _play(check, host, dataclasses.replace(task), seed, actions, timeout,
                           "out of process: ")
        finally:
            host.close()
    except EnvironmentFailure as exc:
        check.fail(f"out of process: {str(exc).split(': ', 1)[-1]}")
    check.ensure(played == expected, "out of process: the child played differently",
                 _difference(expected, played))


def _difference(a: Trajectory, b: Trajectory) -> str:
    if a[0] != b[0]:
        return f"first observation {_where_texts_differ(a[0], b[0])}"
    for number, (x, y) in enumerate(zip(a[1], b[1])):
        if x != y:
            if x[0] != y[0]:
                return f"step {number}: observation {_where_texts_differ(x[0], y[0])}"
            return f"step {number}: {x[1:]!r:.80} vs {y[1:]!r:.80}"
    return f"{len(a[1])} vs {len(b[1])} steps"


def _where_texts_differ(a: str, b: str, context: int = 20, shown: int = 40) -> str:
    """Both texts from ``context`` characters before their first difference on."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, at - context)
    return f"at character {at}: {a[start:start + shown]!r} vs {b[start:start + shown]!r}"


__all__ = ["DEFAULT_ACTIONS", "Trajectory", "check_environment"]
