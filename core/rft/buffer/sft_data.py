"""Offline training data (SFT / expert data) as experiences.

A dataset row becomes one experience (rows are read with the taskset reader, so files,
folders, SQLite and their errors behave the same as for tasksets):

- ``plaintext`` rows: the prompt (``format.system_prompt_key`` / ``system_prompt``, then
  ``prompt_key`` as the user message) rendered with the chat template and its assistant
  generation prompt, then the ``response_key`` text and the end-of-turn token; the action
  mask covers the response.
- ``messages`` rows (``format.messages_key``, a message list or its JSON text): the last
  message is the assistant's reply and the rest its prompt. A reply with tool calls is
  trained on as the template writes it.
- ``format.enable_concatenated_multi_turn`` (``messages`` rows): the whole conversation is
  one sequence and *every* assistant turn is trained on; system, user and tool turns are
  in the sequence but masked out (:func:`rft.buffer.chat_render.assistant_spans`). The
  response starts at the first assistant turn.
- ``format.tools_key``: a row's tool definitions (a list of dicts or its JSON text) are
  rendered into the prompt by the chat template.
- ``format.chat_template``: the template the rows are rendered with; unset: the model's
  (:mod:`rft.chat_template`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rft.buffer.chat_render import (
    Message,
    assistant_spans,
    encode,
    parse_messages,
    parse_tools,
    render,
    reply_ids,
    tokens_with_mask,
)
from rft.buffer.errors import TasksetError
from rft.buffer.storage import BufferEmpty, ExperienceStorage
from rft.chat_template import dataset_chat_template
from rft.config.schema import FormatConfig
from rft.experience import EID, Experience


def present(row: dict[str, Any]) -> dict[str, Any]:
    """The row without ``None`` values (``datasets`` gives every row every column)."""
    return {key: value for key, value in row.items() if value is not None}


def missing_key(where: str, index: int, key: str, field: str, row: dict[str, Any]
                ) -> TasksetError:
    """The one-line error of a row without the column ``format.<field>`` names."""
    return TasksetError(f"{where}: row {index + 1} has no key {key!r} (format.{field}); keys: "
                        f"{', '.join(row) or 'none'}")


def row_tools(row: dict[str, Any], index: int, fmt: FormatConfig, where: str
              ) -> list[dict[str, Any]] | None:
    """The row's tool definitions (``format.tools_key``), ``None`` when it has none."""
    if not fmt.tools_key or fmt.tools_key not in row:
        return None
    return parse_tools(row[fmt.tools_key], f"row {index + 1}: {fmt.tools_key!r} (format.tools_key)",
                       where)


def plaintext_prompt(row: dict[str, Any], index: int, fmt: FormatConfig, where: str
                     ) -> list[Message]:
    """System (``system_prompt_key`` value, else ``system_prompt``) and user messages of a
    ``plaintext`` row."""
    if fmt.prompt_key not in row:
        raise missing_key(where, index, fmt.prompt_key, "prompt_key", row)
    system = row.get(fmt.system_prompt_key) if fmt.system_prompt_key else None
    messages: list[Message] = []
    if system or fmt.system_prompt:
        messages.append({"role": "system", "content": system or fmt.system_prompt})
    return messages + [{"role": "user", "content": str(row[fmt.prompt_key])}]


@dataclass
class SFTExample:
    """What one SFT row says, before tokenisation."""

    prompt: list[Message]
    """Messages before the trained reply (the whole conversation when ``concatenated``)."""
    reply: list[Message] | str
    """The trained reply: a ``plaintext`` response, or the last (assistant) message."""
    tools: list[dict[str, Any]] | None
    """Tool definitions rendered into the prompt."""
    concatenated: bool = False
    """Train on every assistant turn of ``prompt`` (``enable_concatenated_multi_turn``)."""


