"""Countdown: reach ``target`` with an arithmetic expression using each number once."""

from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass
from typing import Any

from rft_plugin_rewards.extract import tagged_answer

ALLOWED_TEXT = re.compile(r"^[\d+\-*/().\s]+$")
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv}


def evaluate(expression: str) -> float | None:
    """Value of an expression of numbers, ``+ - * /`` and brackets; ``None`` if invalid."""
    if not ALLOWED_TEXT.match(expression):
        return None

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError("unsupported expression")

    try:
        return walk(ast.parse(expression, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def uses_each_number_once(expression: str, numbers: list[int]) -> bool:
    """The integers in ``expression`` are exactly ``numbers`` (as a multiset)."""
    used = [int(n) for n in re.findall(r"\d+", expression)]
    return sorted(used) == sorted(int(n) for n in numbers)


def parse_truth(truth: Any) -> tuple[float, list[int]]:
    """``(target, numbers)`` from a mapping or its JSON text."""
    data = json.loads(truth) if isinstance(truth, str) else truth
    return float(data["target"]), [int(n) for n in data["numbers"]]


@dataclass
class CountdownArgs:
    """Arguments of ``countdown_reward``."""

    format_score: float = 0.1
    """Reward for an ``<answer>`` expression that is wrong."""
    score: float = 1.0
    """Reward for a correct expression."""


def countdown_reward(response: str, truth: Any, args: CountdownArgs | None = None) -> dict[str, float]:
    """``{"accuracy": score}`` if the ``<answer>`` uses every number once and evaluates to
    the target (within 1e-5), ``format_score`` if an answer is present but wrong, else 0."""
    args = args or CountdownArgs()
    target, numbers = parse_truth(truth)
    expression = tagged_answer(response)
    if expression is None:
        return {"accuracy": 0.0}
    value = evaluate(expression)
    right = (value is not None and uses_each_number_once(expression, numbers)
             and abs(value - target) < 1e-5)
    return {"accuracy": args.score if right else args.format_score}


countdown_reward.Args = CountdownArgs  # type: ignore[attr-defined]
