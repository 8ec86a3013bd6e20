"""Built-in reply parsers of the OpenAI endpoint (see :mod:`rft.engines.reply_parsing`).

Tool calls (``tool_call_parser``):

* ``hermes`` — Qwen2.5 / Qwen3 / Hermes models: each call is a JSON object
  ``{"name": …, "arguments": {…}}`` between ``<tool_call>`` and ``</tool_call>``; the
  content is the text before the first call.

Reasoning (``reasoning_parser``):

* ``deepseek_r1`` — the reasoning ends at ``</think>`` (the opening ``<think>`` may be in
  the prompt, as DeepSeek-R1's template writes it); a reply without ``</think>`` is all
  reasoning (it was cut off while thinking).
* ``qwen3`` — the reasoning is between ``<think>`` and ``</think>``; a reply without both
  is all content (Qwen3 with thinking off).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rft.engines.reply_parsing import FunctionCall
from rft.hookspecs import hookimpl

THINK_START, THINK_END = "<think>", "</think>"
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"

_HERMES_CALL = re.compile(re.escape(TOOL_CALL_START) + r"(.*?)(?:" + re.escape(TOOL_CALL_END)
                          + r"|\Z)", re.DOTALL)
"""One call: what follows ``<tool_call>`` up to ``</tool_call>`` or the end of the reply."""


def hermes_tool_calls(text: str) -> tuple[str, list[FunctionCall]]:
    """Calls written as ``<tool_call>{"name": n, "arguments": {…}}</tool_call>``.

    Content = the text before the first ``<tool_call>`` (stripped). A reply whose call
    blocks are not all JSON objects with a string ``name`` and object ``arguments`` calls
    nothing: it is all content, as written.
    """
    start = text.find(TOOL_CALL_START)
    if start < 0:
        return text, []
    calls = []
    for match in _HERMES_CALL.finditer(text, start):
        try:
            body: Any = json.loads(match.group(1))
        except json.JSONDecodeError:
            return text, []
        name = body.get("name") if isinstance(body, dict) else None
        arguments = body.get("arguments", {}) if isinstance(body, dict) else None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            return text, []
        calls.append(FunctionCall(name, arguments))
    return text[:start].strip(), calls


def deepseek_r1_reasoning(text: str) -> tuple[str | None, str]:
    """Reasoning = the text before ``</think>`` (a leading ``<think>`` removed); content =
    what follows it. Without ``</think>`` the whole reply is reasoning."""
    body = text[len(THINK_START):] if text.startswith(THINK_START) else text
    end = body.find(THINK_END)
    if end < 0:
        return body, ""
    return body[:end], body[end + len(THINK_END):].lstrip("\n")


def qwen3_reasoning(text: str) -> tuple[str | None, str]:
    """Reasoning = the text between ``<think>`` and ``</think>``; content = the text around
    them. Without both markers the whole reply is content."""
    start = text.find(THINK_START)
    end = text.find(THINK_END, start + len(THINK_START)) if start >= 0 else -1
    if start < 0 or end < 0:
        return None, text
    reasoning = text[start + len(THINK_START):end]
    return reasoning, (text[:start] + text[end + len(THINK_END):].lstrip("\n"))


@hookimpl
def register_tool_call_parsers() -> dict[str, Any]:
    return {"hermes": hermes_tool_calls}


@hookimpl
def register_reasoning_parsers() -> dict[str, Any]:
    return {"deepseek_r1": deepseek_r1_reasoning, "qwen3": qwen3_reasoning}
