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
from typing import TYPE_CHECKING, Any

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.workflow import Workflow

if TYPE_CHECKING:
    from rft.rollout.model_wrapper import ModelWrapper


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
        transcript = Transcript(self.model, self.initial_messages())
        total_reward = 0.0
        for turn in range(max_turns):
            text = transcript.generate(self.task.sampling)
            answer, reward = self.step(text, turn)
            total_reward += reward
            if answer is None or turn == max_turns - 1:
                break
            transcript.add_user(answer)
        experience = transcript.experience(total_reward)
        experience.metrics["multi_turn/turns"] = float(turn + 1)
        experience.metrics.update(self.episode_metrics())
        return experience


class Transcript:
    """The exact tokens of one conversation that becomes one experience (module
    docstring): the first prompt through the chat template, each model reply as generated
    (action mask 1, its sampling log-probs), each user message as the chat template
    renders it after that reply (action mask 0, log-prob 0). A reply sampled from a
    left-truncated context keeps the engine's action mask (0; counted in
    :attr:`truncated_turns`).

    :param model: the rollout model.
    :param messages: the conversation the episode starts from.
    """

    def __init__(self, model: ModelWrapper, messages: list[dict[str, Any]]) -> None:
        self.model = model
        self.messages = list(messages)
        self.tokens: list[int] = model.tokenizer.encode(model.render(self.messages),
                                                        add_special_tokens=False)
        self.prompt_length = len(self.tokens)
        self.mask: list[bool] = []
        self.logprobs: list[float] = []
        self.version = model.model_version
        self.truncated_turns = 0
        """Replies the engine sampled from a left-truncated context (not trained on)."""
        self._reply: tuple[list[int], str] | None = None

    @property
    def response_length(self) -> int:
        """Tokens after the prompt (replies and user messages)."""
        return len(self.tokens) - self.prompt_length

    def generate(self, sampling: dict[str, Any]) -> str:
        """Sample the model's next reply from the exact tokens so far; append it; return
        its text."""
        (reply,) = self.model.generate_from_ids(self.tokens, n=1, **sampling)
        reply_ids = reply.response_tokens.tolist()
        reply_logprobs = (reply.logprobs.tolist() if reply.logprobs is not None
                          else [0.0] * len(reply_ids))
        text = self.model.decode(reply_ids)
        # the engine's mask: 0 where it sampled from a left-truncated context
        mask = (reply.action_mask.tolist() if reply.action_mask is not None
                else [True] * len(reply_ids))
        self.truncated_turns += int(bool(reply.info.get("prompt_truncated", False)))
        self.tokens += reply_ids
        self.mask += mask
        self.logprobs += reply_logprobs
        self.version = reply.model_version
        self._reply = (reply_ids, text)
        return text

    def add_user(self, answer: str) -> None:
        """Append the user message ``answer`` after the last reply (masked out)."""
        assert self._reply is not None, "add_user follows generate"
        reply_ids, text = self._reply
        env_ids = environment_tokens(self.model, self.messages, reply_ids, text, answer)
        content, _ = reply_content(self.model, reply_ids)
        self.messages = self.messages + [{"role": "assistant", "content": content},
                                         {"role": "user", "content": answer}]
        self.tokens += env_ids
        self.mask += [False] * len(env_ids)
        self.logprobs += [0.0] * len(env_ids)
        self._reply = None

    def experience(self, reward: float) -> Experience:
        """The conversation as one experience with ``reward``."""
        return Experience(tokens=torch.tensor(self.tokens, dtype=torch.long),
                          prompt_length=self.prompt_length, reward=reward,
                          logprobs=torch.tensor(self.logprobs, dtype=torch.float32),
                          action_mask=torch.tensor(self.mask, dtype=torch.bool),
                          model_version=self.version)


def reply_content(model: ModelWrapper, reply_ids: list[int]) -> tuple[str, str]:
    """``(content, stop)``: the reply decoded with special tokens kept, split before the
    special tokens it ends with (its stop token; ``""`` for a reply cut at the token
    limit)."""
    special = set(model.tokenizer.all_special_ids)
    end = len(reply_ids)
    while end > 0 and reply_ids[end - 1] in special:
        end -= 1
    return (model.decode(reply_ids[:end], skip_special_tokens=False),
            model.decode(reply_ids[end:], skip_special_tokens=False))


def environment_tokens(model: ModelWrapper, messages: list[dict[str, Any]],
                       reply_ids: list[int], text: str, answer: str) -> list[int]:
    """Token ids the chat template puts between the model's reply and the next generation:
    the rest of the assistant turn, the user message, the generation prompt.

    The reply's content is its tokens decoded with special tokens kept, less the special
    tokens it ends with (its stop token: ``<|im_end|>``, or another EOS such as
    ``<|endoftext|>`` that the template never writes); the template renders that content
    verbatim, and what it writes after it follows the reply's tokens as generated, less
    the stop token when the template writes the same one (``text``, the reply without
    special tokens, is what the workflow read; the template sees the exact content).
    """
    content, stop = reply_content(model, reply_ids)
    before = model.render(messages) + content
    after = model.render(messages + [{"role": "assistant", "content": content},
                                     {"role": "user", "content": answer}])
    if not after.startswith(before):
        raise RftError("multi-turn workflow: the chat template does not extend the "
                       "conversation as generated (reply text does not round-trip); "
                       "use a template that renders assistant turns verbatim")
    rest = after[len(before):]
    if stop and rest.startswith(stop):  # the template's own end of turn: generated already
        rest = rest[len(stop):]
    ids: list[int] = model.tokenizer.encode(rest, add_special_tokens=False)
    return ids


__all__ = ["MultiTurnArgs", "MultiTurnWorkflow", "Transcript", "environment_tokens",
           "reply_content"]
