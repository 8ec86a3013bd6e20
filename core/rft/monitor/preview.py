"""Rollout previews (``trainer.enable_preview``, as in Trinity-RFT): a few decoded rows of
each training batch for the monitors' tables.

Each train step gives the table :data:`ROLLOUT_EXAMPLES` two rows, the experience with the
highest reward and the one with the lowest (one row when the batch has one experience):
``{"step", "reward", "prompt", "response"}``, the texts decoded with special tokens kept.
Monitors show the table their own way (:meth:`rft.monitor.base.Monitor.log_table`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rft.experience import Experience

ROLLOUT_EXAMPLES = "rollout_examples"
"""The monitors' table name of the preview (Trinity-RFT's)."""


def rollout_examples(experiences: Sequence[Experience], decode: Callable[[list[int]], str],
                     step: int) -> list[dict[str, Any]]:
    """The preview rows of one train step's ``experiences`` (``decode``: token ids → text,
    e.g. ``tokenizer.decode``); no rows for an empty batch."""
    if not experiences:
        return []
    by_reward = sorted(range(len(experiences)), key=lambda i: experiences[i].reward or 0.0)
    chosen = [by_reward[-1]] + ([by_reward[0]] if len(by_reward) > 1 else [])
    rows = []
    for index in chosen:
        exp = experiences[index]
        response = exp.response_text
        if response is None:
            response = decode(exp.response_tokens.tolist())
        rows.append({"step": step, "reward": float(exp.reward or 0.0),
                     "prompt": decode(exp.prompt_tokens.tolist()),
                     "response": response})
    return rows


class Previewer:
    """Preview rows for a stage: the policy's tokenizer is loaded on first use
    (``load``: a callable returning it, e.g. :func:`rft.chat_template.load_tokenizer`)."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._tokenizer: Any = None

    def rows(self, experiences: Sequence[Experience], step: int) -> list[dict[str, Any]]:
        if not experiences:
            return []
        if self._tokenizer is None:
            self._tokenizer = self._load()
        tokenizer = self._tokenizer
        return rollout_examples(experiences, lambda ids: tokenizer.decode(ids), step)


__all__ = ["ROLLOUT_EXAMPLES", "Previewer", "rollout_examples"]
