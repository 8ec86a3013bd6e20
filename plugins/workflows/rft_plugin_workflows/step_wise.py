"""Step-wise multi-turn workflows (Trinity-RFT's ``step_wise_*`` pattern): the model and
an environment take turns, and **every model turn is an experience of its own** with its
own reward — where :class:`~rft_plugin_workflows.multi_turn.MultiTurnWorkflow` joins an
episode into one experience.

Subclass :class:`StepWiseWorkflow` and implement :meth:`~StepWiseWorkflow.step`::

    class Guess(StepWiseWorkflow):
        def step(self, reply, step):
            if reply.strip() == str(self.task.truth):
                return None, 1.0                  # episode over; this step's reward
            return "Wrong, try again.", -0.1      # the environment's next message

Each step's experience is one chat call: its prompt is the conversation so far through the
chat template (earlier replies as text), its response the model's reply with the sampling
log-probs. Experiences carry ``info["episode"]`` (an id unique to the episode:
``<random hex>-<index>``, so that episodes stay apart when the explorer splits a task's
rollouts over several workflow runs), ``eid.step`` (0, 1, …), eid suffix ``step<k>``
and the metric ``step_wise/steps`` (the episode's length) — what rft-plugin-multi-step-grpo's
``step_wise_grpo`` reads to put the steps back into episodes. With
``propagate_final_reward`` every step gets the episode's last reward (Trinity-RFT's
``RewardPropagationWorkflow``).

With plain GRPO all steps of all episodes of a task form one group; Trinity-RFT pairs these
workflows with its step-wise GRPO (in rft: ``algorithm_type: multi_step_grpo`` of
rft-plugin-multi-step-grpo, which scores each episode by its last step).
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from rft.experience import EID, Experience
from rft.workflow import Workflow
from rft_plugin_workflows.scoring import reward_parts


@dataclass
class StepWiseArgs:
    """Arguments of step-wise workflows (``workflow_args``)."""

    max_steps: int = 4
    """Most model turns (experiences) per episode."""
    propagate_final_reward: bool = False
    """Give every step the episode's last reward instead of its own."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")


def new_episode_id(index: int) -> str:
    """An episode id unique across workflow runs: ``<random hex>-<index>``."""
    return f"{uuid.uuid4().hex[:12]}-{index}"


def label_steps(steps: list[Experience], episode_id: str) -> None:
    """Mark ``steps`` (in order) as the steps of one episode, as multi-step algorithms
    read them: ``eid.step`` / suffix ``step<k>``, ``info["episode"]``, and the metric
    ``step_wise/steps`` (the episode's length)."""
    for step, exp in enumerate(steps):
        exp.eid = EID(step=step, suffix=f"step{step}")
        exp.info["episode"] = episode_id
        exp.metrics["step_wise/steps"] = float(len(steps))


class StepWiseWorkflow(Workflow):
    """Base class: ``repeat_times`` episodes, one experience per step (module docstring)."""

    Args = StepWiseArgs

    current: Experience | None = None
    """The experience of the step being taken (for :meth:`step` to read or annotate)."""

    @property
    def options(self) -> Any:
        return self.args if self.args is not None else self.Args()

    @abstractmethod
    def step(self, reply: str, step: int) -> tuple[str | None, float]:
        """React to the model's ``reply`` in step ``step`` (0-based).

        :return: the environment's next user message (``None`` ends the episode) and the
            reward of this step.
        """

    def reset(self) -> None:
        """Called before each episode (reset the environment's state)."""

    def initial_messages(self) -> list[dict[str, Any]]:
        """The conversation an episode starts from (default: the task's messages)."""
        return self.task.chat_messages()

    def run(self) -> list[Experience]:
        experiences: list[Experience] = []
        for episode in range(self.task.repeat_times):
            experiences += self.episode(episode)
        return experiences

    def episode(self, episode: int) -> list[Experience]:
        """One episode: its steps' experiences, in order."""
        self.reset()
        messages = self.initial_messages()
        steps: list[Experience] = []
        for step in range(self.options.max_steps):
            (exp,) = self.model.chat(messages, n=1, **self.task.sampling)
            self.current = exp
            reply = self.response_text(exp)
            observation, reward = self.step(reply, step)
            exp.reward = float(reward)
            steps.append(exp)
            if observation is None:
                break
            messages = messages + [{"role": "assistant", "content": reply},
                                   {"role": "user", "content": observation}]
        self.current = None
        label_steps(steps, new_episode_id(episode))
        if self.options.propagate_final_reward:
            final = steps[-1].reward
            for exp in steps:
                exp.reward = final
        return steps


@dataclass
class StepWiseMathArgs(StepWiseArgs):
    """Arguments of ``step_wise_math_workflow``."""

    max_steps: int = 3
    """Most answers per episode."""
    feedback: str = "Your answer scored {reward:g}. Check it and answer again."
    """The environment's reply to an answer below ``success_reward`` (``{reward}``)."""
    success_reward: float = 1.0
    """An answer whose reward reaches this ends the episode."""


class StepWiseMathWorkflow(StepWiseWorkflow):
    """Answer, be told the score, try again: each answer is scored by the task's reward
    function and is one experience with that reward (``reward/<part>`` metrics); an answer
    reaching ``success_reward``, or the ``max_steps``-th, ends the episode."""

    Args = StepWiseMathArgs

    def step(self, reply: str, step: int) -> tuple[str | None, float]:
        assert self.current is not None
        parts = reward_parts(self.task, reply,
                             {"response_tokens": self.current.response_tokens.tolist()},
                             workflow="step_wise_math_workflow")
        self.current.metrics.update({f"reward/{k}": v for k, v in parts.items()})
        reward = sum(parts.values())
        if reward >= self.options.success_reward:
            return None, reward
        return self.options.feedback.format(reward=reward), reward


__all__ = ["StepWiseArgs", "StepWiseMathArgs", "StepWiseMathWorkflow", "StepWiseWorkflow",
           "label_steps", "new_episode_id"]
