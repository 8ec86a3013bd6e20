"""rft-plugin-data-ops: task operators for ``data_processor.task_pipeline``.

- ``llm_difficulty_score_filter`` (:mod:`.difficulty`): a model rates each task 1–5; keeps
  rows whose difficulty is in ``[min_score, max_score]``; writes the ``difficulty`` stat.
- ``exact_deduplicator`` / ``near_deduplicator`` (:mod:`.dedup`).
- ``text_length_filter`` (:mod:`.length`), ``language_id_score_filter`` (:mod:`.language`).

The operator modules are imported when the hook is called, not when rft loads the plugin:
listing plugins stays cheap and never imports the scorer's engines.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl


@hookimpl
def register_task_operators() -> dict[str, Any]:
    from rft_plugin_data_ops.dedup import ExactDeduplicator, NearDeduplicator
    from rft_plugin_data_ops.difficulty import LLMDifficultyScoreFilter
    from rft_plugin_data_ops.language import LanguageIdScoreFilter
    from rft_plugin_data_ops.length import TextLengthFilter

    return {
        "llm_difficulty_score_filter": LLMDifficultyScoreFilter,
        "exact_deduplicator": ExactDeduplicator,
        "near_deduplicator": NearDeduplicator,
        "text_length_filter": TextLengthFilter,
        "language_id_score_filter": LanguageIdScoreFilter,
    }
