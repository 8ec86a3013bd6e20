"""The explorer: tasks → workflows → experiences → experience buffer; and evaluation.

One explore step takes ``buffer.batch_size`` tasks from the training taskset's selector,
runs each ``repeat_times`` times through its workflow, gives every experience its id
(step / task / run), applies the experience pipeline's operators and writes the result to
the experience buffer. Failed tasks are counted (``rollout/failed_tasks``; those that
timed out also in ``rollout/timed_out_tasks``, and the threads of abandoned attempts still
running in ``rollout/abandoned_threads``; with ``explorer.over_rollout`` a step goes on once
``(1 − ratio)`` of its tasks ended, the rest dropped and counted in
``rollout/over_rollout_dropped_tasks``) and logged, never fatal — unless the error is fatal
(a :class:`~rft.errors.ServerUnavailableError`: an external model's server is down), which
stops the batch and is raised once the finished tasks were handed over. Evaluation runs
every task of every eval taskset and reports accuracy and pass@k per taskset; with an
:class:`EvalRecord` (``bench``) each task's results are kept as it finishes, and an
evaluation that stopped midway goes on from them. Fully async (``partial_rollout`` +
``streaming_batches``) an explore step returns once ``batch_size`` tasks ended and the rest
carry over into later steps (:mod:`rft.rollout.carry_over`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rft.buffer.operators import ExperienceOperator, run_pipeline
from rft.buffer.selector import TaskSelector
from rft.buffer.storage import (SQLITE_URL_PREFIX, ExperienceStorage, explore_step_key,
                                open_storage)
from rft.config.plan import RunPlan
from rft.errors import RftError
from rft.experience import EID, Experience
from rft.rollout.auxiliary import (
    AuxiliaryEngineBuilder,
    build_auxiliary_models,
    close_models,
    one_engine,
)
from rft.rollout.model_wrapper import ModelWrapper
from rft.endpoint.settings import EndpointSettings
from rft.engines.reply_parsing import reply_parser_of
from rft.rollout.carry_over import CarryOver, Unit, unit_of_state
from rft.rollout.runner import TaskResult, WorkflowRunner, split_repeats
from rft.rollout.runner_states import start_reporter
from rft.rollout.workflows import Taskset, WorkflowMaker, open_taskset
from rft.workflow import Task

log = logging.getLogger("rft.explorer")


def is_correct(exp: Experience) -> bool:
    """A rollout is correct when its ``accuracy`` reward part is ≥ 1 (else reward ≥ 1)."""
    accuracy = exp.metrics.get("reward/accuracy")
    return (accuracy if accuracy is not None else (exp.reward or 0.0)) >= 1.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from ``n`` samples with ``c`` correct (Chen et al. 2021):
    ``1 − C(n − c, k) / C(n, k)``."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


class EvalRecord(Protocol):
    """Where :meth:`Explorer.evaluate` keeps each task's results as they finish (``bench``
    mode: :class:`rft.modes.bench_results.BenchRecord`, a file per taskset)."""

    def restore(self, taskset: str) -> list[Experience]:
        """Experiences recorded by an earlier evaluation of the same model that did not
        finish (``eid.task`` and ``eid.run`` set); ``[]``: start afresh."""
        ...

    def add(self, taskset: str, experiences: list[Experience]) -> None:
        """The experiences of one task that just succeeded (called from runner threads)."""
        ...

    def finish(self, taskset: str) -> None:
        """Every task of ``taskset`` ran."""
        ...


class Explorer:
    """Drives exploration and evaluation for one stage.

    :param plan: the stage's run plan (config and resolved plugins).
    :param model: the rollout model.
    :param storage: the experience buffer to write to.
    :param auxiliary_build: makes the auxiliary models' engines (default: one each in this
        process; modes on Ray pass a builder of engine pools for ``engine_num > 1``).

    It also starts what the workflows use besides the model: the model's OpenAI endpoint
    (``rollout_model.enable_openai_api``) and the auxiliary models; :meth:`close` stops them.
    Each workflow gets its own view of each model (:meth:`ModelWrapper.for_workflow`), with
    its own call history when ``enable_history`` is set.
    """

    def __init__(self, plan: RunPlan, model: ModelWrapper, storage: ExperienceStorage,
                 auxiliary_build: AuxiliaryEngineBuilder = one_engine) -> None:
        config = self.config = plan.config
        self.model = model
        self.storage = storage
        e = config.explorer
        self.train_sets: list[Taskset] = [open_taskset(t) for t in plan.tasksets]
        self.eval_sets: list[Taskset] = [open_taskset(t) for t in plan.eval_tasksets]
        self.several_tasksets = len(self.train_sets) > 1
        """Several training tasksets: the experiences' ids name their taskset
        (:attr:`rft.experience.EID.taskset`), so equal task indices stay apart."""
        self.selectors: list[TaskSelector] = []
        for taskset, taskset_plan in zip(self.train_sets, plan.tasksets, strict=True):
            selected = taskset_plan.selector
            self.selectors.append(selected.implementation(
                dataset_size=len(taskset.tasks), seed=taskset.config.task_selector.seed,
                args=selected.args, rows=[t.raw for t in taskset.tasks],
                feature_keys=taskset.config.task_selector.feature_keys))
        self.over_rollout = e.over_rollout
        self.max_repeat_times_per_runner = e.max_repeat_times_per_runner
        self.operators: list[tuple[str, ExperienceOperator]] = []
        for chosen in plan.operators:
            self.operators.append((chosen.name, chosen.implementation(chosen.args)))
        self.pipeline_input = pipeline_input_storage(plan)
        self.pipeline_sources = pipeline_source_storages(plan)
        self.failed_tasks: list[str] = []
        self.last_step: list[Experience] = []
        """The experiences the last :meth:`explore_step` wrote (after the operators)."""
        self.algorithm_type = config.algorithm.algorithm_type
        self.greedy_baseline = plan.preset.reward_baseline == "greedy"
        rm = e.rollout_model
        self._owns_server = rm.enable_openai_api and model.server is None
        if self._owns_server:
            model.serve_openai_api(rm.openai_api_host, rm.openai_api_port,
                                   log_requests=rm.enable_log_requests,
                                   reply_parser=reply_parser_of(plan.rollout_model,
                                                                rm.enable_auto_tool_choice),
                                   settings=EndpointSettings.of(rm))
        try:
            self.auxiliary_models = build_auxiliary_models(config, plan.auxiliary_models,
                                                           auxiliary_build)
        except BaseException:
            self._stop_server()
            raise
        self.workflows = WorkflowMaker(self.train_sets, self.eval_sets, model,
                                       enable_history=rm.enable_history,
                                       auxiliary_models=self.auxiliary_models)
        self.runner = WorkflowRunner(self.workflows, max_timeout=e.max_timeout,
                                     max_retry_times=e.max_retry_times,
                                     concurrent_mode=e.concurrent_mode,
                                     workers=e.runner_per_model,
                                     dynamic_timeout_ratio=(e.dynamic_timeout.ratio
                                                            if e.dynamic_timeout.enable else None))
        self.state_reporter = start_reporter(self.runner.states,
                                             e.runner_state_report_interval, log)
        s = config.synchronizer
        self.carry: CarryOver | None = (CarryOver(self.runner)
                                        if s.partial_rollout and s.streaming_batches else None)
        """Fully async (``partial_rollout`` + ``streaming_batches``): tasks in flight across
        explore steps (:mod:`rft.rollout.carry_over`)."""
        self.job_dir = plan.job_dir
        """The run the buffer's write keys belong to (:func:`explore_step_key`)."""
        self._resubmit: list[Unit] = []
        """Units carried over by the step a resumed run goes on from: submitted first."""

    @property
    def train_size(self) -> int:
        return sum(len(t.tasks) for t in self.train_sets)

    def next_tasks(self, batch_size: int) -> list[Task]:
        """The next ``batch_size`` training tasks, spread over the training tasksets."""
        if not self.train_sets:
            return []
        tasks: list[Task] = []
        share = math.ceil(batch_size / len(self.train_sets))
        for taskset, selector in zip(self.train_sets, self.selectors, strict=True):
            take = min(share, batch_size - len(tasks))
            tasks += [taskset.tasks[i] for i in selector.next_batch(take)]
        if self.greedy_baseline:
            tasks = [dataclasses.replace(task, greedy_baseline=True) for task in tasks]
        return tasks

    def feed_back(self, experiences: list[Experience]) -> None:
        """Tell each selector the mean reward of each task it chose (adaptive curricula)."""
        for taskset, selector in zip(self.train_sets, self.selectors, strict=True):
            rewards: dict[int, list[float]] = {}
            for exp in experiences:
                if exp.info.get("taskset") == taskset.config.name:
                    rewards.setdefault(int(exp.eid.task), []).append(exp.reward or 0.0)
            if rewards:
                indices = sorted(rewards)
                selector.update(indices, [statistics.fmean(rewards[i]) for i in indices])

    def run(self, tasks: Sequence[Task], batch_id: int | str, *,
            on_result: Callable[[list[Experience]], None] | None = None,
            over_rollout: bool = False) -> tuple[list[Experience], list[TaskResult]]:
        """Run tasks (split by ``max_repeat_times_per_runner``) and label their experiences;
        ``on_result`` gets the labelled experiences of each task as soon as it succeeds.

        :raises RftError: a fatal error stopped the runner (an external model's server is
            down; see :mod:`rft.rollout.runner`), once every finished task was handed over.
        """
        units: list[tuple[Task, int]] = [part for task in tasks
                                         for part in split_repeats(task, self.max_repeat_times_per_runner)]
        min_done = None
        if over_rollout and self.over_rollout.ratio > 0:  # wait for (1 - ratio) of the units
            min_done = max(1, math.ceil(round(len(units) * (1 - self.over_rollout.ratio), 6)))
            min_done = min_done if min_done < len(units) else None
        ordered: list[TaskResult | None] = [None] * len(units)
        for result in self.runner.run((task for task, _ in units), min_done=min_done,
                                      wait_after_min=self.over_rollout.wait_after_min):
            ordered[result.order] = result
            if result.ok:
                label(result, batch_id, first_run=units[result.order][1],
                      taskset_in_id=self.several_tasksets and isinstance(batch_id, int))
                if on_result is not None:
                    on_result(result.experiences)
        results = [r for r in ordered if r is not None]
        return self._kept([task for task, _ in units], results, batch_id), results

    def _kept(self, tasks: Sequence[Task], results: Sequence[TaskResult],
              batch_id: int | str) -> list[Experience]:
        """The experiences of the tasks that succeeded; failures recorded and logged, and a
        fatal error raised once the rest is counted (see :meth:`run`)."""
        experiences: list[Experience] = []
        not_run = 0
        for task, result in zip(tasks, results, strict=True):
            if result.cut_off:  # explorer.over_rollout: dropped, counted in the metrics
                continue
            if not result.ok:
                message = f"task {task.taskset}[{task.index}] failed after {result.attempts} " \
                          f"attempt(s): {result.error}"
                self.failed_tasks.append(message)
                if not result.attempts:
                    not_run += 1
                elif not result.fatal:  # a fatal error is raised below, said once
                    log.warning(message)
                continue
            if task.greedy_baseline and any("reward_baseline" not in e.info
                                            for e in result.experiences):
                raise RftError(f"taskset {task.taskset!r}: workflow "
                               f"{self.workflows.workflow_class(task).__name__} sets no "
                               f"info['reward_baseline'], which algorithm "
                               f"{self.algorithm_type!r} needs (greedy baseline: call "
                               "Workflow.attach_greedy_baseline in run())")
            experiences.extend(result.experiences)
        if self.runner.fatal_error is not None:
            if not_run:
                log.warning("%d task(s) of batch %s not run: the batch stops on the error "
                            "below", not_run, batch_id)
            raise self.runner.fatal_error
        return experiences

    def _carry_step(self, step: int) -> tuple[list[Experience], list[TaskResult], dict[str, float]]:
        """Fully async: a new batch while at most one is in flight, take the first
        ``batch_size`` tasks to end and those ``max_staleness`` makes due
        (:mod:`rft.rollout.carry_over`); their experiences
        (labelled with the step that submitted each), results and the carry-over metrics.
        A task runs whole (``max_repeat_times_per_runner`` does not split it: its group
        reaches the buffer in one write)."""
        assert self.carry is not None
        batch_size = self.config.buffer.batch_size
        if self._resubmit:
            self.carry.submit(self._resubmit)
            self._resubmit = []
        while len(self.carry.in_flight()) <= batch_size:  # at most one batch ahead
            tasks = self.next_tasks(batch_size)
            if not tasks:
                break
            self.carry.submit([Unit(task, 0, step, self.model.model_version) for task in tasks])
        bound = self.config.synchronizer.max_staleness
        lag = None if bound is None else max(bound - 1, 0)

        def due(unit: Unit) -> bool:  # synchronizer.max_staleness: not carried further
            return lag is not None and self.model.model_version - unit.version >= lag

        taken = self.carry.collect(batch_size, due)
        for unit, result in taken:
            if result.ok:
                label(result, unit.step, first_run=unit.first_run,
                      taskset_in_id=self.several_tasksets)
        experiences = self._kept([u.task for u, _ in taken], [r for _, r in taken], step)
        metrics = {"rollout/carried_over": float(len(self.carry.in_flight())),
                   "rollout/carried_in": float(sum(u.step < step for u, _ in taken))}
        return experiences, [r for _, r in taken], metrics

    def _write_by_task(self, experiences: list[Experience]) -> None:
        """Fully async: each task's experiences as a write of its own, keyed by the step
        that submitted the task and the task (``explore step <s> of <job dir> task
        <taskset>[<index>]``): whichever step ends it, a durable buffer holds it once — a
        run resumed from a checkpoint submits again the tasks that were in flight, some of
        which the failed run may have written already."""
        groups: dict[tuple[Any, str, Any], list[Experience]] = {}
        for exp in experiences:
            key = (exp.eid.batch, str(exp.info.get("taskset", "")), exp.eid.task)
            groups.setdefault(key, []).append(exp)
        for (batch, taskset, task), group in groups.items():
            step_key = (explore_step_key(self.job_dir, batch) if isinstance(batch, int)
                        else f"explore {batch} of {self.job_dir}")
            with self.storage.idempotent_writes(f"{step_key} task {taskset}[{task}]"):
                self.storage.write(group)

    def carried_state(self) -> list[list[Any]]:
        """The units in flight (fully async), as the run state records them."""
        units = self.carry.in_flight() if self.carry is not None else []
        return [unit.to_state() for unit in units + self._resubmit]

    def restore_carried(self, saved: Sequence[Sequence[Any]]) -> None:
        """A resumed run: the units the checkpoint's step carried over are submitted first
        at the next explore step (the selectors, restored, are past them)."""
        by_name = {t.config.name: t.tasks for t in self.train_sets}
        units = [unit_of_state(entry, by_name) for entry in saved]
        if self.greedy_baseline:
            units = [dataclasses.replace(u, task=dataclasses.replace(u.task, greedy_baseline=True))
                     for u in units]
        self._resubmit = units

    def explore_step(self, step: int) -> dict[str, float]:
        """One step: run a batch of tasks and write the experiences to the buffer."""
        started = time.monotonic()
        carried: dict[str, float] = {}
        if self.carry is not None:  # fully async: tasks may end in a later step
            experiences, results, carried = self._carry_step(step)
        else:
            tasks = self.next_tasks(self.config.buffer.batch_size)
            experiences, results = self.run(tasks, step, over_rollout=True)
        self.feed_back(experiences)
        metrics = rollout_metrics(experiences, results)
        metrics.update(carried)
        if self.pipeline_input is not None and experiences:
            self.pipeline_input.write(experiences)
        for name, source in self.pipeline_sources:  # experience_pipeline.inputs
            extra = read_available(source)
            metrics[f"pipeline/inputs/{name}"] = float(len(extra))
            experiences = experiences + extra
        experiences, pipeline_metrics = run_pipeline(self.operators, experiences)
        metrics.update(pipeline_metrics)
        if self.carry is not None:
            self._write_by_task(experiences)
        else:
            self.storage.write(experiences)
        self.last_step = experiences
        metrics["timing_s/explore"] = time.monotonic() - started
        metrics["rollout/abandoned_threads"] = float(self.runner.abandoned_alive())
        metrics["explorer/model_version"] = float(self.model.model_version)
        return metrics

    def evaluate(self, record: EvalRecord | None = None) -> dict[str, float]:
        """Accuracy, mean reward and pass@k of every eval taskset.

        With ``record``, each task's experiences go there as soon as the task succeeds, and
        tasks it already holds every rollout of (:meth:`EvalRecord.restore`: an evaluation
        that stopped midway) are not run again but counted from the record.
        """
        metrics: dict[str, float] = {}
        for taskset in self.eval_sets:
            name, k = taskset.config.name, taskset.config.repeat_times or 1
            kept = record.restore(name) if record is not None else []
            runs: dict[Any, set[int]] = {}
            for exp in kept:
                runs.setdefault(exp.eid.task, set()).add(exp.eid.run)
            done = {task for task, seen in runs.items() if len(seen) >= k}
            kept = [exp for exp in kept if exp.eid.task in done]
            todo = [task for task in taskset.tasks if task.index not in done]
            add = functools.partial(record.add, name) if record is not None else None
            experiences, _ = self.run(todo, f"eval/{name}", on_result=add)
            metrics.update(eval_metrics(name, taskset.tasks, kept + experiences, k,
                                        detailed_stats=self.config.monitor.detailed_stats))
            if record is not None:
                record.finish(name)
        return metrics

    def close(self) -> None:
        if self.state_reporter is not None:
            self.state_reporter.close()
        if self.carry is not None:
            self.carry.close()
        self.runner.close()
        close_models(self.auxiliary_models)
        self.auxiliary_models = []
        if self.pipeline_input is not None:
            self.pipeline_input.close()
            self.pipeline_input = None
        for _, source in self.pipeline_sources:
            source.close()
        self.pipeline_sources = []
        self._stop_server()

    def _stop_server(self) -> None:
        if self._owns_server:
            self.model.close()
            self._owns_server = False


