"""GSM8K scored exactly as veRL scores it (``verl.utils.reward_score.gsm8k``).

The response's answer is the last ``#### <number>`` (``strict``) or the last number
(``flexible``), looked for in the last 300 characters only; commas and ``$`` are removed
from a strict answer. The score is ``score`` if the answer string equals the ground
truth, ``format_score`` if an answer was found but differs, and 0 if none was found.
A ground truth still in GSM8K's raw form (``… #### 72``) is reduced to the number first,
as veRL's data preprocessing does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

CLIP_CHARS = 300
"""Only the last 300 characters of a response are searched (veRL's speed guard)."""

STRICT_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
ANY_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")


def extract_gsm8k_answer(text: str, method: Literal["strict", "flexible"] = "strict") -> str | None:
    """The final answer of ``text`` by veRL's rules (see the module docstring)."""
    tail = text[-CLIP_CHARS:] if len(text) > CLIP_CHARS else text
    if method == "strict":
        found = STRICT_ANSWER.findall(tail)
        return found[-1].replace(",", "").replace("$", "") if found else None
    candidates = [n for n in ANY_NUMBER.findall(tail) if n not in ("", ".")]
    if candidates:
        return candidates[-1]
    numbers = ANY_NUMBER.findall(tail)
    return numbers[0] if numbers else None  # veRL returns the last tried value: "." or ""


def gsm8k_ground_truth(answer: str) -> str:
    """Ground truth of a raw GSM8K ``answer`` field: the number after ``####``."""
    if "####" not in answer:
        return answer.strip()
    return answer.split("####")[-1].strip().replace(",", "")


@dataclass
class GSM8KArgs:
    """Arguments of ``gsm8k_reward`` (veRL ``compute_score``)."""

    method: Literal["strict", "flexible"] = "strict"
    """``strict``: the answer must follow ``#### ``; ``flexible``: the last number."""
    format_score: float = 0.0
    """Score of a found but wrong answer."""
    score: float = 1.0
    """Score of a right answer."""


def gsm8k_reward(response: str, truth: Any, args: GSM8KArgs | None = None) -> dict[str, float]:
    """``{"accuracy": score | format_score | 0}`` (veRL's GSM8K scorer)."""
    args = args or GSM8KArgs()
    answer = extract_gsm8k_answer(response, args.method)
    if answer is None:
        return {"accuracy": 0.0}
    right = answer == gsm8k_ground_truth(str(truth))
    return {"accuracy": float(args.score if right else args.format_score)}


gsm8k_reward.Args = GSM8KArgs  # type: ignore[attr-defined]
