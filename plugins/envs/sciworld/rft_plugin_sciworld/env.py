"""The ``sciworld`` environment: AllenAI's ScienceWorld simulator behind rft's
:class:`~rft.environment.Environment` contract.

A task row names a ScienceWorld task and variation::

    {"task_name": "boil", "var_num": 0}

or, as Trinity-RFT's data script writes it, the same as a JSON string in the prompt column
(``format.prompt_key: game_file``): ``{"game_file": "{\\"task_name\\": \\"boil\\", ...}"}``.
A row's ``jar_path`` (Trinity's rows carry one) is ignored: the instance's JVM runs
``environment_args.jar_path``, else the jar the ``scienceworld`` wheel ships.

Reward: ScienceWorld scores an episode from 0 to 100 (negative when the agent failed the
task). The episode's reward is the best score reached, normalised, as Trinity-RFT computes
it: ``R = max(0, max_t score_t) / 100``. Each step returns its share of that,
``r_t = (max(0, score_≤t) - max(0, score_<t)) / 100``, so ``Σ_t r_t = R`` (use the
workflow's ``reward: sum``). ``terminated`` when the simulator says the task is completed or
failed; ``truncated`` when its own step limit (``env_step_limit``) ran out first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rft.environment import Environment, StepResult
from rft.errors import RftError
from rft_plugin_sciworld.jvm import NAME, ScienceWorldProcess

if TYPE_CHECKING:
    from rft.workflow import Task

SYSTEM_PROMPT = """\
You are a scientist carrying out an experiment in ScienceWorld, a text-based simulated \
world. Each turn you read an observation and do exactly one thing. Think first inside \
<think> </think>, then write the command inside <action> </action>. Finish the task on \
your own; nobody will answer questions.

Commands (OBJ is an object, LOC a location):
  look around | look at OBJ | examine OBJ | read OBJ | inventory
  teleport to LOC | go to LOC | open OBJ | close OBJ
  pick up OBJ | put down OBJ | move OBJ to OBJ | pour OBJ into OBJ | mix OBJ
  activate OBJ | deactivate OBJ | use OBJ [on OBJ]
  connect OBJ to OBJ | disconnect OBJ
  eat OBJ | flush OBJ | focus on OBJ (declare the object your task is about)
  wait (ten steps) | wait1 (one step)

