"""What a workflow talks to: an inference engine that answers with experiences.

    exps = model.chat(task.chat_messages(), n=4, temperature=1.0)
    text = model.decode(exps[0].response_tokens)

Every call returns :class:`~rft.experience.Experience` objects carrying the prompt and
response ids, the sampling log-probs and the weights version. A response whose prompt was
left-truncated gets an all-zero action mask: it is kept (and counted) but not trained on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.explorer.engine import Completion, InferenceEngine, SamplingArgs

_SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingArgs)}


def sampling_args(defaults: SamplingArgs, overrides: dict[str, Any]) -> SamplingArgs:
    """``defaults`` with ``overrides`` applied; ``None`` values keep the default.

    ``logprobs`` given as a number (the config's count of top log-probs) means "return
    log-probs"; unknown names raise :class:`RftError`.
    """
    values: dict[str, Any] = {}
    for name, value in overrides.items():
        if value is None or name == "n":
            continue
        if name not in _SAMPLING_FIELDS:
            raise RftError(f"unknown sampling argument {name!r}; known: "
                           f"{', '.join(sorted(_SAMPLING_FIELDS))}")
        if name == "logprobs":
            value = True
        values[name] = tuple(value) if name in ("stop", "stop_token_ids") else value
    return dataclasses.replace(defaults, **values)


def experience_from_completion(completion: Completion) -> Experience:
    """One experience per completion (see the module docstring for the mask rule)."""
    response_length = len(completion.token_ids)
    mask = torch.full((response_length,), not completion.prompt_truncated, dtype=torch.bool)
    return Experience(
        tokens=torch.tensor(completion.tokens, dtype=torch.long),
        prompt_length=len(completion.prompt_token_ids),
        logprobs=completion.logprobs,
        action_mask=mask,
        model_version=completion.model_version,
        info={"finish_reason": completion.finish_reason,
              "prompt_truncated": completion.prompt_truncated},
    )


class ModelWrapper:
    """An engine plus default sampling settings, returning experiences.

    :param engine: the inference engine.
    :param defaults: sampling settings used when a call does not override them.
    """

    def __init__(self, engine: InferenceEngine, defaults: SamplingArgs | None = None) -> None:
        self.engine = engine
        self.defaults = defaults or SamplingArgs()

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def model_version(self) -> int:
        return self.engine.model_version

    def decode(self, token_ids: Sequence[int] | torch.Tensor, *,
               skip_special_tokens: bool = True) -> str:
        ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def generate(self, prompts: Sequence[str], n: int = 1, **sampling: Any) -> list[Experience]:
        """``n`` experiences per raw-text prompt (no chat template), prompt-major order."""
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        return self._experiences(self.engine.generate(ids, sampling_args(self.defaults, sampling), n))

    def generate_from_ids(self, prompt_ids: Sequence[int], n: int = 1,
                          **sampling: Any) -> list[Experience]:
        """``n`` experiences continuing exactly these prompt token ids (multi-turn)."""
        return self._experiences(self.engine.generate([list(prompt_ids)],
                                                      sampling_args(self.defaults, sampling), n))

    def render(self, messages: Sequence[dict[str, Any]], *,
               add_generation_prompt: bool = True) -> str:
        """The conversation as text through the chat template."""
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def logprobs(self, experience: Experience, *, temperature: float = 1.0) -> torch.Tensor:
        """(R,) log-probs of an experience's response under the current weights."""
        return self.engine.compute_logprobs([experience.tokens.tolist()],
                                            [experience.prompt_length],
                                            temperature=temperature)[0]

    def chat(self, messages: Sequence[dict[str, Any]], n: int = 1,
             **sampling: Any) -> list[Experience]:
        """``n`` experiences for one conversation rendered with the chat template."""
        return self._experiences(
            self.engine.chat([list(messages)], sampling_args(self.defaults, sampling), n))

    def chat_batch(self, conversations: Sequence[Sequence[dict[str, Any]]], n: int = 1,
                   **sampling: Any) -> list[list[Experience]]:
        """Like :meth:`chat` for several conversations at once (one engine call)."""
        results = self.engine.chat([list(c) for c in conversations],
                                   sampling_args(self.defaults, sampling), n)
        return [[experience_from_completion(c) for c in group] for group in results]

    @staticmethod
    def _experiences(results: list[list[Completion]]) -> list[Experience]:
        return [experience_from_completion(c) for group in results for c in group]
