"""``bench`` mode: evaluate the checkpoints of a run on the eval tasksets.

Every complete checkpoint of the job dir (``explorer.bench_on_latest_checkpoint``: only
the newest) is loaded into the rollout engine as model version ``N`` and evaluated; its
``eval/<taskset>/…`` metrics are logged at step ``N`` to the monitors (role ``bench``)
and kept in ``summary.json`` (``checkpoint_evals``, one entry per checkpoint). Nothing
is trained and no checkpoint is written.

A remote engine (``external``: a model behind an OpenAI-compatible server) takes no
weights: the hosted model itself is evaluated once, as step 0, and the job dir needs no
checkpoint.

Each task's rollouts are written to ``<job dir>/bench/step_<N>/<taskset>.jsonl`` as the
task finishes (:mod:`rft.modes.bench_results`): a bench that stops midway (the model's
server went down: a one-line error naming its URL) keeps them, and the next bench of the
job dir goes on from them (a bench that finished is redone afresh by the next one).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rft.adapter import AdapterWeights
from rft.buffer.storage import QueueStorage
from rft.checkpoint import (
    Checkpoint,
    check_writable,
    list_checkpoints,
    load_sync_weights,
)
from rft.config import Stage
from rft.config.plan import RunPlan
from rft.errors import RftError
from rft.engines.engine import load_weights
from rft.engines.engine_factory import build_engine, default_sampling
from rft.rollout.explorer import Explorer
from rft.rollout.model_wrapper import ModelWrapper
from rft.modes.bench_results import BenchRecord, BenchRun
from rft.modes.builders import quiet_libraries
from rft.modes.stage import CheckpointEval, StageLifecycle, StageResult


def run_bench(stage: Stage) -> StageResult:
    """Evaluate the checkpoints of the stage's job dir (see the module docstring).

    :raises RftError: the job dir holds no checkpoint (one line naming it).
    """
    quiet_libraries()
    plan = stage.plan
    config, job_dir = plan.config, plan.job_dir
    engine_cls = plan.rollout_model.engine.implementation
    # a remote engine takes no weights: the hosted model, as it is served, is step 0
    checkpoints = [Checkpoint(0, "")] if engine_cls.remote else list_checkpoints(job_dir)
    if not checkpoints:
        raise RftError(f"bench: no checkpoint (global_step_N/) in {job_dir}; bench evaluates "
                       "the checkpoints of a train or colocate run with the same project/name")
    if config.explorer.bench_on_latest_checkpoint:
        checkpoints = checkpoints[-1:]
    check_writable(job_dir)
    engine = build_engine(config, engine_cls)
    # evaluation writes no experience: an in-memory buffer stands in for the real one
    explorer = Explorer(plan, ModelWrapper(engine, default_sampling(config)),
                        QueueStorage("bench"))
    lifecycle = StageLifecycle(stage, ("bench",), has_eval=True)
    bench_run = BenchRun(job_dir)
    try:
        bench_run.start()
        lifecycle.start(checkpoints[-1].step)
        result = lifecycle.result
        for checkpoint in checkpoints:
            if engine_cls.remote:  # known by its name: the server may move between benches
                model = f"external model {getattr(engine, 'model_name', '')!r}"
                where = f"{model} at {getattr(engine, 'base_url', '')}"
            else:
                weights = load_sync_weights(checkpoint)  # LoRA: the adapter
                load_weights(engine, weights if isinstance(weights, AdapterWeights)
                             else weights.items(), checkpoint.step)
                where = checkpoint.path  # known by its folder and when it was written
                model = f"{where} @ {os.path.getmtime(os.path.join(where, 'state.json'))}"
            record = BenchRecord(job_dir, checkpoint.step, bench_identity(plan, model=model),
                                 resume=bench_run.continues)
            try:
                metrics = explorer.evaluate(record)
            finally:
                record.close()
            lifecycle.log("bench", metrics, checkpoint.step)
            result.checkpoint_evals.append(CheckpointEval(checkpoint.step, where, metrics))
        bench_run.finished()
        result.eval_after = result.checkpoint_evals[-1].metrics
        result.failed_tasks = len(explorer.failed_tasks)
        result.final_model_path = config.model.model_path
    finally:
        explorer.close()
        result = lifecycle.close()
    return result


def bench_identity(plan: RunPlan, *, model: str) -> dict[str, Any]:
    """What must be equal for a bench to go on from recorded results
    (:class:`~rft.modes.bench_results.BenchRecord`): the model, and per eval taskset its
    settings and the sampling defaults."""
    sampling = dataclasses.asdict(default_sampling(plan.config))
    return {"model": model,
            "tasksets": {t.config.name: {"config": dataclasses.asdict(t.config),
                                         "sampling": sampling}
                         for t in plan.eval_tasksets}}
