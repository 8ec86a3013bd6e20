"""``data_processor.task_pipeline``: raw task files → operators in order → the taskset the
explorer reads.

:func:`run_task_pipeline` reads the inputs, runs each :class:`~rft.data.task_operator.
TaskOperator` (cached by content hash, row-wise ones split over ``num_process`` worker
processes), applies priority-based selection, keeps ``target_fields`` and writes the
processed taskset as JSON lines. It returns a :class:`PipelineReport` with the row counts
before and after each operator (logged and sent to the monitors).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rft.data.task_operator import TaskOperator


@dataclass(frozen=True)
class OperatorCount:
    """Rows before and after one operator."""

    name: str
    """The operator's name (``operators[i].name``)."""
    key: str
    """Its dotted config key (``data_processor.task_pipeline.operators[i]``)."""
    before: int
    after: int
    cached: bool
    """Its output came from the cache (the operator was not called)."""


@dataclass(frozen=True)
class PipelineReport:
    """What one pipeline run did."""

    output_path: str
    """The processed taskset (JSON lines)."""
    rows_in: int
    rows_out: int
    counts: tuple[OperatorCount, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class PipelineOperator:
    """One resolved operator of the pipeline with its config key."""

    key: str
    name: str
    operator: TaskOperator


__all__ = ["OperatorCount", "PipelineOperator", "PipelineReport"]
