"""``toolcall_workflow`` (Trinity-RFT's name; ``tool_call_workflow`` in its newer
releases): single-turn tool-call prediction as in Tool-N1 (https://arxiv.org/abs/2505.00024).

Each row holds ``tools`` (a list of function specs, or its JSON text), ``raw_system`` (the
system text), ``conversations`` (``[{"from": "human" | "gpt" | "observation" |
"function_call", "value": …}]``) and ``answer`` (the expected calls: a list of
``{"name", "arguments"}``, or its JSON text). The model is told to reason in
``<think>…</think>`` and then emit its calls as a JSON list in ``<tool_call>…</tool_call>``.

The reward is Tool-N1's binary one: 1 when the response has exactly one ``<think>`` and
one ``</think>``, ends its thinking before the first ``<tool_call>``, and the last
``<tool_call>`` block parses to calls (each ``{"name", "arguments"}``) equal to the answer
as a multiset (names and arguments, argument order ignored); else 0. The taskset's reward
function is not used.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rft.experience import Experience
from rft_plugin_workflows.single_turn import SimpleArgs, SimpleWorkflow

TOOL_PROMPT = """# Tool

<tools>
{tools}
</tools>

In each action step, you MUST:
1. Think about the reasoning process and enclose your reasoning within <think> </think> tags.
2. Then give a JSON list of the function calls with their arguments within <tool_call></tool_call> tags, i.e., <tool_call>[{{"name": <function-name>, "arguments": <args-json-object>}}, {{"name": <function-name2>, "arguments": <args-json-object2>}}, ...]</tool_call>
3. Put both the reasoning and the tool calls in one single reply.
A complete reply looks like: <think>To answer, I need to send the email to Bob and then buy the banana at walmart.</think> <tool_call>[{{"name": "email", "arguments": {{"receiver": "Bob", "content": "I will buy a banana at walmart"}}}}, {{"name": "walmart", "arguments": {{"input": "banana"}}}}]</tool_call>. Make sure the arguments have the right types.
"""
"""The tool instructions appended to the row's system text (``{tools}``: one JSON spec per
line)."""

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
          "observation": "tool", "tool": "tool"}
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def toolcall_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    """The conversation of a Tool-N1 row (module docstring)."""
    tools = "\n".join(json.dumps({"type": "function", "function": tool})
                      for tool in _json(row.get("tools") or []))
    messages = [{"role": "system",
                 "content": str(row.get("raw_system") or "") + TOOL_PROMPT.format(tools=tools)}]
    for turn in _json(row.get("conversations") or []):
        speaker, value = turn.get("from"), turn.get("value")
        if speaker == "function_call":
            messages.append({"role": "assistant", "content": json.dumps(value)})
        elif speaker in _ROLES:
            messages.append({"role": _ROLES[speaker], "content": str(value)})
    return messages


def _calls_of(response: str) -> list[Any] | None:
    """The calls of the last ``<tool_call>`` block (a dict becomes a one-call list)."""
    blocks = _TOOL_CALL.findall(response)
    if not blocks:
        return None
    try:
        calls = json.loads(blocks[-1].strip())
        if isinstance(calls, str):
            calls = json.loads(calls)
    except json.JSONDecodeError:
        return None
    if isinstance(calls, dict):
        calls = [calls]
    return calls if isinstance(calls, list) else None


def _signature(calls: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((str(c["name"]), json.dumps(c["arguments"], sort_keys=True)) for c in calls)


def toolcall_score(response: str, answer: Any) -> float:
    """Tool-N1's reward of ``response`` against the expected calls (module docstring)."""
    try:
        expected = _json(answer)
        if isinstance(expected, str):
            expected = json.loads(expected)
    except json.JSONDecodeError:
        return 0.0
    calls = _calls_of(response)
    if calls is None:
        return 0.0
    if response.count("<think>") != 1 or response.count("</think>") != 1:
        return 0.0
    first_call = response.find("<tool_call>")
    if response.find("</think>") > first_call >= 0:
        return 0.0
    if not all(isinstance(c, dict) and "name" in c and "arguments" in c for c in calls):
        return 0.0
    if not calls or not expected:
        return float(len(calls) == len(expected))
    try:
        return float(_signature(calls) == _signature(expected))
    except (TypeError, KeyError):
        return 0.0


@dataclass
class ToolCallArgs(SimpleArgs):
    """Arguments of ``toolcall_workflow``."""

    answer_key: str = "answer"
    """Row field with the expected calls."""


class ToolCallWorkflow(SimpleWorkflow):
    """Tool-N1's tool-call prediction (module docstring): reward ``reward/accuracy``."""

    Args = ToolCallArgs

    def messages(self) -> list[dict[str, Any]]:
        return toolcall_messages(self.task.raw)

    def reward(self, experiences: list[Experience]) -> None:
        answer = self.task.raw.get(self.options.answer_key, self.task.truth)
        for exp in experiences:
            score = toolcall_score(self.response_text(exp), answer) if answer is not None else 0.0
            exp.reward = score
            exp.metrics["reward/accuracy"] = score


__all__ = ["TOOL_PROMPT", "ToolCallArgs", "ToolCallWorkflow", "toolcall_messages",
           "toolcall_score"]
