"""rft-plugin-selectors: which tasks of a taskset the explorer takes next.

Registered names (``buffer.explorer_input.taskset.task_selector.selector_type``; the
default, ``sequential``, is the core's: :mod:`rft.builtin.selectors`):

- ``shuffle`` — a fresh seeded permutation every epoch (veRL's ``data.shuffle``).
- ``random`` — each batch drawn uniformly at random (distinct tasks within a batch).
- ``offline_easy2hard`` — sorted by ``task_selector.feature_keys`` (easy first; by default
  higher values are easier, as in Trinity-RFT).
- ``difficulty_based`` — adaptive: prefers tasks whose estimated pass rate is near a target
  (rft's prior-mean estimator, or Trinity-RFT's Beta interpolation with its kwargs).
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_selectors.basic import RandomSelector, ShuffleSelector
from rft_plugin_selectors.difficulty import DifficultyBasedSelector, OfflineEasyToHardSelector


@hookimpl
def register_task_selectors() -> dict[str, Any]:
    return {
        "shuffle": ShuffleSelector,
        "random": RandomSelector,
        "offline_easy2hard": OfflineEasyToHardSelector,
        "difficulty_based": DifficultyBasedSelector,
    }
