"""How a rollout record's sample is shown: its conversation split into messages (tool
calls and tool results marked), its response tokens coloured by log-prob or entropy, and
the filters of the rollouts page. Pure functions over the record's rows
(:mod:`rft.monitor.rollout_record`)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

_CHATML = re.compile(r"<\|im_start\|>([^\n<]*)\n(.*?)(?:<\|im_end\|>\s*|(?=<\|im_start\|>)|\Z)",
                     re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>(.*?)(?:</tool_response>|\Z)", re.DOTALL)


@dataclass(frozen=True)
class Part:
    """A piece of a message: plain text, a tool call or a tool result."""

    kind: str
    """``text``, ``tool_call`` or ``tool_result``."""
    text: str


@dataclass(frozen=True)
class Message:
    """One turn of the conversation."""

    role: str
    parts: list[Part] = field(default_factory=list)

    @property
    def is_tool(self) -> bool:
        return any(p.kind != "text" for p in self.parts)


def _is_call_json(text: str) -> bool:
    """A JSON function call (``{"name", "arguments"}``, or a list of them)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    calls = value if isinstance(value, list) else [value]
    return bool(calls) and all(isinstance(c, dict) and "name" in c and "arguments" in c
                               for c in calls)


def message_parts(role: str, content: str) -> list[Part]:
    """``content`` split into text and tool parts: a ``tool`` message is one tool result;
    an ``assistant`` message's ``<tool_call>`` blocks (or the whole message, when it is a
    JSON call) are tool calls; a ``user`` message's ``<tool_response>`` blocks are tool
    results (templates that send results as user turns). A system prompt that shows the
    format stays text."""
    if role in ("tool", "observation", "function", "ipython"):
        return [Part("tool_result", content.strip())]
    if role == "assistant" and _is_call_json(content.strip()):
        return [Part("tool_call", content.strip())]
    pattern, kind = {"assistant": (_TOOL_CALL, "tool_call"),
                     "user": (_TOOL_RESPONSE, "tool_result")}.get(role, (None, "text"))
    parts: list[Part] = []
    position = 0
    blocks = [(m, kind) for m in pattern.finditer(content)] if pattern is not None else []
    for match, kind in blocks:
        if match.start() > position and content[position:match.start()].strip():
            parts.append(Part("text", content[position:match.start()].strip()))
        parts.append(Part(kind, match.group(1).strip()))
        position = match.end()
    if content[position:].strip() or not parts:
        parts.append(Part("text", content[position:].strip()))
    return parts


def split_messages(text: str) -> list[Message]:
    """The turns of a chat-template text (ChatML ``<|im_start|>role … <|im_end|>``); text
    in no turn becomes a ``text`` message. An empty trailing assistant header (the
    generation prompt) is dropped."""
    messages: list[Message] = []
    position = 0
    for match in _CHATML.finditer(text):
        if text[position:match.start()].strip():
            messages.append(Message("text", [Part("text", text[position:match.start()].strip())]))
        role, content = match.group(1).strip() or "text", match.group(2)
        if content.strip():
            messages.append(Message(role, message_parts(role, content)))
        position = match.end()
    if text[position:].strip():
        messages.append(Message("text", [Part("text", text[position:].strip())]))
    return messages


def transcript_messages(transcript: Any) -> list[Message]:
    """An agent's transcript (``info["agent/transcript"]``: OpenAI-style messages with
    ``tool_calls`` / ``role: tool``) as messages; ``[]`` when there is none."""
    if not isinstance(transcript, list):
        return []
    messages: list[Message] = []
    for item in transcript:
        if not isinstance(item, dict):
            messages.append(Message("text", [Part("text", json.dumps(item))]))
            continue
        role = str(item.get("role", "text"))
        content = item.get("content")
        text = content if isinstance(content, str) else (
            json.dumps(content) if content is not None else "")
        parts = message_parts(role, text) if text.strip() else []
        for call in item.get("tool_calls") or []:
            parts.append(Part("tool_call", json.dumps(call.get("function", call)
                                                      if isinstance(call, dict) else call)))
        messages.append(Message(role, parts or [Part("text", "")]))
    return messages


@dataclass(frozen=True)
class Token:
    """One response token as shown: its text, colour and tooltip."""

    text: str
    colour: str
    title: str
    model: bool
    """Generated by the model (``action_mask`` 1), not put in by the workflow."""


def token_colour(value: float | None, mode: str, max_entropy: float) -> str:
    """Background colour of a token: by log-prob ``ℓ`` the hue ``120·e^ℓ`` (red: unlikely,
    green: likely); by entropy ``H`` the hue ``120·(1 − H/H_max)``; grey without a value."""
    if value is None or not math.isfinite(value):
        return "#e8e8e8"
    if mode == "entropy":
        share = 1.0 - min(1.0, value / max_entropy) if max_entropy > 0 else 1.0
    else:
        share = math.exp(min(0.0, value))
    return f"hsl({round(120 * share)}, 75%, 82%)"


def _number(values: Any, index: int) -> float | None:
    if isinstance(values, list) and index < len(values) and isinstance(values[index], (int, float)):
        return float(values[index])
    return None


def response_tokens(row: dict[str, Any], mode: str = "logprob") -> list[Token]:
    """The response's tokens coloured by ``mode`` (``logprob`` or ``entropy``)."""
    tokens = row.get("tokens") or []
    logprobs, entropy, mask = row.get("logprobs"), row.get("entropy"), row.get("action_mask")
    finite = [float(e) for e in entropy or [] if isinstance(e, (int, float))]
    max_entropy = max(finite, default=0.0)
    shown = []
    for index, text in enumerate(tokens):
        lp, ent = _number(logprobs, index), _number(entropy, index)
        model = not (isinstance(mask, list) and index < len(mask) and mask[index] == 0)
        title = " ".join(part for part in (
            f"logprob {lp:.3f} (p {math.exp(lp):.3f})" if lp is not None else "",
            f"entropy {ent:.3f}" if ent is not None else "",
            "" if model else "(not generated: workflow's text)") if part) or "no value"
        shown.append(Token(str(text), token_colour(ent if mode == "entropy" else lp, mode,
                                                   max_entropy), title, model))
    return shown


@dataclass(frozen=True)
class Filters:
    """The rollouts page's filters: task and a reward range."""

    task: str = ""
    min_reward: float | None = None
    max_reward: float | None = None

    def keeps(self, row: dict[str, Any]) -> bool:
        if self.task and task_key(row) != self.task:
            return False
        reward = row.get("reward")
        value = float(reward) if isinstance(reward, (int, float)) else None
        if self.min_reward is not None and (value is None or value < self.min_reward):
            return False
        return not (self.max_reward is not None and (value is None or value > self.max_reward))


def task_key(row: dict[str, Any]) -> str:
    """``<taskset>[<task>]``: how a sample's task is named on the page."""
    return f"{row.get('taskset') or '-'}[{row.get('task')}]"


__all__ = ["Filters", "Message", "Part", "Token", "message_parts", "response_tokens",
           "split_messages", "task_key", "token_colour", "transcript_messages"]
