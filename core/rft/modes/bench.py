"""``bench`` mode: evaluate the checkpoints of a run on the eval tasksets.

Every complete checkpoint of the job dir (``explorer.bench_on_latest_checkpoint``: only
the newest) is loaded into the rollout engine as model version ``N`` and evaluated; its
``eval/<taskset>/…`` metrics are logged at step ``N`` to the monitors (role ``bench``)
and kept in ``summary.json`` (``checkpoint_evals``, one entry per checkpoint). Nothing
is trained and no checkpoint is written.
"""

from __future__ import annotations

from rft.buffer.storage import QueueStorage
from rft.checkpoint import check_writable, list_checkpoints, load_actor_weights
from rft.config import Stage
from rft.errors import RftError
from rft.explorer.engine_factory import build_engine, default_sampling
from rft.explorer.explorer import Explorer
from rft.explorer.model_wrapper import ModelWrapper
from rft.modes.builders import quiet_libraries
from rft.modes.stage import CheckpointEval, StageLifecycle, StageResult


def run_bench(stage: Stage) -> StageResult:
    """Evaluate the checkpoints of the stage's job dir (see the module docstring).

    :raises RftError: the job dir holds no checkpoint (one line naming it).
    """
    quiet_libraries()
    plan = stage.plan
    config, job_dir = plan.config, plan.job_dir
    checkpoints = list_checkpoints(job_dir)
    if not checkpoints:
        raise RftError(f"bench: no checkpoint (global_step_N/) in {job_dir}; bench evaluates "
                       "the checkpoints of a train or colocate run with the same project/name")
    if config.explorer.bench_on_latest_checkpoint:
        checkpoints = checkpoints[-1:]
    check_writable(job_dir)
    engine = build_engine(config, plan.rollout_model.engine.implementation)
    # evaluation writes no experience: an in-memory buffer stands in for the real one
    explorer = Explorer(plan, ModelWrapper(engine, default_sampling(config)),
                        QueueStorage("bench"))
    lifecycle = StageLifecycle(stage, ("bench",), has_eval=True)
    try:
        lifecycle.start(checkpoints[-1].step)
        result = lifecycle.result
        for checkpoint in checkpoints:
            engine.update_weights(load_actor_weights(checkpoint).items(), version=checkpoint.step)
            metrics = explorer.evaluate()
            lifecycle.log("bench", metrics, checkpoint.step)
            result.checkpoint_evals.append(CheckpointEval(checkpoint.step, checkpoint.path,
                                                          metrics))
        result.eval_after = result.checkpoint_evals[-1].metrics
        result.failed_tasks = len(explorer.failed_tasks)
        result.final_model_path = config.model.model_path
    finally:
        explorer.close()
        result = lifecycle.close()
    return result
