"""The task pipeline of a stage, run by the launcher before the stage's mode starts.

:func:`prepare_tasks` builds the operators the plan resolved, runs
:func:`rft.data.task_pipeline.run_task_pipeline` into the file the explorer's taskset
points at (derivation made it so), prints and logs one line per operator with its counts
(and one line when the taskset shrank), writes ``<job dir>/task_pipeline/report.json`` and
sends the counts to the monitors (role ``task_pipeline``, step 0). The cache lives in
``<job dir>/task_pipeline/cache``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import asdict

from rft.config.plan import RunPlan
from rft.config.task_pipeline import pipeline_output
from rft.data.task_operator import ModelSource, TaskOperatorContext
from rft.data.task_pipeline import (PipelineOperator, PipelineReport, report_metrics,
                                    run_task_pipeline)
from rft.rollout.auxiliary import engine_config

log = logging.getLogger("rft.data.task_pipeline")


def pipeline_dir(job_dir: str) -> str:
    """``<job dir>/task_pipeline``: the report and the cache."""
    return os.path.join(job_dir, "task_pipeline")


def prepare_tasks(plan: RunPlan) -> PipelineReport | None:
    """Run the stage's task pipeline (see the module docstring); ``None`` when it is off."""
    output = pipeline_output(plan.config)
    pipeline = plan.config.data_processor.task_pipeline
    if output is None or pipeline is None:
        return None
    operators = [PipelineOperator(s.key.removesuffix(".name"), s.name,
                                  s.implementation(s.args)) for s in plan.task_operators]
    context = operator_context(plan)
    folder = pipeline_dir(plan.job_dir)
    report = run_task_pipeline(pipeline, operators, output_path=output,
                               cache_dir=os.path.join(folder, "cache"), context=context)
    for line in report.lines():
        log.info("%s", line)
        print(f"[{plan.config.name}] {line}", file=sys.stdout, flush=True)
    with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as handle:
        json.dump(asdict(report), handle, indent=2)
    _to_monitors(plan, report)
    return report


def operator_context(plan: RunPlan) -> TaskOperatorContext:
    """What the stage's task operators are bound to: the job dir, the auxiliary models by
    name (each with its resolved engine), the taskset's seed."""
    auxiliary = {aux.name: ModelSource(m.key, m.engine.implementation,
                                       engine_config(plan.config, aux))
                 for m, aux in zip(plan.auxiliary_models, plan.config.explorer.auxiliary_models,
                                   strict=True) if aux.name}
    taskset = plan.config.buffer.explorer_input.taskset
    seed = taskset.task_selector.seed if taskset is not None else 42
    return TaskOperatorContext(plan.job_dir, auxiliary, seed)


def _to_monitors(plan: RunPlan, report: PipelineReport) -> None:
    """The counts as step 0 of the ``task_pipeline`` role's monitors."""
    from rft.modes.builders import open_monitors

    for monitor in open_monitors(plan, "task_pipeline"):
        try:
            monitor.start(1)
            monitor.log(report_metrics(report), 0)
        finally:
            monitor.close()


__all__ = ["operator_context", "pipeline_dir", "prepare_tasks"]
