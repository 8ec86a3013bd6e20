"""Pulling answers out of responses: ``<answer>`` tags, ``\\boxed{}``, think/answer format."""

from __future__ import annotations

import re

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
THINK_ANSWER_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def tagged_answer(response: str) -> str | None:
    """Text inside the last ``<answer>…</answer>``, stripped; ``None`` if there is none."""
    found = ANSWER_TAG.findall(response)
    return found[-1].strip() if found else None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` (or ``\\fbox{…}``), with nested braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def follows_think_answer_format(response: str) -> bool:
    """True for ``<think>…</think>`` followed by ``<answer>…</answer>`` and nothing else."""
    return THINK_ANSWER_FORMAT.match(response) is not None