Example: <think>The water is in the kitchen.</think><action>teleport to kitchen</action>"""
"""Instructions shown before the first observation (the commands are ScienceWorld's)."""


@dataclass(frozen=True)
class SciWorldArgs:
    """``environment_args`` of ``sciworld``."""

    simplification: str = "easy"
    """ScienceWorld's simplifications, comma separated (``easy`` = all of them:
    teleporting, open doors and containers, self-watering pots, no electrical actions
    where the task allows); ``""``: none. Trinity-RFT plays ``easy``."""
    env_step_limit: int = 100
    """ScienceWorld's own limit of moves per episode (its ``envStepLimit``); past it the
    episode is ``truncated``."""
    jar_path: str | None = None
    """The simulator's jar; ``None``: the one the ``scienceworld`` wheel ships."""
    timeout: float = 60.0
    """Seconds one call into the JVM (a reset, a step) may take; longer: the JVM is stopped
    and the episode fails with one line."""
    start_timeout: float = 300.0
    """Seconds the JVM's start and a task load (with its gold path) may take."""
    stable_order: bool = True
    """Start the JVM with constant identity hash codes so ScienceWorld lists a room's
    objects in the same order on every reset and in every JVM (a task then plays the same
    every time, as the environment contract asks); ``False``: the simulator's own
    hash order, which changes between resets, ~14 % faster steps
    (:data:`~rft_plugin_sciworld.jvm.STABLE_ORDER_OPTIONS`)."""
    gold_path: bool = False
    """Ask the simulator for a gold action sequence on each task load; it is in the reset
    info as ``gold_actions`` (walkthroughs for SFT)."""

    def __post_init__(self) -> None:
        if self.env_step_limit < 1:
            raise ValueError(f"env_step_limit must be >= 1, got {self.env_step_limit}")
        if self.jar_path is not None and not Path(self.jar_path).expanduser().is_file():
            raise ValueError(f"jar_path: file {self.jar_path!r} does not exist")
        for name in ("timeout", "start_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name):g}")


@dataclass(frozen=True)
class SciWorldTask:
    """One ScienceWorld task: its name and variation."""

    task_name: str
    var_num: int


def task_of(task: Task) -> SciWorldTask:
    """The ScienceWorld task a row names (module docstring for the row forms).

    :raises RftError: the row names none; one line naming the row.
    """
    row: Any = task.raw
    if "task_name" not in row and isinstance(task.prompt, str):
        try:
            row = json.loads(task.prompt)
        except json.JSONDecodeError:
            row = {}
    where = f"environment '{NAME}': taskset '{task.taskset}' row {task.index}"
    if not isinstance(row, dict) or not isinstance(row.get("task_name"), str):
        raise RftError(f"{where} names no ScienceWorld task: give 'task_name' and 'var_num' "
                       "(or Trinity-RFT's JSON string of them as the prompt)")
    var_num = row.get("var_num", 0)
    if isinstance(var_num, bool) or not isinstance(var_num, (int, str)) or \
            not str(var_num).lstrip("-").isdigit():
        raise RftError(f"{where}: var_num must be an integer, got {var_num!r}")
    return SciWorldTask(row["task_name"], int(var_num))


class SciWorldEnvironment(Environment):
    """ScienceWorld in a JVM of its own (:class:`~rft_plugin_sciworld.jvm.ScienceWorldProcess`),
    started on the first ``reset`` and reused for every episode of this instance; a task is
    loaded only when it differs from the last one."""

    Args: ClassVar[type | None] = SciWorldArgs
    reusable: ClassVar[bool] = True
    default_action_parser: ClassVar[str] = "action_tag"

    def __init__(self, args: SciWorldArgs | None = None) -> None:
        super().__init__(args if args is not None else SciWorldArgs())
        self.args: SciWorldArgs
        self.jvm: ScienceWorldProcess | None = None
        self._loaded: SciWorldTask | None = None
        self._best = 0
        self._over = True

    def system_prompt(self) -> str | None:
        return SYSTEM_PROMPT

    def _process(self) -> ScienceWorldProcess:
        if self.jvm is None:
            self.jvm = ScienceWorldProcess(self.args.jar_path, self.args.env_step_limit,
                                           self.args.timeout, self.args.start_timeout,
                                           self.args.stable_order)
        return self.jvm

    def reset(self, task: Task, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Load the row's task and variation (ScienceWorld is deterministic given them, so
        ``seed`` changes nothing) and return the task description and the first look."""
        wanted = task_of(task)
        jvm = self._process()
        if wanted != self._loaded:
            self._load(jvm, wanted, task)
        look, _ = jvm.call("reset", jvm.env.reset)
        description = jvm.call("task description", jvm.env.get_task_description)
        self._best, self._over = 0, False
        info: dict[str, Any] = {"task_name": wanted.task_name, "var_num": wanted.var_num,
                                "score": 0, "won": False}
        if self.args.gold_path:
            info["gold_actions"] = jvm.call("gold path", jvm.env.get_gold_action_sequence)
        return f"{description}\n\n{look}", info

    def _load(self, jvm: ScienceWorldProcess, wanted: SciWorldTask, task: Task) -> None:
        names = jvm.call("task names", jvm.env.get_task_names)
        where = f"environment '{NAME}': taskset '{task.taskset}' row {task.index}"
        if wanted.task_name not in names:
            raise RftError(f"{where}: unknown ScienceWorld task '{wanted.task_name}' "
                           f"(known: {', '.join(names)})")
        variations = jvm.call("variations", jvm.env.get_max_variations, wanted.task_name)
        if not 0 <= wanted.var_num < variations:
            raise RftError(f"{where}: var_num {wanted.var_num} of '{wanted.task_name}' is "
                           f"out of range 0..{variations - 1}")
        self._loaded = None
        jvm.call(f"load of '{wanted.task_name}' variation {wanted.var_num}", jvm.env.load,
                 wanted.task_name, wanted.var_num, self.args.simplification,
                 self.args.gold_path, timeout=self.args.start_timeout)
        self._loaded = wanted

    def step(self, action: str) -> StepResult:
        """One command; the reward is the step's share of the normalised best score
        (module docstring)."""
        if self.jvm is None or self._loaded is None:
            raise RftError(f"environment '{NAME}': step() before reset()")
        if self._over:
            return StepResult("The episode is over.", 0.0, terminated=True,
                              info={"score": self._best, "won": self._best >= 100})
        observation, _, done, sw_info = self.jvm.call("step", self.jvm.env.step, action)
        score = int(sw_info["score"])
        best = max(self._best, score, 0)
        reward = (best - self._best) / 100.0
        self._best = best
        won = score >= 100
        truncated = bool(done) and not won and score >= 0 and \
            int(sw_info["moves"]) > self.args.env_step_limit
        self._over = bool(done)
        info = {"score": score, "best_score": best, "won": won, "moves": int(sw_info["moves"])}
        return StepResult(str(observation), reward, terminated=bool(done) and not truncated,
                          truncated=truncated, info=info)

    def close(self) -> None:
        """Stop the JVM (idempotent)."""
        if self.jvm is not None:
            self.jvm.close()
        self._loaded = None
