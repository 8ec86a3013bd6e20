"""Environment ``frozen_lake``: the FrozenLake game (:mod:`~rft_plugin_frozen_lake.game`) as
an :class:`rft.environment.Environment`, for ``environment_workflow``.

Each task is a map: ``desc`` of the args (the same map for every task), else one drawn
from the row's ``size`` (default 4), ``p`` (0.8) and ``seed`` (42) with its goal reachable
within ``max_steps`` moves. Actions are a direction (``Up``, ``Down``, ``Left``, ``Right``,
any case) or its number 1 … 4, read from the reply's last ```` ``` ```` block
(``default_action_parser = "last_code_block"``). Reward 1 on the goal (``info["won"]``),
0 in a hole; the episode is truncated after ``max_steps`` moves. An action that is no
direction leaves the player where it is, and the observation says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft.environment import Environment, StepResult
from rft.workflow import Task
from rft_plugin_frozen_lake.game import FrozenLakeGame, generate_map, parse_move
from rft_plugin_frozen_lake.workflow import SYSTEM_PROMPT


@dataclass
class FrozenLakeEnvArgs:
    """Arguments of environment ``frozen_lake`` (``environment_args``)."""

    max_steps: int = 10
    """Moves per episode (then truncated), and the map's bound: its goal is reachable
    within this many moves (Trinity-RFT's ``env_max_steps``)."""
    desc: list[str] | None = None
    """A fixed map for every task (rows of ``S``, ``F``, ``H``, ``G``); ``None``: each
    task's own random map."""
    is_slippery: bool = False
    """Slippery ice: a move may go sideways (gymnasium's dynamics)."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")


class FrozenLakeEnvironment(Environment):
    """FrozenLake episodes (module docstring)."""

    Args = FrozenLakeEnvArgs
    reusable = True
    default_action_parser = "last_code_block"

    def __init__(self, args: FrozenLakeEnvArgs | None = None) -> None:
        super().__init__(args if args is not None else FrozenLakeEnvArgs())
        self.game: FrozenLakeGame | None = None
        self.moves = 0

    @property
    def options(self) -> FrozenLakeEnvArgs:
        assert isinstance(self.args, FrozenLakeEnvArgs)
        return self.args

    def system_prompt(self) -> str | None:
        return SYSTEM_PROMPT

    def reset(self, task: Task, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        row = task.raw or {}
        map_seed = int(row.get("seed", 42))
        desc = self.options.desc or generate_map(int(row.get("size", 4)),
                                                 float(row.get("p", 0.8)), map_seed,
                                                 self.options.max_steps)
        self.game = FrozenLakeGame(desc, is_slippery=self.options.is_slippery,
                                   seed=map_seed if seed is None else seed)
        self.game.reset()
        self.moves = 0
        return self.observation(), {"desc": list(desc)}

    def observation(self, note: str = "") -> str:
        assert self.game is not None
        remaining = self.options.max_steps - self.moves
        return (f"{note}Current observation ({self.moves}):\n{self.game.render()}\n"
                f"You have not reached the goal yet: P is not on G. Give the next action.\n"
                f"At most {remaining} steps remain.")

    def step(self, action: str) -> StepResult:
        if self.game is None:
            raise RuntimeError("step before reset")
        if self.game.finished():
            return StepResult("The episode is over.", reward=0.0, terminated=True,
                              info={"won": self.game.success()})
        move = parse_move(action)
        reward, done = self.game.step(move)
        self.moves += 1
        if done:
            text = "You reached the goal!" if self.game.success() else "You fell into a hole."
            return StepResult(f"{text}\n{self.game.render()}", reward=reward, terminated=True,
                              info={"won": self.game.success()})
        note = ("" if move is not None else
                f"{action.strip()!r} is not a move (Up, Down, Left, Right): you did not move.\n")
        return StepResult(self.observation(note), reward=reward,
                          truncated=self.moves >= self.options.max_steps,
                          info={"won": False})

    def close(self) -> None:
        self.game = None


__all__ = ["FrozenLakeEnvArgs", "FrozenLakeEnvironment", "parse_move"]
