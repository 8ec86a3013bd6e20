"""``data_processor.task_pipeline``: raw task files → operators in order → the taskset the
explorer reads.

:func:`run_task_pipeline` reads the inputs (:mod:`rft.data.task_io`), runs each
:class:`~rft.data.task_operator.TaskOperator` in order — its output looked up first in the
content-hash cache (:mod:`rft.data.task_cache`), a row-wise operator split over
``num_process`` worker processes (:mod:`rft.data.parallel`) — then selects by priority
(``priority_weights`` / ``top_k``, :mod:`rft.data.priority`), keeps ``target_fields`` and
writes the processed taskset as JSON lines. It returns a :class:`PipelineReport` with the
rows before and after each operator; the caller logs it and sends it to the monitors
(:func:`report_metrics`).

An operator that drops every task stops the run with one line naming it
(:class:`EmptyTasksetError`); what ran before it stays in the cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rft.config.schema import TaskPipelineConfig
from rft.data import priority
from rft.data.parallel import process_split
from rft.data.task_cache import TaskCache
from rft.data.task_io import read_inputs, write_rows
from rft.data.task_operator import STATS_KEY, TaskOperator, TaskOperatorContext, TaskRow
from rft.errors import RftError

log = logging.getLogger("rft.data.task_pipeline")

KEY = "data_processor.task_pipeline"
"""The config section's dotted key."""


class EmptyTasksetError(RftError):
    """An operator (or the selection) left no task."""


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
    seconds: float
    """Wall time of the step (reading the cache, or running the operator)."""


@dataclass(frozen=True)
class PipelineReport:
    """What one pipeline run did."""

    output_path: str
    """The processed taskset (JSON lines)."""
    rows_in: int
    rows_out: int
    counts: tuple[OperatorCount, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """Human lines: one per operator, one for the whole (the shrink said plainly)."""
        found = [f"task pipeline: {c.key} ({c.name}): {c.before} → {c.after} tasks"
                 + (" (cached)" if c.cached else f" in {c.seconds:.2f} s") for c in self.counts]
        if self.rows_out < self.rows_in:
            found.append(f"task pipeline: the taskset shrank from {self.rows_in} to "
                         f"{self.rows_out} tasks ({self.output_path})")
        else:
            found.append(f"task pipeline: {self.rows_out} tasks written to {self.output_path}")
        return found


@dataclass(frozen=True)
class PipelineOperator:
    """One resolved operator of the pipeline with its config key."""

    key: str
    name: str
    operator: TaskOperator


def report_metrics(report: PipelineReport) -> dict[str, float]:
    """``task_pipeline/<operator>/rows_before|rows_after`` and the totals, for monitors."""
    metrics = {"task_pipeline/rows_in": float(report.rows_in),
               "task_pipeline/rows_out": float(report.rows_out),
               "task_pipeline/seconds": report.seconds}
    for i, count in enumerate(report.counts):
        prefix = f"task_pipeline/{i}_{count.name}"
        metrics[f"{prefix}/rows_before"] = float(count.before)
        metrics[f"{prefix}/rows_after"] = float(count.after)
        metrics[f"{prefix}/cached"] = float(count.cached)
    return metrics


def run_task_pipeline(pipeline: TaskPipelineConfig, operators: Sequence[PipelineOperator], *,
                      output_path: str, cache_dir: str,
                      context: TaskOperatorContext) -> PipelineReport:
    """Run the pipeline (see the module docstring) and write ``output_path``."""
    started = time.perf_counter()
    rows = read_inputs((f"{KEY}.inputs[{i}]", path) for i, path in enumerate(pipeline.inputs))
    if not rows:
        raise EmptyTasksetError(f"{KEY}.inputs: the inputs hold no task "
                                f"({', '.join(pipeline.inputs)})")
    rows_in = len(rows)
    cache = TaskCache(cache_dir)
    counts: list[OperatorCount] = []
    for step in operators:
        step.operator.bind(context)
        rows, count = _run_one(step, rows, cache, pipeline.num_process)
        counts.append(count)
        log.info("task pipeline: %s (%s): %d → %d tasks%s", step.key, step.name, count.before,
                 count.after, " (cached)" if count.cached else "")
        if not rows:
            raise EmptyTasksetError(
                f"{step.key}: operator {step.name!r} dropped every task ({count.before} → 0); "
                "the run stops before training: loosen its args")
    selected = priority.select(rows, pipeline.priority_weights, pipeline.top_k,
                               pipeline.target_fields)
    write_rows(output_path, [_output_row(row, pipeline.target_fields) for row in selected])
    return PipelineReport(output_path, rows_in, len(selected), tuple(counts),
                          time.perf_counter() - started)


def _run_one(step: PipelineOperator, rows: list[TaskRow], cache: TaskCache,
             num_process: int) -> tuple[list[TaskRow], OperatorCount]:
    """One operator's output, from the cache or computed (and then cached)."""
    started = time.perf_counter()
    key = cache.key(rows, step.operator.fingerprint(step.name))
    stored = cache.get(key)
    if stored is not None:
        output, cached = stored, True
    else:
        output = process_split(step.operator, rows, num_process)
        cache.put(key, output)
        cached = False
    count = OperatorCount(step.name, step.key, len(rows), len(output), cached,
                          time.perf_counter() - started)
    return output, count


def _output_row(row: TaskRow, target_fields: Sequence[str]) -> TaskRow:
    """The row as written: its ``target_fields`` only (all fields when empty), without the
    operators' statistics."""
    if target_fields:
        missing = [name for name in target_fields if name not in row]
        if missing:
            raise RftError(f"{KEY}.target_fields: {missing[0]!r} is not a field of the processed "
                           f"task {_short(row)}")
        return {name: row[name] for name in target_fields}
    return {name: value for name, value in row.items() if name != STATS_KEY}


def _short(row: TaskRow) -> str:
    """The row's fields, for a message."""
    return "with fields " + ", ".join(sorted(k for k in row if k != STATS_KEY))


__all__ = ["KEY", "EmptyTasksetError", "OperatorCount", "PipelineOperator", "PipelineReport",
           "report_metrics", "run_task_pipeline"]
