"""The ``textworld`` environment: a TextWorld game (``.z8`` / ``.ulx``) played through
TextWorld's own engine (:func:`textworld.start`).

A task row names its game in ``game_file`` (absolute, or relative to the environment arg
``game_dir``, else to the working directory). ``reset`` starts the game; the observation is
TextWorld's feedback cleaned of the ASCII banner and prompt
(:func:`rft_plugin_textworld.text.clean_feedback`), optionally followed by the admissible
commands. ``step`` plays one command: the reward is the game's score gained by it (the
quest's points; 1 when a one-quest game is won), ``terminated`` when the game is won or
lost, ``truncated`` after ``max_episode_steps`` commands. ``info`` carries ``won``,
``lost``, ``score``, ``max_score`` and ``admissible_actions``. Interpreter commands that
would end or rewind the game (:data:`META_COMMANDS`: ``quit``, ``restart``, ``save``, ...)
are answered without reaching it; a command is cut to plain ASCII words
(:func:`clean_command`: the interpreter crashes or hangs on some other bytes). Calls into
TextWorld hold one lock per process (:data:`ENGINE_LOCK`): its parsers are not thread-safe.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rft.environment import Environment, EnvironmentFailure, StepResult
from rft_plugin_textworld.text import clean_feedback

if TYPE_CHECKING:
    from rft.workflow import Task

ENGINE_LOCK = threading.Lock()
"""Held around every call into TextWorld: its game loading and state tracking share
parsers (tatsu) that break when two threads use them at once (``environment_workflow``
runs environment calls in threads under ``env_timeout``); the calls take milliseconds."""

META_COMMANDS = frozenset({"quit", "q", "restart", "save", "restore", "undo", "script",
                           "unscript", "transcript", "noscript"})
"""Interpreter commands that would end, rewind or write files instead of playing; answered
with :data:`NOT_AVAILABLE` without reaching the game."""
NOT_AVAILABLE = "That command is not available in this game."
MAX_COMMAND_CHARS = 120
"""Longest command passed to the interpreter (longer ones are cut)."""
_NOT_COMMAND_TEXT = re.compile(r"[^A-Za-z0-9 ,.'!?-]+")


def clean_command(action: str) -> str:
    """``action`` as the interpreter may read it: ASCII letters, digits, spaces and
    ``,.'!?-`` only (anything else becomes a space: frotz crashes the process on some
    control and non-ASCII bytes, and dumb-frotz reads ``\\`` as its own command prefix and
    then waits forever), runs of spaces made one, at most :data:`MAX_COMMAND_CHARS`."""
    return " ".join(_NOT_COMMAND_TEXT.sub(" ", action).split())[:MAX_COMMAND_CHARS]


SYSTEM_PROMPT = ("You are playing a text adventure game. Read the goal and the room, then "
                 "reply with one command only, such as: take apple, open box, "
                 "take coin from chest, insert key into crate.")
"""The agent's instructions (:meth:`TextWorldEnvironment.system_prompt`)."""


@dataclass(frozen=True)
class TextWorldArgs:
    """Arguments of the ``textworld`` environment (a taskset's ``environment_args``)."""

    game_dir: str | None = None
    """Folder that relative ``game_file`` paths are read from; ``None``: the working
    directory."""
    max_episode_steps: int = 20
    """Commands after which the episode is truncated."""
    show_admissible: bool = False
    """Append ``Admissible commands: a, b, ...`` (TextWorld's ``admissible_commands``) to
    every observation."""
    system_prompt: str | None = None
    """Instructions before the first observation; ``None``: :data:`SYSTEM_PROMPT`."""

    def __post_init__(self) -> None:
        if self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {self.max_episode_steps}")


def game_path(row: dict[str, Any], game_dir: str | None) -> str:
    """The game file a task row names (module docstring).

    :raises EnvironmentFailure: no ``game_file`` in the row, or no such file (one line).
    """
    name = row.get("game_file")
    if not isinstance(name, str) or not name:
        raise EnvironmentFailure(f"textworld: the task row has no 'game_file' (keys: "
                                 f"{sorted(row)})")
    path = name if os.path.isabs(name) or game_dir is None else os.path.join(game_dir, name)
    if not os.path.isfile(path):
        raise EnvironmentFailure(f"textworld: game file {path} not found (task row "
                                 f"game_file={name!r}"
                                 + (f", environment_args.game_dir={game_dir!r})"
                                    if game_dir is not None else ")"))
    return path


