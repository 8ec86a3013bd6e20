"""``tool_agent_workflow``: an agent that calls tools through the OpenAI API.

Each episode the model gets the task with a ``calculate`` tool. Whenever it answers with
tool calls the workflow runs them and sends each result back as a ``tool`` message; an
answer without calls — or the last allowed turn — ends the episode and is scored with
the task's reward function. The episode is taken from the model's call history, merged
into one experience whose action mask covers the model's turns only (the tool results
are masked out). Needs ``explorer.rollout_model.enable_openai_api``, ``enable_history``,
``enable_auto_tool_choice`` and a ``tool_call_parser`` that reads the model's format.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rft.experience import Experience
from rft_plugin_workflows.agent import AgentOpenAIWorkflow

CALCULATE = {"type": "function", "function": {
    "name": "calculate",
    "description": "Evaluate an arithmetic expression (+ - * / // % ** and parentheses).",
    "parameters": {"type": "object",
                   "properties": {"expression": {"type": "string",
                                                 "description": "e.g. (3 + 4) * 2"}},
                   "required": ["expression"]}}}
"""The tool spec the model is offered."""

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPONENT = 64
"""Largest exponent ``calculate`` takes (a model must not hang the explorer)."""


def calculate(expression: str) -> str:
    """The value of an arithmetic expression over numbers, as text (integral values
    without a decimal point); raises ``ValueError`` for anything else."""

    def value(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponent {right} is over {MAX_EXPONENT}")
            return _BINARY[type(node.op)](left, right)
        raise ValueError(f"not arithmetic: {ast.unparse(node)!r}")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ZeroDivisionError, OverflowError) as exc:
        raise ValueError(str(exc)) from exc
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return str(result)


TOOLS: dict[str, tuple[dict[str, Any], Callable[..., str]]] = {
    "calculate": (CALCULATE, calculate)}
"""Tools by name: spec and implementation."""


@dataclass
class ToolAgentArgs:
    """Arguments of ``tool_agent_workflow`` (``workflow_args``)."""

    max_turns: int = 4
    """Most model turns per episode (the last one is the answer, tool calls or not)."""


def run_tool_call(call: Any) -> tuple[str, bool]:
    """``(result text, failed)`` of one tool call from the API (unknown tool, bad arguments
    or an error become the text the model reads)."""
    name = call.function.name
    if name not in TOOLS:
        return f"error: no tool named {name!r} (tools: {', '.join(TOOLS)})", True
    try:
        arguments = json.loads(call.function.arguments or "{}")
        return TOOLS[name][1](**arguments), False
    except (ValueError, TypeError) as exc:
        return f"error: {exc}", True


class ToolAgentWorkflow(AgentOpenAIWorkflow):
    """Tool-calling episodes over the OpenAI API (module docstring)."""

    Args = ToolAgentArgs

    def episode(self) -> Experience:
        args = self.args or ToolAgentArgs()
        client = self.model.get_openai_client()
        messages: list[Any] = self.task.chat_messages()
        calls = failures = 0
        for turn in range(args.max_turns):
            response = client.chat.completions.create(
                model=client.model_path, messages=messages, n=1,
                tools=[spec for spec, _ in TOOLS.values()], **self.openai_sampling())
            message = response.choices[0].message
            if not message.tool_calls or turn == args.max_turns - 1:
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result, failed = run_tool_call(call)
                calls, failures = calls + 1, failures + int(failed)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        parts = self.score(message.content or "", "tool_agent_workflow")
        return self.merged_episode("tool_agent_workflow", sum(parts.values()), parts,
                                   {"multi_turn/turns": float(turn + 1),
                                    "agent/tool_calls": float(calls),
                                    "agent/tool_errors": float(failures)})


__all__ = ["CALCULATE", "ToolAgentArgs", "ToolAgentWorkflow", "calculate", "run_tool_call"]
