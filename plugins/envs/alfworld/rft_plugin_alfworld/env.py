"""The ``alfworld`` environment: ALFWorld's household games on TextWorld's PDDL engine,
behind rft's :class:`~rft.environment.Environment` contract.

The engine is the one the ``alfworld`` package plays its text games with
(``AlfredTWEnv``'s path): ``textworld.start(game.tw-pddl)`` on ``PddlEnv`` (Fast Downward
grounds the actions) wrapped in alfworld's ``AlfredDemangler`` (object ids become
``apple 1``, ``countertop 2``). The observation is the game's text; the reset info carries
``admissible_commands`` and the task sentence, and (``walkthrough: true``) a winning command
list.

Reward: ``1.0`` on the step that wins (the task's goal holds; the episode terminates), else
``0.0`` — ALFWorld's score. A command the game does not know answers "Nothing happens." and
changes nothing. Game rows: :mod:`rft_plugin_alfworld.games`.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rft.environment import Environment, StepResult
from rft.errors import RftError
from rft_plugin_alfworld.games import NAME, game_file_of

if TYPE_CHECKING:
    from rft.workflow import Task

SYSTEM_PROMPT = """\
You are an agent in a household, described to you in text. Each turn you read an \
observation and do exactly one thing. Think first inside <think> </think>, then write the \
command inside <action> </action>. Finish the task on your own; nobody will answer.

Commands:
  look | inventory (you carry at most one thing) | examine (something)
  go to (receptacle) | open (receptacle) | close (receptacle)
  take (object) from (receptacle) | move (object) to (receptacle)
  use (object) | heat (object) with (receptacle) | cool (object) with (receptacle)
  clean (object) with (receptacle) | slice (object) with (object)

Example: <think>The apple may be on the countertop.</think><action>go to countertop 1</action>"""
"""Instructions shown before the first observation (the commands are ALFWorld's)."""

ENGINE_LOCK = threading.Lock()
"""TextWorld's PDDL engine is not thread-safe (two games loading at once on two runner
threads corrupt each other's grammar parse: "pop from empty list"); every call into it
holds this lock. Its calls take milliseconds, a load a few seconds."""

TASK_SENTENCE = re.compile(r"Your task is to: (.*?)\s*$", re.MULTILINE)


def alfworld_missing() -> str | None:
    """The one-line reason ALFWorld cannot run here, or ``None``."""
    try:
        import alfworld.agents.environment.alfred_tw_env  # noqa: F401
        import fast_downward  # noqa: F401
    except ImportError as exc:
        return (f"environment '{NAME}': the alfworld package cannot be imported ({exc}); "
                "install rft-plugin-alfworld with scripts/setup.sh (it builds "
                "fast-downward-textworld first, README of the plugin)")
    return None


@dataclass(frozen=True)
class AlfWorldArgs:
    """``environment_args`` of ``alfworld``."""

    data_path: str | None = None
    """Folder of the games that relative ``game_file`` rows name; ``None``:
    ``$ALFWORLD_DATA`` (which the alfworld package sets to ``~/.cache/alfworld`` when
    unset). A game that is not there, in a folder that holds none, is one line saying so."""
    walkthrough: bool = False
    """Put a winning command list into the reset info (``walkthrough``): the game's own,
    else TextWorld's planner finds one (SFT data)."""


class AlfWorldEnvironment(Environment):
    """ALFWorld text games (module docstring). One instance plays any number of episodes; a
    game file is loaded when it differs from the last one."""

    Args: ClassVar[type | None] = AlfWorldArgs
    reusable: ClassVar[bool] = True
    default_action_parser: ClassVar[str] = "action_tag"

    def __init__(self, args: AlfWorldArgs | None = None) -> None:
        super().__init__(args if args is not None else AlfWorldArgs())
        self.args: AlfWorldArgs
        self._game: Any = None
        self._game_file: Path | None = None
        self._over = True
        self._won = False

    def system_prompt(self) -> str | None:
        return SYSTEM_PROMPT

    def _open(self, path: Path) -> Any:
        reason = alfworld_missing()
        if reason is not None:
            raise RftError(reason)
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

        infos = textworld.EnvInfos(admissible_commands=True, won=True,
                                   extras=["walkthrough"] if self.args.walkthrough else [])
        try:
            with ENGINE_LOCK:
                return textworld.start(str(path), infos, wrappers=[AlfredDemangler])
        except Exception as exc:  # noqa: BLE001 - a broken game file: one line naming it
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RftError(f"environment '{NAME}': game file {path} cannot be loaded: "
                           f"{first}") from None

    def reset(self, task: Task, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start the row's game (ALFWorld games are deterministic: ``seed`` changes
        nothing)."""
        path = game_file_of(task, self.args.data_path)
        if path != self._game_file:
            self.close()
            self._game = self._open(path)
            self._game_file = path
        with ENGINE_LOCK:
            state = self._game.reset()
        observation = str(state.feedback).strip()
        self._over, self._won = False, False
        found = TASK_SENTENCE.search(observation)
        info: dict[str, Any] = {
            "game_file": str(path), "won": False,
            "task": found.group(1).rstrip(".") if found else "",
            "admissible_commands": list(state["admissible_commands"]),
        }
        if self.args.walkthrough:
            info["walkthrough"] = list(state["extra.walkthrough"] or [])
        return observation, info

    def step(self, action: str) -> StepResult:
        """One command; reward 1.0 on the winning step (module docstring)."""
        if self._game is None:
            raise RftError(f"environment '{NAME}': step() before reset()")
        if self._over:
            return StepResult("The episode is over.", 0.0, terminated=True,
                              info={"won": self._won})
        with ENGINE_LOCK:
            state, _, done = self._game.step(action)
        won = bool(state["won"])
        self._over, self._won = bool(done) or won, won
        info = {"won": won, "admissible_commands": list(state["admissible_commands"])}
        return StepResult(str(state.feedback).strip(), 1.0 if won else 0.0,
                          terminated=self._over, info=info)

    def close(self) -> None:
        """Release the game (idempotent)."""
        if self._game is not None:
            with ENGINE_LOCK:
                self._game.close()
        self._game, self._game_file = None, None
