"""From a sampled reply's text to the OpenAI assistant message: tool calls and reasoning.

A model that calls tools writes the calls into its reply in its own format (Qwen2.5 /
Hermes: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``); a reasoning model
writes its thinking first (``<think>…</think>``). The OpenAI endpoint returns them as
``message.tool_calls`` and ``message.reasoning_content``, next to the remaining
``content``. Which format a model writes is configured per model
(``tool_call_parser``, ``reasoning_parser``, as in vLLM) and found by name among the
plugins (``register_tool_call_parsers``, ``register_reasoning_parsers``):

* a **tool-call parser** is a callable ``(text) -> (content, calls)``: the text left for
  ``content`` and a list of :class:`FunctionCall` (empty when the reply calls no tool);
* a **reasoning parser** is a callable ``(text) -> (reasoning, content)``: the reasoning
  (``None`` when the reply has none) and the rest.

The sampled token ids never change: the trainer learns from the reply as sampled, and a
conversation that continues a parsed reply is continued from its exact ids
(:mod:`rft.rollout.history`, :meth:`AssistantReply.matches`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rft.config.plan import ModelPlan
from rft.errors import RftError


@dataclass(frozen=True)
class FunctionCall:
    """One tool call a reply makes: the function's name and its arguments."""

    name: str
    arguments: dict[str, Any]

    def key(self) -> tuple[str, str]:
        """``(name, canonical JSON of the arguments)``: equal for equal calls."""
        return self.name, json.dumps(self.arguments, sort_keys=True, ensure_ascii=False)


ToolCallParser = Callable[[str], tuple[str, list[FunctionCall]]]
"""``(reply text) -> (content, calls)``."""

ReasoningParser = Callable[[str], tuple[str | None, str]]
"""``(reply text) -> (reasoning or None, content)``."""


@dataclass(frozen=True)
class AssistantReply:
    """A reply as the endpoint returns it: content, reasoning and tool calls."""

    content: str | None
    reasoning: str | None = None
    tool_calls: tuple[FunctionCall, ...] = ()
    call_ids: tuple[str, ...] = field(default=(), compare=False)
    """One ``call_…`` id per tool call (what the client refers to in tool messages)."""

    def to_openai(self, *, with_reasoning: bool) -> dict[str, Any]:
        """The ``message`` object of a ``chat.completion`` choice."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if with_reasoning:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function",
                 "function": {"name": call.name,
                              "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
                for call_id, call in zip(self.call_ids, self.tool_calls, strict=True)]
        return message

    def matches(self, message: dict[str, Any]) -> bool:
        """True when an assistant message a client sends back is this reply: same content
        (``None`` and ``""`` alike) and the same calls (names and arguments; ids and the
        reasoning, which clients often drop, are not compared)."""
        if (message.get("content") or "") != (self.content or ""):
            return False
        try:
            sent = [call_of(item).key() for item in message.get("tool_calls") or []]
        except RftError:
            return False
        return sent == [call.key() for call in self.tool_calls]


def call_of(item: Any) -> FunctionCall:
    """A :class:`FunctionCall` from an OpenAI ``tool_calls`` entry (``function.arguments``
    as a JSON string, or already an object); raises :class:`RftError` when malformed."""
    function = item.get("function") if isinstance(item, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise RftError(f"a tool call needs function.name, got {item!r}")
    assert isinstance(function, dict)  # it held the name
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise RftError(f"tool call {name!r}: arguments are not JSON ({exc})") from exc
    if not isinstance(arguments, dict):
        raise RftError(f"tool call {name!r}: arguments must be a JSON object, got "
                       f"{arguments!r}")
    return FunctionCall(name, arguments)


@dataclass(frozen=True)
class ReplyParser:
    """The parsers one model's endpoint applies (none configured: content = the text)."""

    tool_calls: ToolCallParser | None = None
    reasoning: ReasoningParser | None = None
    auto_tool_choice: bool = False
    """``enable_auto_tool_choice``: requests may let the model call tools."""

    def parse(self, text: str, *, call_tools: bool, parallel: bool = True) -> AssistantReply:
        """The reply of ``text``: reasoning split off first (when a reasoning parser is
        set), then tool calls taken from the rest when ``call_tools``; only the first
        call when not ``parallel``."""
        reasoning, content = None, text
        if self.reasoning is not None:
            reasoning, content = self.reasoning(text)
        calls: Sequence[FunctionCall] = ()
        if call_tools and self.tool_calls is not None:
            content, calls = self.tool_calls(content)
            calls = list(calls)[:1] if not parallel else list(calls)
        return AssistantReply(content=content if content or not calls else None,
                              reasoning=reasoning, tool_calls=tuple(calls),
                              call_ids=tuple(f"call_{uuid.uuid4().hex[:24]}" for _ in calls))


def reply_parser_of(model: ModelPlan, auto_tool_choice: bool) -> ReplyParser:
    """The parsers config validation resolved for ``model`` (the rollout model's or an
    auxiliary model's plan)."""
    tool_calls = model.tool_call_parser.implementation if model.tool_call_parser else None
    reasoning = model.reasoning_parser.implementation if model.reasoning_parser else None
    return ReplyParser(tool_calls, reasoning, auto_tool_choice)


__all__ = ["AssistantReply", "FunctionCall", "ReasoningParser", "ReplyParser",
           "ToolCallParser", "call_of", "reply_parser_of"]