class TextWorldEnvironment(Environment):
    """A TextWorld game per task (module docstring); one instance plays many games, the
    engine process of the last game kept until another game or :meth:`close`."""

    Args: ClassVar[type | None] = TextWorldArgs
    reusable: ClassVar[bool] = True
    default_action_parser: ClassVar[str] = "raw"

    def __init__(self, args: TextWorldArgs | None = None) -> None:
        super().__init__(args if args is not None else TextWorldArgs())
        self.args: TextWorldArgs
        self._env: Any = None
        self._state: Any = None
        self._path: str | None = None
        self._steps = 0
        self._score = 0
        self._done = True

    def system_prompt(self) -> str | None:
        return self.args.system_prompt if self.args.system_prompt is not None else SYSTEM_PROMPT

    def _start(self, path: str) -> None:
        import textworld

        if self._path == path and self._env is not None:
            return
        self.close()
        infos = textworld.EnvInfos(admissible_commands=True, won=True, lost=True, score=True,
                                   max_score=True, objective=True)
        with ENGINE_LOCK, warnings.catch_warnings():
            # jericho's "not fully supported" note: TextWorld's own wrapper keeps the score
            warnings.filterwarnings("ignore", message=".*is not fully supported")
            self._env = textworld.start(path, request_infos=infos)
        self._path = path

    def _observe(self, feedback: str, state: Any) -> tuple[str, dict[str, Any]]:
        admissible = sorted(state.get("admissible_commands") or [])
        info = {"won": bool(state.get("won")), "lost": bool(state.get("lost")),
                "score": int(state.get("score") or 0),
                "max_score": int(state.get("max_score") or 0),
                "admissible_actions": admissible}
        text = clean_feedback(feedback)
        if self.args.show_admissible and admissible:
            text += "\n\nAdmissible commands: " + ", ".join(admissible)
        return text, info

    def reset(self, task: Task, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start the game of ``task.raw["game_file"]`` from its beginning (the games are
        deterministic: ``seed`` changes nothing)."""
        self._start(game_path(task.raw, self.args.game_dir))
        with ENGINE_LOCK:
            state = self._env.reset()
        self._state = state
        self._steps, self._score, self._done = 0, int(state.get("score") or 0), False
        obs, info = self._observe(state.feedback, state)
        return obs, info

    def step(self, action: str) -> StepResult:
        """Play ``action`` (one command) in the running game."""
        if self._env is None or self._done:
            raise EnvironmentFailure("textworld: step() without a running episode (call "
                                     "reset() first; the last episode has ended)")
        action = clean_command(action)
        words = action.lower().split()
        if words and words[0] in META_COMMANDS:
            self._steps += 1
            _, info = self._observe("", self._state)
            truncated = self._steps >= self.args.max_episode_steps
            self._done = truncated
            return StepResult(NOT_AVAILABLE, truncated=truncated, info=info)
        with ENGINE_LOCK:
            state, score, done = self._env.step(action)
        self._state = state
        self._steps += 1
        reward = float(int(score or 0) - self._score)
        self._score = int(score or 0)
        obs, info = self._observe(state.feedback, state)
        terminated = bool(done) or info["won"] or info["lost"]
        truncated = not terminated and self._steps >= self.args.max_episode_steps
        self._done = terminated or truncated
        return StepResult(obs, reward=reward, terminated=terminated, truncated=truncated,
                          info=info)

    def close(self) -> None:
        """Stop the game's engine process; idempotent."""
        env, self._env, self._path, self._done = self._env, None, None, True
        if env is not None:
            with ENGINE_LOCK:
                env.close()


__all__ = ["ENGINE_LOCK", "META_COMMANDS", "SYSTEM_PROMPT", "TextWorldArgs",
           "TextWorldEnvironment", "clean_command", "game_path"]