def label(result: TaskResult, batch_id: int | str, *, first_run: int,
          taskset_in_id: bool = False) -> None:
    """Give each experience of a task that succeeded its id (batch / task / run, the runs
    numbered from ``first_run``: the task's part under ``max_repeat_times_per_runner``;
    ``taskset_in_id``: the explorer reads several training tasksets, so the id names the
    task's taskset, :attr:`EID.taskset`) and its taskset."""
    for run, exp in enumerate(result.experiences, start=first_run):
        exp.eid = EID(batch=batch_id, task=result.task.index, run=run,
                      step=exp.eid.step, suffix=exp.eid.suffix,
                      taskset=result.task.taskset if taskset_in_id else "")
        exp.info.setdefault("taskset", result.task.taskset)


PIPELINE_INPUT_FILE = "experience_pipeline_input.jsonl"
"""Under ``<job dir>/buffer/``: the experiences before the operators, unless
``input_save_path`` says where."""


def pipeline_input_storage(plan: RunPlan) -> ExperienceStorage | None:
    """Where ``data_processor.experience_pipeline.save_input`` keeps each explore step's
    experiences as they were before the operators: ``input_save_path`` (JSON lines; a
    ``.db`` / ``sqlite:///`` path: SQLite), unset: ``<job dir>/buffer/`` +
    :data:`PIPELINE_INPUT_FILE`. ``None`` without operators (the buffer holds the same)."""
    pipeline = plan.config.data_processor.experience_pipeline
    if pipeline is None or not pipeline.save_input or not plan.operators:
        return None
    path = pipeline.input_save_path or os.path.join(plan.job_dir, "buffer",
                                                    PIPELINE_INPUT_FILE)
    sql = path.startswith(SQLITE_URL_PREFIX) or path.endswith(".db")
    return open_storage("sql" if sql else "file", "experience_pipeline_input", path)


