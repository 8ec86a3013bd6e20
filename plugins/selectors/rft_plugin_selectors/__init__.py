"""rft-plugin-selectors: which tasks of a taskset the explorer takes next.

Registered names (``buffer.explorer_input.taskset.task_selector.selector_type``):

- ``sequential`` — tasks in file order, epoch after epoch.
- ``shuffle`` — a fresh seeded permutation every epoch (veRL's ``data.shuffle``).
- ``random`` — each batch drawn uniformly at random (distinct tasks within a batch).
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_selectors.basic import RandomSelector, SequentialSelector, ShuffleSelector


@hookimpl
def register_task_selectors() -> dict[str, Any]:
    return {
        "sequential": SequentialSelector,
        "shuffle": ShuffleSelector,
        "random": RandomSelector,
    }
