"""Offline training data (SFT / expert data) as experiences.

A dataset row becomes one experience: the prompt rendered with the chat template (with
the assistant generation prompt), then the response tokens and the end-of-turn token;
the action mask covers the response. Rows are read with the taskset reader, so
files, folders, SQLite and their errors behave the same as for tasksets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rft.buffer.storage import ExperienceStorage
from rft.buffer.taskset import TasksetError
from rft.config.schema import FormatConfig
from rft.experience import EID, Experience


def _end_of_turn_id(tokenizer: Any) -> int | None:
    for token in ("<|im_end|>",):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            return token_id
    return tokenizer.eos_token_id


def row_to_sft_experience(row: dict[str, Any], index: int, fmt: FormatConfig, tokenizer: Any,
                          where: str) -> Experience:
    """One prompt/response row (or messages ending with the assistant) as an experience."""
    row = {key: value for key, value in row.items() if value is not None}
    if fmt.messages_key in row and fmt.prompt_type == "messages":
        messages = list(row[fmt.messages_key])
        if not messages or messages[-1].get("role") != "assistant":
            raise TasksetError(f"{where}: row {index}: the last message must be the assistant's")
        prompt_messages, response = messages[:-1], str(messages[-1]["content"])
    else:
        for key in (fmt.prompt_key, fmt.response_key):
            if key not in row:
                raise TasksetError(f"{where}: row {index} has no key {key!r}; keys: "
                                   f"{', '.join(row)}")
        prompt_messages = []
        system = row.get(fmt.system_prompt_key) if fmt.system_prompt_key else None
        if system or fmt.system_prompt:
            prompt_messages.append({"role": "system", "content": system or fmt.system_prompt})
        prompt_messages.append({"role": "user", "content": str(row[fmt.prompt_key])})
        response = str(row[fmt.response_key])
    text = tokenizer.apply_chat_template(prompt_messages, tokenize=False,
                                         add_generation_prompt=True)
    prompt_ids = tokenizer.encode(text, add_special_tokens=False)
    response_ids = tokenizer.encode(response, add_special_tokens=False)
    end = _end_of_turn_id(tokenizer)
    if end is not None:
        response_ids.append(end)
    return Experience(tokens=torch.tensor(prompt_ids + response_ids, dtype=torch.long),
                      prompt_length=len(prompt_ids), reward=0.0,
                      eid=EID(batch="sft", task=index, run=0))


class DatasetStorage(ExperienceStorage):
    """A fixed list of experiences served in order, epoch after epoch (``epochs`` passes)."""

    def __init__(self, name: str, experiences: Sequence[Experience], epochs: int) -> None:
        super().__init__(name)
        if not experiences:
            raise TasksetError(f"dataset {name!r} is empty")
        self._items = list(experiences)
        self._total = len(self._items) * max(1, epochs)
        self._position = 0
        self.written = self._total

    def _append(self, experiences: list[Experience]) -> None:
        raise TypeError(f"dataset {self.name!r} is read-only")

    def _available(self) -> int:
        return self._total - self._position

    def _take(self, count: int) -> list[Experience]:
        taken = [self._items[(self._position + i) % len(self._items)] for i in range(count)]
        self._position += count
        return taken

    def state_dict(self) -> dict[str, int]:
        return {"position": self._position, "read": self.read_count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._position = int(state["position"])
        self.read_count = int(state.get("read", self._position))
