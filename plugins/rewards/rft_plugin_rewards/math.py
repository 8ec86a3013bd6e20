"""Mathematical-equivalence rewards built on math-verify."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft_plugin_rewards.extract import follows_think_answer_format, last_boxed, tagged_answer


def equivalent(answer: str | None, truth: Any) -> bool:
    """True when ``answer`` equals ``truth`` mathematically (math-verify), or as text.

    Both sides are parsed by math-verify (LaTeX and plain expressions); when either side
    does not parse, the stripped strings are compared.
    """
    if answer is None:
        return False
    truth_text = str(truth).strip()
    if answer.strip() == truth_text:
        return True
    from math_verify import parse, verify

    def parsed(text: str) -> list[Any]:
        # math-verify finds answers inside $…$ or \boxed{…}; bare text gets wrapped
        return parse(text if ("$" in text or "\\boxed" in text) else f"${text}$")

    try:
        gold, guess = parsed(truth_text), parsed(answer)
        return bool(gold) and bool(guess) and bool(verify(gold, guess))
    except Exception:  # math-verify raises on some malformed LaTeX: not equivalent
        return False


@dataclass
class AccuracyArgs:
    """Arguments of ``accuracy_reward``."""

    correct: float = 1.0
    """Reward when the answer is right."""
    wrong: float = 0.0
    """Reward otherwise."""


def accuracy_reward(response: str, truth: Any, args: AccuracyArgs | None = None) -> dict[str, float]:
    """``{"accuracy": correct | wrong}``: the ``<answer>`` content (else the last
    ``\\boxed{}``, else the whole response) is equivalent to ``truth``."""
    args = args or AccuracyArgs()
    answer = tagged_answer(response) or last_boxed(response) or response.strip()
    return {"accuracy": args.correct if equivalent(answer, truth) else args.wrong}


accuracy_reward.Args = AccuracyArgs  # type: ignore[attr-defined]


@dataclass
class FormatArgs:
    """Arguments of ``format_reward``."""

    correct: float = 1.0
    """Reward for ``<think>…</think><answer>…</answer>``."""
    wrong: float = 0.0
    """Reward for anything else."""


def format_reward(response: str, truth: Any, args: FormatArgs | None = None) -> dict[str, float]:
    """``{"format": correct | wrong}`` by :func:`follows_think_answer_format`."""
    args = args or FormatArgs()
    return {"format": args.correct if follows_think_answer_format(response) else args.wrong}


format_reward.Args = FormatArgs  # type: ignore[attr-defined]


@dataclass
class MathArgs:
    """Arguments of ``math_reward``."""

    format_score: float = 0.1
    """Added for a response in think/answer format, subtracted otherwise."""


def math_reward(response: str, truth: Any, args: MathArgs | None = None) -> dict[str, float]:
    """Think/answer maths: ``accuracy`` = 1 if the ``<answer>`` is equivalent to ``truth``,
    ``format_score`` = ``±format_score`` for (not) following the format."""
    args = args or MathArgs()
    well_formed = follows_think_answer_format(response)
    return {
        "accuracy": 1.0 if equivalent(tagged_answer(response), truth) else 0.0,
        "format_score": args.format_score if well_formed else -args.format_score,
    }


math_reward.Args = MathArgs  # type: ignore[attr-defined]


@dataclass
class BoxedArgs:
    """Arguments of ``math_boxed_reward``."""

    has_think: bool = False
    """Require ``<think>…</think>`` before the answer; without it the reward is ``format_penalty``."""
    format_penalty: float = -1.0
    """Reward of a response missing the required ``</think>``."""


def has_one_think_block(response: str) -> bool:
    """Exactly one ``<think>`` and one ``</think>``, in that order (Trinity-RFT's
    ``validate_think_pattern``)."""
    if response.count("<think>") != 1 or response.count("</think>") != 1:
        return False
    return response.find("<think>") < response.find("</think>")


def math_boxed_reward(response: str, truth: Any, args: BoxedArgs | None = None, *,
                      with_think: bool | None = None,
                      format_score_coef: float | None = None) -> dict[str, float]:
    """``{"accuracy": 1 | 0}`` for the last ``\\boxed{}`` against ``truth`` (a boxed or bare
    answer); with ``has_think`` a response without ``</think>`` gets ``format_penalty``.

    ``with_think`` and ``format_score_coef`` come from ``math_boxed_workflow``'s arguments
    (Trinity-RFT's workflow passes them to its reward): with ``with_think`` the parts also
    hold ``format_score``, ``−format_score_coef`` (default 0.1) unless the response has
    exactly one ``<think>…</think>`` block, else 0.
    """
    args = args or BoxedArgs()
    if args.has_think and "</think>" not in response:
        return {"accuracy": args.format_penalty}
    truth_text = last_boxed(str(truth)) or str(truth)
    parts = {"accuracy": 1.0 if equivalent(last_boxed(response), truth_text) else 0.0}
    if with_think:
        coef = format_score_coef or 0.1
        parts["format_score"] = 0.0 if has_one_think_block(response) else -coef
    return parts


math_boxed_reward.Args = BoxedArgs  # type: ignore[attr-defined]
math_boxed_reward.extra_inputs = ("with_think", "format_score_coef")  # type: ignore[attr-defined]
