"""``language_id_score_filter``: keep tasks written in given languages.

The detector is py3langid (langid.py's model: a naive Bayes classifier over byte n-grams,
97 languages, shipped inside the wheel, no download), with probabilities normalised over
the languages; a row is kept when its most likely language is one of ``lang`` with
probability ``>= min_score``. The probability is kept as the ``language_score`` stat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rft.data.task_operator import TaskOperator, TaskRow, row_stats
from rft_plugin_data_ops.text import row_text


@dataclass
class LanguageArgs:
    lang: list[str] = field(default_factory=lambda: ["en"])
    """ISO 639-1 codes kept (``en``, ``zh``, ``fr``, …)."""
    min_score: float = 0.8
    """Lowest probability of the detected language kept."""
    fields: list[str] = field(default_factory=list)
    """Fields whose text is classified; empty: every string field."""


class LanguageIdScoreFilter(TaskOperator):
    """See the module docstring."""

    Args = LanguageArgs
    args: LanguageArgs

    def process(self, rows: list[TaskRow]) -> list[TaskRow]:
        identifier = _identifier()
        kept: list[TaskRow] = []
        for row in rows:
            lang, probability = identifier.classify(row_text(row, self.args.fields))
            if lang in self.args.lang and probability >= self.args.min_score:
                row_stats(row)["language_score"] = float(probability)
                kept.append(row)
        return kept


_IDENTIFIER: Any = None


def _identifier() -> Any:
    """py3langid's identifier with normalised probabilities (loaded once per process)."""
    global _IDENTIFIER
    if _IDENTIFIER is None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        _IDENTIFIER = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _IDENTIFIER
