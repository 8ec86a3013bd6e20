"""Test helpers for the step-wise algorithms (this distribution and those built on its
episodes, e.g. rft-plugin-gigpo): hand-built episode steps, the check that an explorer
operator equals its trainer-side advantage fn on one-step episodes, and a two-step
workflow for tiny runs.

Not imported by the plugin itself; tests import it as
``rft_plugin_multi_step_grpo.testing``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rft import hookimpl
from rft.buffer.operators import ExperienceOperator
from rft.contracts import AdvantageInputs
from rft.experience import EID, Experience
from rft.testing.algorithms import close
from rft.workflow import Workflow
from rft_plugin_multi_step_grpo.episodes import EPISODE_KEY

__all__ = ["TwoStepWorkflow", "assert_operator_is_trainer_side", "episode_step",
           "workflow_plugin"]


def episode_step(task: int, episode: str, step: int, *, reward: float | None = None,
                 length: int = 3, mask_last: bool = False, batch: int = 0,
                 **info: Any) -> Experience:
    """Step ``step`` (``eid.step``) of episode ``episode`` (``info["episode"]``) of task
    ``task`` in explore step ``batch``: a 2-token prompt and ``length`` response tokens
    (the last one masked out with ``mask_last``), ``reward``, and ``info`` entries such as
    ``env_state_hash="s0"``."""
    mask = torch.ones(length, dtype=torch.bool)
    if mask_last:
        mask[-1] = False
    exp = Experience(tokens=torch.arange(2 + length), prompt_length=2, reward=reward,
                     action_mask=mask, eid=EID(batch=batch, task=task, run=0, step=step))
    exp.info[EPISODE_KEY] = episode
    exp.info.update(info)
    return exp


def assert_operator_is_trainer_side(operator: ExperienceOperator,
                                    advantage_fn: Callable[[AdvantageInputs, Any], Any],
                                    args: Any, rows: Sequence[tuple[int, float]]) -> None:
    """Experiences without episode ids are one-step episodes (one per ``eid.run``): the
    explorer ``operator`` gives each the advantages ``advantage_fn`` (with ``args``) gives
    the same batch in the trainer. ``rows``: ``(task, reward)`` per experience, 3 response
    tokens each."""
    experiences = [Experience(tokens=torch.arange(5), prompt_length=2, reward=reward,
                              eid=EID(batch=0, task=task, run=i))
                   for i, (task, reward) in enumerate(rows)]
    out, _ = operator.process(experiences)
    rewards = torch.zeros(len(rows), 3, dtype=torch.float64)  # (B, T)
    rewards[:, -1] = torch.tensor([r for _, r in rows], dtype=torch.float64)
    ours, _ = advantage_fn(AdvantageInputs(rewards, torch.ones_like(rewards),
                                           [e.eid.group for e in experiences]), args)
    given: list[torch.Tensor] = []
    for exp in out:
        assert exp.advantages is not None, f"{exp.eid}: the operator gave no advantages"
        given.append(exp.advantages)
    close(torch.stack(given).double(), ours)


class TwoStepWorkflow(Workflow):
    """Each episode: an answer, then another after the nudge ``Again:``; the steps carry
    ``info["episode"]`` and ``eid.step`` (0, 1). :meth:`finish` sets the rewards (and
    whatever else a test needs) once both steps are taken."""

    def run(self) -> list[Experience]:
        messages = self.task.chat_messages()
        out: list[Experience] = []
        for _ in range(self.task.repeat_times):
            episode = uuid.uuid4().hex
            (first,) = self.model.chat(messages, n=1, **self.task.sampling)
            again = messages + [{"role": "assistant", "content": self.response_text(first)},
                                {"role": "user", "content": "Again:"}]
            (second,) = self.model.chat(again, n=1, **self.task.sampling)
            self.finish(first, second)
            for step, exp in enumerate((first, second)):
                exp.info[EPISODE_KEY] = episode
                exp.eid = EID(step=step)
                out.append(exp)
        return out

    def finish(self, first: Experience, second: Experience) -> None:
        """Score the episode: the last answer's reward on both steps (Trinity-RFT's reward
        propagation)."""
        first.reward = self.score(second, self.response_text(second))


def workflow_plugin(name: str, workflow: type[Workflow]) -> object:
    """A plugin object registering ``workflow`` as ``name`` (for ``rft_run(plugins=…)``)."""

    class _Plugin:
        @hookimpl
        def register_workflows(self) -> dict[str, Any]:
            return {name: workflow}

    return _Plugin()
