"""Dataset conversations as training tokens: values read from rows (message lists, tool
lists, possibly JSON strings) and token ids through the chat template.

Rendering is by text, then token ids segment by segment: a conversation's text is cut
where the chat template puts each assistant turn (:func:`assistant_spans`), and each piece
is tokenised on its own, so the boundary between what the model reads and what it is
trained to write is exact whatever the tokenizer merges.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rft.buffer.errors import TasksetError

Message = dict[str, Any]


def strip_nulls(value: Any) -> Any:
    """``value`` without ``None`` members of mappings, recursively. ``datasets`` reads a
    column of dicts as one Arrow struct and gives every row every key that any row has,
    filling the missing ones with ``None``; tool schemas would then render with those."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def _json_value(value: Any, what: str, where: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise TasksetError(f"{where}: {what} is a string but not JSON ({exc.msg} at column "
                               f"{exc.colno})") from exc
    return value


def _dicts(value: Any, what: str, where: str, expected: str) -> list[dict[str, Any]]:
    """``value`` (or its JSON text) as a list of dicts; one dict is a list of one.

    :raises TasksetError: ``what`` is not ``expected``.
    """
    value = _json_value(value, what, where)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, dict) for v in value):
        raise TasksetError(f"{where}: {what} must be {expected}, got {type(value).__name__}")
    return list(value)


def parse_messages(value: Any, what: str, where: str) -> list[Message]:
    """A message list from a row value (a list of ``{"role", "content", …}`` or its JSON
    text); keys whose value is ``None`` are dropped from each message (see
    :func:`strip_nulls`).

    :raises TasksetError: not a list of messages with a ``role`` each.
    """
    value = _dicts(value, what, where, 'a list of messages ({"role": …, "content": …})')
    messages = [{k: v for k, v in m.items() if v is not None} for m in value]
    for i, m in enumerate(messages):
        if "role" not in m:
            raise TasksetError(f"{where}: {what}: message {i} has no 'role'")
    return messages


def parse_tools(value: Any, what: str, where: str) -> list[dict[str, Any]] | None:
    """Tool definitions from a row value (a list of dicts, OpenAI function specs, or its
    JSON text); ``None`` / empty: no tools.

    :raises TasksetError: neither a list of dicts nor JSON text of one.
    """
    if value is None:
        return None
    value = _dicts(value, what, where, "a list of tool definitions (dicts)")
    return [strip_nulls(t) for t in value] or None


def render(tokenizer: Any, messages: Sequence[Message], *, add_generation_prompt: bool,
           tools: Sequence[dict[str, Any]] | None = None, chat_template: str | None = None
           ) -> str:
    """The conversation as text through ``chat_template`` (``None``: the tokenizer's),
    with ``tools`` offered to the model when given."""
    kwargs: dict[str, Any] = {}
    if chat_template is not None:
        kwargs["chat_template"] = chat_template
    if tools:
        kwargs["tools"] = list(tools)
    return tokenizer.apply_chat_template(list(messages), tokenize=False,
                                         add_generation_prompt=add_generation_prompt, **kwargs)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` (no special tokens added)."""
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def end_of_turn_id(tokenizer: Any) -> int | None:
    """The token that ends an assistant turn: ChatML's ``<|im_end|>``, else EOS."""
    for token in ("<|im_end|>",):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            return token_id
    return tokenizer.eos_token_id


def _prefix_error(where: str, what: str) -> TasksetError:
    return TasksetError(
        f"{where}: the chat template does not render {what} as a continuation of the "
        "conversation before it (it rewrites earlier turns, e.g. drops their reasoning), so "
        "the trained tokens cannot be told apart; use a template that only appends "
        "(format.chat_template)")


def assistant_spans(tokenizer: Any, messages: Sequence[Message], *,
                    tools: Sequence[dict[str, Any]] | None, chat_template: str | None,
                    where: str) -> tuple[str, list[tuple[int, int]]]:
    """The whole conversation as text and the character spans of its assistant turns.

    Turn ``i`` (an assistant message) spans from the end of ``messages[:i]`` rendered with
    the generation prompt to the end of ``messages[:i + 1]`` rendered without it — its
    content, tool calls and end-of-turn text, as the template writes them.

    :raises TasksetError: the template does not render the turns as prefixes of the whole
        (:func:`_prefix_error`).
    """
    text = render(tokenizer, messages, add_generation_prompt=False, tools=tools,
                  chat_template=chat_template)
    spans: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = (render(tokenizer, messages[:i], add_generation_prompt=True, tools=tools,
                         chat_template=chat_template) if i else "")
        through = render(tokenizer, messages[: i + 1], add_generation_prompt=False,
                         tools=tools, chat_template=chat_template)
        if not through.startswith(before) or not text.startswith(through):
            raise _prefix_error(where, f"assistant message {i}")
        spans.append((len(before), len(through)))
    return text, spans


def tokens_with_mask(tokenizer: Any, text: str, spans: Sequence[tuple[int, int]]
                     ) -> tuple[list[int], list[bool]]:
    """Token ids of ``text`` cut at ``spans`` (each piece tokenised alone) and, per token,
    whether it lies in a span."""
    ids: list[int] = []
    mask: list[bool] = []
    position = 0
    for start, end in spans:
        for piece, inside in ((text[position:start], False), (text[start:end], True)):
            piece_ids = encode(tokenizer, piece)
            ids += piece_ids
            mask += [inside] * len(piece_ids)
        position = end
    tail = encode(tokenizer, text[position:])
    return ids + tail, mask + [False] * len(tail)


def reply_ids(tokenizer: Any, prompt: Sequence[Message], reply: Sequence[Message] | str, *,
              tools: Sequence[dict[str, Any]] | None, chat_template: str | None,
              where: str, what: str) -> list[int]:
    """Token ids of a reply to ``prompt``.

    A string (or a single assistant message holding nothing but ``content``) is its text
    followed by the end-of-turn token. Messages (tool calls, several turns) are what the
    template writes after ``prompt`` and its generation prompt.
    """
    if isinstance(reply, str):
        text = reply
    elif (len(reply) == 1 and reply[0].get("role") == "assistant"
          and set(reply[0]) <= {"role", "content"}):
        text = str(reply[0].get("content") or "")
    else:
        before = render(tokenizer, prompt, add_generation_prompt=True, tools=tools,
                        chat_template=chat_template)
        whole = render(tokenizer, [*prompt, *reply], add_generation_prompt=False, tools=tools,
                       chat_template=chat_template)
        if not whole.startswith(before):
            raise _prefix_error(where, what)
        return encode(tokenizer, whole[len(before):])
    ids = encode(tokenizer, text)
    end = end_of_turn_id(tokenizer)
    return ids + ([end] if end is not None else [])


__all__ = ["Message", "assistant_spans", "encode", "end_of_turn_id", "parse_messages",
           "parse_tools", "render", "reply_ids", "strip_nulls", "tokens_with_mask"]
