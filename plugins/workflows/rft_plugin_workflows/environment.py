"""``environment_workflow``: the policy plays the task's environment (``environment`` of the
taskset, :mod:`rft.environment`), over many turns.

Each episode: the environment's ``reset(task, seed)`` gives the first observation, shown
after the system prompt (the taskset's ``format.system_prompt`` when set, else the
environment's); each model reply goes through the action parser
(``action_parser``, default the environment's ``default_action_parser``) into
``step(action)``, whose observation is the next user message, until ``terminated`` or
``truncated`` or ``max_steps`` replies. A reply the parser rejects does not step the
environment: it earns ``invalid_action_reward`` and the next user message says the action
was invalid (then repeats the last observation). The chat history is the state.

Forms (``experience_form``):

- ``episode`` — one experience per episode (Trinity-RFT's
  ``enable_concatenated_multi_turn``): the exact tokens of the conversation, the model's
  replies trained on (action mask 1), the observations masked out
  (:class:`~rft_plugin_workflows.multi_turn.Transcript`); for ``grpo`` and the like.
- ``step`` — one experience per reply (like
  :class:`~rft_plugin_workflows.step_wise.StepWiseWorkflow`): ``info["episode"]``,
  ``eid.step``, ``info["env_state_hash"]`` (hash of the observation the step acted on:
  GiGPO's anchor states), ``info["step_reward"]`` (the step's own reward ``r_t``) and, as
  ``reward``, the episode's return on every step; for ``multi_step_grpo`` and ``gigpo``.

Rewards (``reward``): ``terminal`` — the last step's reward (plus invalid-action
penalties); ``sum`` — the sum of every step's (shaped) reward. Metrics per episode:
``env/steps``, ``env/success`` (``info["won"]`` of the last step when the environment
says, else the terminal reward > 0), ``env/invalid_actions``, and in the episode form
``env/truncated_context_turns`` (replies the engine sampled from a context left-truncated
to ``max_prompt_tokens``: not trained on, see
:class:`~rft_plugin_workflows.multi_turn.Transcript`; raise ``model.max_prompt_tokens``
to the longest conversation).

Lifecycle: a ``reusable`` environment serves all episodes of the task, else each episode
gets a new instance; each instance is closed, also when the episode fails. Every
environment call runs under ``env_timeout`` seconds (in a child process when the class
declares ``out_of_process``); a failure is one
:class:`~rft.environment.EnvironmentFailure` line, and the runner retries the task or
counts it failed.
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Literal

from rft.environment import ActionParser, Environment, StepResult
from rft.environments import open_environment
from rft.errors import RftError
from rft.experience import Experience
from rft.plugin_kinds import ACTION_PARSER
from rft.plugins import PluginRegistry
from rft.workflow import Workflow
from rft_plugin_workflows.multi_turn import Transcript
from rft_plugin_workflows.step_wise import label_steps, new_episode_id

INVALID_ACTION = ("That reply holds no valid action, so nothing happened. {hint}"
                  "\n\n{observation}")
"""The user message after a reply the parser rejects (``{hint}``: how the parser reads
actions; ``{observation}``: the last observation again)."""

PARSER_HINTS = {
    "last_code_block": "Put the action in a ``` ``` block. ",
    "action_tag": "Put the action between <action> and </action>. ",
    "last_line": "Write the action on the last line. ",
}
"""What the invalid-action message tells the agent, per built-in parser."""


@dataclass
class EnvironmentArgs:
    """Arguments of ``environment_workflow`` (``workflow_args``)."""

    max_steps: int = 10
    """Most model replies per episode."""
    action_parser: str | None = None
    """Registered action parser (``raw``, ``last_code_block``, ``action_tag``,
    ``last_line``, …); ``None``: the environment's ``default_action_parser``."""
    experience_form: Literal["episode", "step"] = "episode"
    """One experience per episode, or one per step (module docstring)."""
    reward: Literal["terminal", "sum"] = "terminal"
    """The episode's reward: the last step's, or the sum of all steps'."""
    invalid_action_reward: float = 0.0
    """Reward of a reply without a valid action (added in both ``reward`` modes)."""
    env_timeout: float | None = 60.0
    """Seconds each environment call may take; ``None``: no limit."""
    seed: int | None = None
    """Seed handed to every ``reset``; ``None``: the environment's own choice."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.experience_form not in ("episode", "step"):
            raise ValueError(f"experience_form must be 'episode' or 'step', got "
                             f"{self.experience_form!r}")
        if self.reward not in ("terminal", "sum"):
            raise ValueError(f"reward must be 'terminal' or 'sum', got {self.reward!r}")
        if self.env_timeout is not None and self.env_timeout <= 0:
            raise ValueError(f"env_timeout must be > 0, got {self.env_timeout}")


def state_hash(observation: str) -> str:
    """A short stable hash of an observation (GiGPO's anchor state)."""
    return hashlib.sha256(observation.encode("utf-8")).hexdigest()[:16]


@dataclass
class Episode:
    """What one episode produced, before it becomes experiences."""

    rewards: list[float]
    """Each reply's reward (the environment's; ``invalid_action_reward`` for an invalid
    one)."""
    states: list[str]
    """Hash of the observation each reply acted on."""
    invalid: list[bool]
    """Which replies held no valid action."""
    last: StepResult | None = None
    """The environment's last answer (``None``: it was never stepped)."""

    def own_rewards(self, mode: str, penalty: float) -> list[float]:
        """``r_t`` of every reply: ``sum`` — its reward; ``terminal`` — ``penalty`` for an
        invalid reply, plus the last step's reward on the last reply (``Σ r_t`` is the
        return either way)."""
        if mode == "sum":
            return list(self.rewards)
        own = [penalty if bad else 0.0 for bad in self.invalid]
        if own and self.last is not None:
            own[-1] += float(self.last.reward)
        return own

    def success(self) -> float:
        """1.0 when won: ``info["won"]`` of the last step, else its reward > 0."""
        if self.last is None:
            return 0.0
        if "won" in self.last.info:
            return float(bool(self.last.info["won"]))
        return float(self.last.reward > 0)


class EnvironmentWorkflow(Workflow):
    """Plays ``task.environment`` with the policy (module docstring)."""

    Args = EnvironmentArgs
    plays_environments = True

    @property
    def options(self) -> EnvironmentArgs:
        args = self.args if self.args is not None else EnvironmentArgs()
        assert isinstance(args, EnvironmentArgs)
        return args

    def environment_class(self) -> type[Environment]:
        if self.task.environment is None:
            raise RftError(f"taskset {self.task.taskset!r}: environment_workflow needs an "
                           "environment (the taskset's environment)")
        return self.task.environment

    def parser(self) -> ActionParser:
        """The task's action parser (resolved by validation), else looked up by name."""
        if self.task.action_parser is not None:
            return self.task.action_parser
        name = self.options.action_parser or self.environment_class().default_action_parser
        return PluginRegistry.create(kinds=[ACTION_PARSER]).get(
            ACTION_PARSER, name, key="workflow_args.action_parser")

    def open(self) -> Environment:
        """A new instance of the task's environment under the time-outs."""
        return open_environment(self.environment_class(), self.task.environment_args,
                                timeout=self.options.env_timeout)

    def run(self) -> list[Experience]:
        env_class = self.environment_class()
        parser = self.parser()
        experiences: list[Experience] = []
        with ExitStack() as closing:
            shared = None
            if env_class.reusable:
                shared = self.open()
                closing.callback(shared.close)
            for index in range(self.task.repeat_times):
                if shared is not None:
                    experiences += self.episode(shared, parser, index)
                    continue
                env = self.open()
                try:
                    experiences += self.episode(env, parser, index)
                finally:
                    env.close()
        return experiences

    def episode(self, env: Environment, parser: ActionParser, index: int) -> list[Experience]:
        """One episode in ``env``: its experience(s) (one, or one per step)."""
        args = self.options
        observation, _ = env.reset(self.task, args.seed)
        system = self.task.system_prompt or env.system_prompt()
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": observation}]
        record = Episode(rewards=[], states=[], invalid=[])
        steps: list[Experience] = []
        transcript = (Transcript(self.model, messages) if args.experience_form == "episode"
                      else None)
        hint = PARSER_HINTS.get(args.action_parser
                                or self.environment_class().default_action_parser, "")
        for turn in range(args.max_steps):
            record.states.append(state_hash(observation))
            if transcript is not None:
                reply = transcript.generate(self.task.sampling)
            else:
                (exp,) = self.model.chat(messages, n=1, **self.task.sampling)
                reply = self.response_text(exp)
                steps.append(exp)
            action = parser(reply)
            record.invalid.append(action is None)
            if action is None:
                record.rewards.append(args.invalid_action_reward)
                answer = INVALID_ACTION.format(hint=hint, observation=observation)
            else:
                result = env.step(action)
                record.last = result
                record.rewards.append(float(result.reward))
                observation = answer = result.observation
                if result.terminated or result.truncated:
                    break
            if turn == args.max_steps - 1:
                break
            if transcript is not None:
                transcript.add_user(answer)
            else:
                messages = messages + [{"role": "assistant", "content": reply},
                                       {"role": "user", "content": answer}]
        own = record.own_rewards(args.reward, args.invalid_action_reward)
        episode_return = float(sum(own))
        metrics = {"env/steps": float(len(own)), "env/success": record.success(),
                   "env/invalid_actions": float(sum(record.invalid))}
        if transcript is not None:
            metrics["env/truncated_context_turns"] = float(transcript.truncated_turns)
            experience = transcript.experience(episode_return)
            experience.metrics.update(metrics)
            return [experience]
        return self.mark_steps(steps, record.states, own, metrics, index)

    def mark_steps(self, steps: list[Experience], states: list[str], own: list[float],
                   metrics: dict[str, float], index: int) -> list[Experience]:
        """The step form's annotations (module docstring): every step gets the episode's
        return ``Σ r_t`` as reward, its own ``r_t`` as ``info["step_reward"]``."""
        label_steps(steps, new_episode_id(index))
        episode_return = float(sum(own))
        for step, exp in enumerate(steps):
            exp.reward = episode_return
            exp.info["env_state_hash"] = states[step]
            exp.info["step_reward"] = own[step]
            exp.metrics.update(metrics)
        return steps


__all__ = ["EnvironmentArgs", "EnvironmentWorkflow", "Episode", "state_hash"]