def sft_example(row: dict[str, Any], index: int, fmt: FormatConfig, where: str) -> SFTExample:
    """One SFT row following ``fmt`` (no tokenizer needed: ``rft validate`` runs it on the
    first rows of a dataset).

    :raises TasksetError: a key the format names is missing, or a value has the wrong form.
    """
    row = present(row)
    tools = row_tools(row, index, fmt, where)
    if fmt.prompt_type == "messages" and fmt.messages_key in row:
        messages = parse_messages(row[fmt.messages_key],
                                  f"row {index + 1}: {fmt.messages_key!r} (format.messages_key)",
                                  where)
        if fmt.enable_concatenated_multi_turn:
            if not any(m.get("role") == "assistant" for m in messages):
                raise TasksetError(f"{where}: row {index + 1}: no assistant message to train on")
            return SFTExample(messages, [], tools, concatenated=True)
        if not messages or messages[-1].get("role") != "assistant":
            raise TasksetError(f"{where}: row {index + 1}: the last message must be the "
                               "assistant's (or set format.enable_concatenated_multi_turn)")
        return SFTExample(messages[:-1], messages[-1:], tools)
    if fmt.prompt_key not in row and fmt.prompt_type == "messages":
        raise TasksetError(f"{where}: row {index + 1} has no key {fmt.messages_key!r} "
                           f"(format.messages_key) or {fmt.prompt_key!r} (format.prompt_key); "
                           f"keys: {', '.join(row) or 'none'}")
    prompt = plaintext_prompt(row, index, fmt, where)
    if fmt.response_key not in row:
        raise missing_key(where, index, fmt.response_key, "response_key", row)
    return SFTExample(prompt, str(row[fmt.response_key]), tools)


def row_to_sft_experience(row: dict[str, Any], index: int, fmt: FormatConfig, tokenizer: Any,
                          where: str) -> Experience:
    """One SFT row as an experience (see the module docstring)."""
    example = sft_example(row, index, fmt, where)
    template = dataset_chat_template(fmt)
    eid = EID(batch="sft", task=index, run=0)
    if example.concatenated:
        text, spans = assistant_spans(tokenizer, example.prompt, tools=example.tools,
                                      chat_template=template, where=f"{where}: row {index + 1}")
        ids, mask = tokens_with_mask(tokenizer, text, spans)
        prompt_length = mask.index(True) if True in mask else len(ids)
        if prompt_length == len(ids):
            raise TasksetError(f"{where}: row {index + 1}: the assistant turns render to no tokens")
        return Experience(tokens=torch.tensor(ids, dtype=torch.long), prompt_length=prompt_length,
                          action_mask=torch.tensor(mask[prompt_length:], dtype=torch.bool),
                          reward=0.0, eid=eid)
    prompt_ids = encode(tokenizer, render(tokenizer, example.prompt, add_generation_prompt=True,
                                          tools=example.tools, chat_template=template))
    response_ids = reply_ids(tokenizer, example.prompt, example.reply, tools=example.tools,
                             chat_template=template, where=f"{where}: row {index + 1}",
                             what="the reply")
    return Experience(tokens=torch.tensor(prompt_ids + response_ids, dtype=torch.long),
                      prompt_length=len(prompt_ids), reward=0.0, eid=eid)


class DatasetStorage(ExperienceStorage):
    """A fixed list of experiences served in order, epoch after epoch (``epochs`` passes).

    Nothing is ever written to it, so a read of more than is left takes the rest, and a
    read of an exhausted dataset raises :class:`~rft.buffer.storage.BufferEmpty` at once.
    An experience served in pass ``k > 0`` is a copy whose ``eid.run`` is ``k`` (a batch
    that wraps around holds distinct ids: a DPO pair is found by its ids).
    """

    def __init__(self, name: str, experiences: Sequence[Experience], epochs: int) -> None:
        super().__init__(name)
        if not experiences:
            raise TasksetError(f"dataset {name!r} is empty")
        self._items = list(experiences)
        self._total = len(self._items) * max(1, epochs)
        self._position = 0
        self.written = self._total
        self._writers_idle = True

    def _append(self, experiences: list[Experience]) -> None:
        raise TypeError(f"dataset {self.name!r} is read-only")

    def read(self, count: int, timeout: float) -> list[Experience]:
        """Up to ``count`` experiences at once (see the class docstring).

        :raises BufferEmpty: every pass over the dataset was read.
        """
        try:
            return super().read(count, timeout)
        except BufferEmpty as exc:
            passes = self._total // len(self._items)
            raise BufferEmpty(f"dataset {self.name!r}: its {passes} pass(es) over "
                              f"{len(self._items)} experience(s) were all read (a dataset's "
                              "passes: buffer.total_epochs, or total_epochs of an auxiliary "
                              "buffer)") from exc

    def _available(self) -> int:
        return self._total - self._position

    def _take(self, count: int) -> list[Experience]:
        taken = []
        for position in range(self._position, self._position + count):
            epoch, index = divmod(position, len(self._items))
            item = self._items[index]
            taken.append(item if epoch == 0 else
                         dataclasses.replace(item, eid=dataclasses.replace(item.eid, run=epoch)))
        self._position += count
        return taken

    def state_dict(self) -> dict[str, int]:
        return {"position": self._position, "read": self.read_count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._position = int(state["position"])
        self.read_count = int(state.get("read", self._position))
