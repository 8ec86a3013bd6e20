"""DAPO's math reward (``math_dapo_reward``, https://arxiv.org/abs/2503.14476): a
rule-based outcome reward of ``+1`` for a right final answer and ``-1`` for a wrong one,
plus DAPO's overlong penalty on the response's length in tokens.

The final answer is read from the text after the last ``</think>``: the content of its
last ``\\boxed{}``, else that whole text. A boxed answer is right when it is
mathematically equivalent to the truth (math-verify, :func:`~rft_plugin_rewards.math.equivalent`);
an unboxed one only when it is a bare expression (no words) equivalent to the truth, so
that a sentence that merely mentions the number is not an answer.

The overlong penalty (DAPO's "soft overlong punishment"), with ``L`` the response length,
``L_max = max_response_length`` and ``C = cache_length``::

    0                          L ≤ L_max − C
    (L_max − C − L) / C · f    L_max − C < L ≤ L_max
    −f                         L > L_max                    (f = penalty_factor)

The length is the number of response token ids, which the reward gets as the keyword
``response_tokens`` (see :data:`EXTRA_INPUTS`): the single-turn workflows of
rft-plugin-workflows pass it. Called without it, the penalty cannot be computed and an
enabled penalty is an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError
from rft_plugin_rewards.extract import last_boxed
from rft_plugin_rewards.math import equivalent

EXTRA_INPUTS = ("response_tokens",)
"""Keyword inputs ``math_dapo_reward`` takes beyond ``(response, truth, args)``."""

_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
"""A word of two letters or more that is not a LaTeX command (``\\frac`` is not a word)."""


@dataclass
class DAPOArgs:
    """Arguments of ``math_dapo_reward`` (``reward_fn_args``; Trinity-RFT's names)."""

    enable_overlong_penalty: bool | None = None
    """Apply the overlong penalty (``format_score``); ``None``/``false``: it is 0."""
    penalty_factor: float | None = None
    """``f``: the largest penalty, reached past ``max_response_length`` tokens."""
    max_response_length: int | None = None
    """``L_max``: responses longer than this get ``−penalty_factor``."""
    cache_length: int | None = None
    """``C``: the penalty grows linearly over the last ``C`` tokens before ``L_max``."""

    def __post_init__(self) -> None:
        if not self.enable_overlong_penalty:
            return
        missing = [name for name in ("penalty_factor", "max_response_length", "cache_length")
                   if getattr(self, name) is None]
        if missing:
            raise ValueError(f"enable_overlong_penalty needs {', '.join(missing)}")
        assert self.cache_length is not None and self.max_response_length is not None
        if self.cache_length <= 0:
            raise ValueError(f"cache_length must be > 0, got {self.cache_length}")
        if self.max_response_length <= self.cache_length:
            raise ValueError(f"max_response_length ({self.max_response_length}) must be "
                             f"greater than cache_length ({self.cache_length})")


def overlong_penalty(length: int, args: DAPOArgs) -> float:
    """DAPO's soft overlong penalty of a response of ``length`` tokens (module docstring)."""
    assert args.max_response_length is not None and args.cache_length is not None
    assert args.penalty_factor is not None
    expected = args.max_response_length - args.cache_length
    if length <= expected:
        return 0.0
    if length > args.max_response_length:
        return -float(args.penalty_factor)
    return (expected - length) / args.cache_length * args.penalty_factor


def final_answer(response: str) -> tuple[str, bool]:
    """``(answer, boxed)``: the last ``\\boxed{}`` after the last ``</think>``, else that
    whole text (stripped)."""
    tail = response.split("</think>")[-1]
    boxed = last_boxed(tail)
    return (boxed, True) if boxed is not None else (tail.strip(), False)


def dapo_correct(response: str, truth: Any) -> bool:
    """Whether the response's final answer equals ``truth`` (a bare or boxed answer)."""
    truth_text = str(truth)
    truth_text = last_boxed(truth_text) or truth_text
    answer, boxed = final_answer(response)
    if not answer:
        return False
    if not boxed and _WORD.search(answer):
        return answer == truth_text.strip()
    return equivalent(answer, truth_text)


def math_dapo_reward(response: str, truth: Any, args: DAPOArgs | None = None, *,
                     response_tokens: Sequence[int] | None = None) -> dict[str, float]:
    """``{"accuracy": ±1, "format_score": overlong penalty or 0}`` (module docstring).

    :param response_tokens: the response's token ids (only their number is used); needed
        when ``enable_overlong_penalty`` is set.
    """
    args = args or DAPOArgs()
    accuracy = 1.0 if dapo_correct(response, truth) else -1.0
    penalty = 0.0
    if args.enable_overlong_penalty:
        if response_tokens is None:
            raise RftError("math_dapo_reward: enable_overlong_penalty needs the response's "
                           "token ids, which this workflow does not pass (the single-turn "
                           "workflows of rft-plugin-workflows do: simple_workflow, "
                           "math_workflow, math_boxed_workflow, …)")
        penalty = overlong_penalty(len(response_tokens), args)
    return {"accuracy": accuracy, "format_score": penalty}


math_dapo_reward.Args = DAPOArgs  # type: ignore[attr-defined]
math_dapo_reward.extra_inputs = EXTRA_INPUTS  # type: ignore[attr-defined]
