"""Preference data (DPO) as experience pairs.

One row holds a prompt and two replies, the preferred (``format.chosen_key``) and the
dispreferred (``format.rejected_key``); it becomes two experiences with the same prompt
tokens and ids ``EID(batch="dpo", task=row, suffix="chosen" | "rejected")``, chosen first
(the DPO plugin's batch layout pairs them by those ids). Both forms of the guide read:

- ``plaintext``: ``prompt_key`` (with ``system_prompt_key`` / ``system_prompt``), and the
  replies as strings: ``{"prompt": "2+2?", "chosen": "4", "rejected": "5"}``;
- ``messages``: the prompt as a message list in ``messages_key`` (or in ``prompt_key``,
  TRL's column), and the replies as message lists (usually one assistant message):
  ``{"messages": [{"role": "user", …}], "chosen": [{"role": "assistant", …}], …}``.
  A row whose replies are whole conversations sharing their first messages and that has
  no prompt column (TRL's implicit prompt) takes those shared messages as the prompt.

A reply string, or a single assistant message with only ``content``, is its text and the
end-of-turn token; other replies (tool calls, several messages) are what the chat
template writes after the prompt. ``format.chat_template`` and ``format.tools_key`` apply
as for SFT (:mod:`rft.buffer.sft_data`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft.buffer.chat_render import Message, encode, parse_messages, render, reply_ids
from rft.buffer.errors import TasksetError
from rft.buffer.sft_data import missing_key, plaintext_prompt, present, row_tools
from rft.chat_template import dataset_chat_template
from rft.config.schema import FormatConfig
from rft.experience import EID, Experience


@dataclass
class PreferenceExample:
    """What one preference row says, before tokenisation."""

    prompt: list[Message]
    chosen: list[Message] | str
    rejected: list[Message] | str
    tools: list[dict[str, Any]] | None


def _reply(value: Any, messages: bool, what: str, where: str) -> list[Message] | str:
    """A reply: a string, or (``messages`` format) a message list, possibly as JSON text."""
    if isinstance(value, str):
        if messages and value.lstrip().startswith(("[", "{")):  # a message list as JSON
            try:
                return parse_messages(value, what, where)
            except TasksetError:
                return value
        return value
    return parse_messages(value, what, where)


def _shared_prefix(chosen: list[Message], rejected: list[Message]) -> int:
    count = 0
    for a, b in zip(chosen, rejected, strict=False):
        if a != b:
            break
        count += 1
    return count


def preference_example(row: dict[str, Any], index: int, fmt: FormatConfig, where: str
                       ) -> PreferenceExample:
    """One preference row following ``fmt`` (no tokenizer needed: ``rft validate`` runs it
    on the first rows of a dataset).

    :raises TasksetError: a key the format names is missing, or a value has the wrong form.
    """
    row = present(row)
    for key, field in ((fmt.chosen_key, "chosen_key"), (fmt.rejected_key, "rejected_key")):
        if key not in row:
            raise missing_key(where, index, key, field, row)
    messages = fmt.prompt_type == "messages"
    chosen = _reply(row[fmt.chosen_key], messages,
                    f"row {index + 1}: {fmt.chosen_key!r} (format.chosen_key)", where)
    rejected = _reply(row[fmt.rejected_key], messages,
                      f"row {index + 1}: {fmt.rejected_key!r} (format.rejected_key)", where)
    tools = row_tools(row, index, fmt, where)
    prompt: list[Message]
    if messages and fmt.messages_key in row:
        prompt = parse_messages(row[fmt.messages_key],
                                f"row {index + 1}: {fmt.messages_key!r} (format.messages_key)", where)
    elif fmt.prompt_key in row:
        value = row[fmt.prompt_key]
        if messages and not isinstance(value, str):
            prompt = parse_messages(value, f"row {index + 1}: {fmt.prompt_key!r} (format.prompt_key)",
                                    where)
        else:
            prompt = plaintext_prompt(row, index, fmt, where)
    elif (messages and isinstance(chosen, list)
          and isinstance(rejected, list) and _shared_prefix(chosen, rejected)):
        shared = _shared_prefix(chosen, rejected)
        prompt, chosen, rejected = chosen[:shared], chosen[shared:], rejected[shared:]
    else:
        also = (f" or {fmt.messages_key!r} (format.messages_key)"
                if messages else "")
        raise TasksetError(f"{where}: row {index + 1} has no key {fmt.prompt_key!r} "
                           f"(format.prompt_key){also}; keys: {', '.join(row)}")
    for name, reply in (("chosen", chosen), ("rejected", rejected)):
        if not reply:
            raise TasksetError(f"{where}: row {index + 1}: the {name} reply is empty")
    return PreferenceExample(prompt, chosen, rejected, tools)


def row_to_preference_pair(row: dict[str, Any], index: int, fmt: FormatConfig, tokenizer: Any,
                           where: str) -> tuple[Experience, Experience]:
    """One preference row as its (chosen, rejected) experiences (see the module doc)."""
    example = preference_example(row, index, fmt, where)
    template = dataset_chat_template(fmt)
    prompt_ids = encode(tokenizer, render(tokenizer, example.prompt, add_generation_prompt=True,
                                          tools=example.tools, chat_template=template))
    pair = []
    for suffix, reply in (("chosen", example.chosen), ("rejected", example.rejected)):
        response_ids = reply_ids(tokenizer, example.prompt, reply, tools=example.tools,
                                 chat_template=template, where=f"{where}: row {index + 1}",
                                 what=f"the {suffix} reply")
        pair.append(Experience(tokens=torch.tensor(prompt_ids + response_ids, dtype=torch.long),
                               prompt_length=len(prompt_ids), reward=0.0,
                               eid=EID(batch="dpo", task=index, run=0, suffix=suffix)))
    return pair[0], pair[1]


__all__ = ["PreferenceExample", "preference_example", "row_to_preference_pair"]
