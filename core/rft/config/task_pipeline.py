"""``data_processor.task_pipeline`` in the two config stages.

Derivation (:func:`derive_task_pipeline`, pure) makes the pipeline's output the explorer's
taskset: when the pipeline is on (it names operators, inputs, or a selection), its
``inputs`` are filled in (the older ``input_buffers``' paths, else the taskset's own
path), ``target_fields`` from the older ``format`` (its ``prompt_key`` / ``response_key``
values) when unset, and ``buffer.explorer_input.taskset.path`` becomes the output file
(:func:`output_path`): ``output.path``, else the older ``output_buffer.path``, else
``<checkpoint_job_dir>/task_pipeline/tasks.jsonl``.

The check (:func:`check_task_pipeline`, read only) resolves the operators through the
plugin registry and reports a bad value in one line naming its key.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rft.config.findings import Findings, data_path_here
from rft.config.plan import Selected
from rft.config.schema import RftConfig, TaskPipelineConfig, TasksetConfig
from rft.plugin_kinds import TASK_OPERATOR

if TYPE_CHECKING:
    from rft.data.task_operator import TaskOperator

KEY = "data_processor.task_pipeline"
OUTPUT_FILE = "tasks.jsonl"
"""File name of the processed taskset in a folder (the job dir's ``task_pipeline/``, or
an ``output`` path that is a folder)."""
PRIORITY_STATS = ("difficulty", "diversity", "usage_frequency", "quality")
"""The statistics ``priority_weights`` may name (:mod:`rft.data.priority`)."""


def pipeline_on(tp: TaskPipelineConfig | None) -> bool:
    """The pipeline has something to do: operators, inputs or a selection."""
    return tp is not None and bool(tp.operators or tp.inputs or tp.input_buffers
                                   or tp.priority_weights or tp.top_k > 0)


def output_path(tp: TaskPipelineConfig, job_dir: str) -> str:
    """Where the processed taskset is written (see the module docstring); a path that does
    not end in ``.jsonl`` is a folder holding :data:`OUTPUT_FILE`."""
    path = tp.output.path if tp.output is not None and tp.output.path else None
    if path is None and tp.output_buffer and tp.output_buffer.get("path"):
        path = str(tp.output_buffer["path"])
    if path is None:
        return os.path.join(job_dir, "task_pipeline", OUTPUT_FILE)
    return path if path.endswith(".jsonl") else os.path.join(path, OUTPUT_FILE)


def pipeline_output(c: RftConfig) -> str | None:
    """The file the pipeline writes in a derived config; ``None`` when it is off."""
    tp = c.data_processor.task_pipeline
    if not pipeline_on(tp) or c.checkpoint_job_dir is None:
        return None
    assert tp is not None
    return output_path(tp, c.checkpoint_job_dir)


def derive_task_pipeline(c: RftConfig) -> RftConfig:
    """``c`` with the pipeline's inputs, target fields and output taskset filled in (see
    the module docstring); unchanged when the pipeline is off. Needs
    ``checkpoint_job_dir``."""
    tp = c.data_processor.task_pipeline
    if tp is None or not pipeline_on(tp) or c.checkpoint_job_dir is None:
        return c
    ei = c.buffer.explorer_input
    taskset = ei.taskset
    inputs = list(tp.inputs) or [str(b["path"]) for b in tp.input_buffers if b.get("path")]
    if not inputs and taskset is not None and taskset.path:
        inputs = [taskset.path]
    target_fields = list(tp.target_fields) or [
        str(tp.format[k]) for k in ("prompt_key", "response_key") if tp.format.get(k)]
    out = output_path(tp, c.checkpoint_job_dir)
    if taskset is None:
        base = tp.output if tp.output is not None else TasksetConfig(name="taskset")
        taskset = replace(base, storage_type="file", path=out)
    else:
        taskset = replace(taskset, storage_type="file", path=out)
    tp = replace(tp, inputs=inputs, target_fields=target_fields)
    return replace(c, data_processor=replace(c.data_processor, task_pipeline=tp),
                   buffer=replace(c.buffer, explorer_input=replace(ei, taskset=taskset)))


def check_task_pipeline(c: RftConfig, found: Findings
                        ) -> tuple[Selected[type[TaskOperator]], ...]:
    """The pipeline's operators resolved; one line per bad value."""
    tp = c.data_processor.task_pipeline
    if tp is None:
        return ()
    operators: list[Selected[Any]] = []
    for i, operator in enumerate(tp.operators):
        key = f"{KEY}.operators[{i}]"
        chosen = found.select(TASK_OPERATOR, f"{key}.name", operator.name, operator.args,
                              f"{key}.args")
        if chosen is not None:
            operators.append(chosen)
            names = frozenset(m.name for m in c.explorer.auxiliary_models if m.name)
            warn = getattr(chosen.implementation, "config_warnings", None)
            if warn is not None:
                found.warnings.extend(f"{key}.{w}" for w in warn(chosen.args, names))
    if tp.num_process < 1:
        found.problem(f"{KEY}.num_process", f"must be >= 1, got {tp.num_process}")
    if tp.top_k == 0 or tp.top_k < -1:
        found.problem(f"{KEY}.top_k", f"must be -1 (all tasks) or >= 1, got {tp.top_k}")
    for name in tp.priority_weights:
        if name not in PRIORITY_STATS:
            found.problem(f"{KEY}.priority_weights.{name}",
                          f"unknown statistic; use {', '.join(PRIORITY_STATS)}")
    if pipeline_on(tp):
        if not (tp.operators or tp.priority_weights or tp.top_k > 0):
            found.warnings.append(f"{KEY}: names no operator: its inputs are copied to the "
                                  "taskset as read (Data-Juicer recipes: see "
                                  "docs/data-processing.md)")
        if not tp.inputs:
            found.problem(f"{KEY}.inputs", "no input: set inputs (jsonl / parquet files) or "
                          "buffer.explorer_input.taskset.path")
        for i, path in enumerate(tp.inputs):
            data_path_here(found, f"{KEY}.inputs[{i}]", path)
        if c.buffer.explorer_input.tasksets:
            found.problem(f"{KEY}", "writes buffer.explorer_input.taskset; it cannot be used "
                          "with buffer.explorer_input.tasksets (several tasksets)")
    return tuple(operators)


__all__ = ["KEY", "OUTPUT_FILE", "PRIORITY_STATS", "check_task_pipeline",
           "derive_task_pipeline", "output_path", "pipeline_on", "pipeline_output"]