def pipeline_source_storages(plan: RunPlan) -> list[tuple[str, ExperienceStorage]]:
    """``data_processor.experience_pipeline.inputs``: each named buffer opened for reading
    (its ``name`` defaults to the mapping's key); each explore step, the experiences they
    hold then go through the operators with the explorer's own."""
    pipeline = plan.config.data_processor.experience_pipeline
    if pipeline is None:
        return []
    return [(name, open_storage(buffer.storage_type, buffer.name or name, buffer.path))
            for name, buffer in pipeline.inputs.items()]


def read_available(source: ExperienceStorage) -> list[Experience]:
    """Every experience ``source`` holds now, without waiting."""
    count = source.available()
    return source.read(count, timeout=0.0) if count else []


def rollout_metrics(experiences: list[Experience], results: list[TaskResult]) -> dict[str, float]:
    """Explorer-side metrics of one step (veRL-style names)."""
    metrics: dict[str, float] = {
        "rollout/tasks": float(len(results)),
        "rollout/failed_tasks": float(sum(not r.ok and not r.cut_off for r in results)),
        "rollout/over_rollout_dropped_tasks": float(sum(r.cut_off for r in results)),
        "rollout/timed_out_tasks": float(sum(r.timed_out for r in results)),
        "rollout/experiences": float(len(experiences)),
    }
    if experiences:
        rewards = [e.reward or 0.0 for e in experiences]
        lengths = [e.response_length for e in experiences]
        metrics.update({
            "rollout/reward/mean": statistics.fmean(rewards),
            "rollout/reward/max": max(rewards),
            "rollout/reward/min": min(rewards),
            "rollout/accuracy": statistics.fmean(is_correct(e) for e in experiences),
            "rollout/response_length/mean": statistics.fmean(lengths),
            "rollout/response_length/max": float(max(lengths)),
        })
        for key, value in experience_metric_stats("rollout", experiences).items():
            metrics.setdefault(key, value)  # the step's own figures above come first
    return metrics


