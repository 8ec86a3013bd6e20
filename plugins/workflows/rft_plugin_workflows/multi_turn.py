"""Multi-turn workflows: the model and an environment take turns; one experience per
episode, trained only on the model's own tokens.

Subclass :class:`MultiTurnWorkflow` and implement :meth:`~MultiTurnWorkflow.step`::

    class Guess(MultiTurnWorkflow):
        def step(self, reply, turn):
            if reply.strip() == self.task.truth:
                return None, 1.0              # episode over, reward 1
            return "Wrong, try again.", 0.0   # the environment's next message

The episode's tokens are built exactly: the first prompt through the chat template, then
each model reply as generated (action mask 1, its sampling log-probs), then each
environment message as the chat template renders it after that reply (action mask 0,
log-prob 0). The next turn continues from those exact tokens.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.workflow import Workflow


@dataclass
class MultiTurnArgs:
    """Arguments of multi-turn workflows (``workflow_args``)."""

    max_turns: int = 4
    """Most model turns per episode."""


class MultiTurnWorkflow(Workflow):
    """Base class: ``repeat_times`` episodes, each one experience (see the module docstring)."""

    Args = MultiTurnArgs

    @abstractmethod
    def step(self, reply: str, turn: int) -> tuple[str | None, float]:
        """React to the model's ``reply`` in turn ``turn`` (0-based).

        :return: the environment's next user message (``None`` ends the episode) and the
            reward earned by this reply.
        """

    def reset(self) -> None:
        """Called before each episode (reset the environment's state)."""

    def initial_messages(self) -> list[dict]:
        """The conversation an episode starts from (default: the task's messages)."""
        return self.task.chat_messages()

    def turn_limit(self) -> int:
        """Most model turns per episode (default: ``max_turns`` of the args)."""
        return getattr(self.args or MultiTurnArgs(), "max_turns", MultiTurnArgs.max_turns)

    def episode_metrics(self) -> dict[str, float]:
        """Metrics of the episode that just ended, added to its experience."""
        return {}

    def run(self) -> list[Experience]:
        return [self.episode() for _ in range(self.task.repeat_times)]

    def episode(self) -> Experience:
        """One episode as one experience."""
        self.reset()
        max_turns = self.turn_limit()
        messages = self.initial_messages()
        tokens = self.model.tokenizer.encode(self.model.render(messages),
                                             add_special_tokens=False)
        prompt_length = len(tokens)
        mask: list[bool] = []
        logprobs: list[float] = []
        total_reward = 0.0
        version = self.model.model_version
        for turn in range(max_turns):
            (reply,) = self.model.generate_from_ids(tokens, n=1, **self.task.sampling)
            reply_ids = reply.response_tokens.tolist()
            reply_logprobs = (reply.logprobs.tolist() if reply.logprobs is not None
                              else [0.0] * len(reply_ids))
            text = self.model.decode(reply_ids)
            tokens += reply_ids
            mask += [True] * len(reply_ids)
            logprobs += reply_logprobs
            version = reply.model_version
            answer, reward = self.step(text, turn)
            total_reward += reward
            if answer is None or turn == max_turns - 1:
                break
            env_ids = self._environment_tokens(messages, reply_ids, text, answer)
            messages = messages + [{"role": "assistant", "content": text},
                                   {"role": "user", "content": answer}]
            tokens += env_ids
            mask += [False] * len(env_ids)
            logprobs += [0.0] * len(env_ids)
        experience = Experience(tokens=torch.tensor(tokens, dtype=torch.long),
                                prompt_length=prompt_length, reward=total_reward,
                                logprobs=torch.tensor(logprobs, dtype=torch.float32),
                                action_mask=torch.tensor(mask, dtype=torch.bool),
                                model_version=version)
        experience.metrics["multi_turn/turns"] = float(turn + 1)
        experience.metrics.update(self.episode_metrics())
        return experience

    def _environment_tokens(self, messages: list[dict], reply_ids: list[int], text: str,
                            answer: str) -> list[int]:
        """Token ids the chat template puts between the model's reply and the next
        generation: the rest of the assistant turn, the user message, the generation prompt."""
        before = self.model.render(messages) + self.model.decode(reply_ids,
                                                                 skip_special_tokens=False)
        after = self.model.render(messages + [{"role": "assistant", "content": text},
                                              {"role": "user", "content": answer}])
        if not after.startswith(before):
            raise RftError("multi-turn workflow: the chat template does not extend the "
                           "conversation as generated (reply text does not round-trip); "
                           "use a template that renders assistant turns verbatim")
        return self.model.tokenizer.encode(after[len(before):], add_special_tokens=False)
