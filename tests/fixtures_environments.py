"""Environments for the environment tests: a good one, and one per way of failing. They
live in a module of their own so that a spawned child process can import them
(``out_of_process``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from rft.environment import Environment, StepResult


@dataclass
class GuessArgs:
    """Arguments of :class:`Guess`."""

    top: int = 10
    """Secrets are drawn from 1 … top."""


class Guess(Environment):
    """Guess the number: the secret is the row's ``secret``, else drawn from the seed;
    shaped reward −0.1 per wrong guess, 1 for the right one. Counts instances and closes."""

    Args = GuessArgs
    instances: ClassVar[int] = 0
    closes: ClassVar[int] = 0

    def __init__(self, args: GuessArgs | None = None) -> None:
        super().__init__(args or GuessArgs())
        Guess.instances += 1
        self.secret = 0
        self.closed = False

    def reset(self, task: Any, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        top = self.args.top
        if "secret" in task.raw:
            self.secret = int(task.raw["secret"])
        else:
            self.secret = (seed or 0) % top + 1
        return f"Guess a number from 1 to {top}.", {"top": top}

    def step(self, action: str) -> StepResult:
        if action.strip() == str(self.secret):
            return StepResult("Right!", reward=1.0, terminated=True, info={"won": True})
        hint = "higher" if action.strip().isdigit() and int(action) < self.secret else "lower"
        return StepResult(f"Wrong, {hint}.", reward=-0.1)

    def close(self) -> None:
        if not self.closed:
            Guess.closes += 1
        self.closed = True


class OneShot(Guess):
    """:class:`Guess` that may not be reused across episodes."""

    reusable = False


class Raising(Guess):
    """``step`` raises."""

    def step(self, action: str) -> StepResult:
        raise ValueError("the board is on fire")


class Hanging(Guess):
    """``step`` never returns."""

    def step(self, action: str) -> StepResult:
        time.sleep(3600)
        raise AssertionError("unreachable")


class Crashing(Guess):
    """Runs in a child process whose ``step`` kills it."""

    out_of_process = True

    def step(self, action: str) -> StepResult:
        os._exit(3)


class HangingChild(Hanging):
    """:class:`Hanging` in a child process."""

    out_of_process = True


class GuessChild(Guess):
    """:class:`Guess` in a child process."""

    out_of_process = True


class WrongTypes(Guess):
    """``reset`` returns the observation alone, not ``(observation, info)``."""

    def reset(self, task: Any, seed: int | None = None) -> Any:
        return "Guess a number."


class Unseeded(Guess):
    """Ignores the seed: each reset picks a new secret (the count of resets so far, so no
    two resets ever look alike; a clock draw repeated itself one time in seven)."""

    resets = 0

    def reset(self, task: Any, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        Unseeded.resets += 1
        self.secret = Unseeded.resets
        return f"Guess ({self.secret}).", {}


class UnseededLate(Unseeded):
    """:class:`Unseeded` whose first observations differ only after a long common start (as
    ScienceWorld's did: the room's objects listed in another order)."""

    def reset(self, task: Any, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        observation, info = super().reset(task, seed)
        return "You are in a room. " * 6 + observation, info


class CrashingOnOdd(Guess):
    """Runs in a child process that dies on the first step of tasks with an odd index."""

    out_of_process = True

    def reset(self, task: Any, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.odd = task.index % 2 == 1
        return super().reset(task, seed)

    def step(self, action: str) -> StepResult:
        if self.odd:
            os._exit(3)
        return super().step(action)


class TupleStep(Guess):
    """``step`` returns Gymnasium's tuple instead of a :class:`StepResult`."""

    def step(self, action: str) -> Any:
        return "Wrong.", 0.0, False, False, {}


class NaNReward(Guess):
    """``step`` returns a NaN reward."""

    def step(self, action: str) -> StepResult:
        return StepResult("Wrong.", reward=float("nan"))


class ClosesOnce(Guess):
    """``close`` raises the second time."""

    def close(self) -> None:
        if self.closed:
            raise RuntimeError("already closed")
        super().close()


class PicklesBadly(Guess):
    """Out of process, but its ``info`` holds what cannot cross a pipe."""

    out_of_process = True

    def reset(self, task: Any, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        observation, _ = super().reset(task, seed)
        return observation, {"handle": lambda: None}


class HangingEverywhere(Hanging):
    """``step`` and ``close`` never return."""

    def close(self) -> None:
        time.sleep(3600)


class StartsAServer(Guess):
    """Out of process; ``reset`` starts a long-lived program (its pid in ``info``), as a
    JVM-backed environment would, and never stops it; ``step("hang")`` never returns."""

    out_of_process = True

    def reset(self, task: Any, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        import subprocess

        self.server = subprocess.Popen(["sleep", "3600"], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        observation, info = super().reset(task, seed)
        return observation, {**info, "server": self.server.pid}

    def step(self, action: str) -> StepResult:
        if action == "hang":
            time.sleep(3600)
        return super().step(action)