def experience_metric_stats(prefix: str, experiences: list[Experience]) -> dict[str, float]:
    """``<prefix>/<metric>/mean|max|min`` of every numeric metric the experiences carry
    (``Experience.metrics``: a workflow's own, ``multi_turn/turns``, ``agent/tool_calls``,
    the reward parts ``reward/<part>``), over the experiences that carry it (Trinity-RFT's
    ``rollout/<metric>/<stat>``)::

        mean = Σ_i x_i / n,   max = max_i x_i,   min = min_i x_i   (i over those n)
    """
    values: dict[str, list[float]] = {}
    for exp in experiences:
        for key, value in exp.metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.setdefault(key, []).append(float(value))
    stats: dict[str, float] = {}
    for key, xs in sorted(values.items()):
        stats.update({f"{prefix}/{key}/mean": statistics.fmean(xs),
                      f"{prefix}/{key}/max": max(xs), f"{prefix}/{key}/min": min(xs)})
    return stats


def eval_metrics(name: str, tasks: Sequence[Task], experiences: list[Experience],
                 k: int, *, detailed_stats: bool = False) -> dict[str, Any]:
    """``eval/<name>/accuracy`` (mean over rollouts), ``…/reward/mean``, ``…/pass@k``; with
    ``detailed_stats`` (``monitor.detailed_stats``) also :func:`task_stats`."""
    by_task: dict[Any, list[Experience]] = {}
    for exp in experiences:
        by_task.setdefault(exp.eid.task, []).append(exp)
    correct = [sum(is_correct(e) for e in by_task.get(t.index, [])) for t in tasks]
    samples = [len(by_task.get(t.index, [])) for t in tasks]
    prefix = f"eval/{name}"
    total = sum(samples)
    metrics: dict[str, Any] = {
        f"{prefix}/accuracy": sum(correct) / total if total else 0.0,
        f"{prefix}/reward/mean": (statistics.fmean(e.reward or 0.0 for e in experiences)
                                  if experiences else 0.0),
        f"{prefix}/failed_tasks": float(sum(1 for s in samples if s == 0)),
    }
    if k > 1:
        metrics[f"{prefix}/pass@{k}"] = statistics.fmean(
            pass_at_k(n, c, k) if n >= k else float(c > 0) for n, c in zip(samples, correct, strict=True))
    if detailed_stats:
        metrics.update(task_stats(prefix, list(by_task.values())))
    return metrics


def task_stats(prefix: str, groups: list[list[Experience]]) -> dict[str, float]:
    """Trinity-RFT's detailed evaluation statistics: for ``accuracy``, ``reward`` and every
    metric the rollouts carry, each task's value ``x_t`` (the mean over its rollouts), then
    ``<prefix>/<metric>/mean|std|max|min`` over the tasks ``t = 1..n``; ``std`` is the
    sample standard deviation ``sqrt(Σ (x_t − x̄)² / (n − 1))`` (0 for one task)."""
    per_task: dict[str, list[float]] = {}
    for group in groups:
        values: dict[str, list[float]] = {
            "accuracy": [float(is_correct(e)) for e in group],
            "reward": [e.reward or 0.0 for e in group]}
        for exp in group:
            for key, value in exp.metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    values.setdefault(key, []).append(float(value))
        for key, seen in values.items():
            per_task.setdefault(key, []).append(statistics.fmean(seen))
    stats: dict[str, float] = {}
    for key, xs in per_task.items():
        stats.update({f"{prefix}/{key}/mean": statistics.fmean(xs),
                      f"{prefix}/{key}/std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
                      f"{prefix}/{key}/max": max(xs), f"{prefix}/{key}/min": min(xs)})
    return stats
