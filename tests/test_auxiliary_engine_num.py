"""``explorer.auxiliary_models[i].engine_num``: its GPUs are reserved in the cluster split;
in the modes on Ray (both, explore) the model is a pool of that many engine actors whose
calls are spread over them (real Ray, the ``hf`` engine, the tiny model); in the
one-process modes (colocate, bench) more than one engine is refused by name."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from fixtures_models import arithmetic_tasks
from rft.config import build_stages, load_config
from rft.distributed.engine_pool import EnginePool, auxiliary_pools
from rft.errors import ConfigError, RftError
from rft.rollout.auxiliary import build_auxiliary_models, close_models, engine_config
from rft.engines.engine_factory import build_engine
from rft.rollout.model_wrapper import ModelWrapper
from rft.launcher import run
from rft.testing.runs import apply_overrides, tiny_run_config
from test_config import base, registry  # noqa: F401  (fixtures)


def test_auxiliary_engines_reserve_tp_times_engine_num_gpus(base, registry):  # noqa: F811
    # 8 GPUs: rollout 2 engines × TP 2 = 4, judge 2 engines × TP 1 = 2, trainer the rest
    base["explorer"]["auxiliary_models"] = [{"name": "judge", "model_path": "judge",
                                             "engine_num": 2, "tensor_parallel_size": 1}]
    stage = build_stages(base, registry)
    cluster = stage.stages[0].config.cluster
    assert (cluster.explorer_gpu_num, cluster.auxiliary_gpu_num,
            cluster.trainer_gpu_num) == (4, 2, 2)
    assert not [w for w in stage.warnings if "engine_num" in w], stage.warnings
    base["explorer"]["auxiliary_models"][0].update(engine_num=2, tensor_parallel_size=2)
    with pytest.raises(ConfigError, match="no GPU left for the trainer: cluster has 8, "
                                          "explorer uses 4, auxiliary models 4"):
        build_stages(base, registry)


@pytest.mark.parametrize("mode", ["colocate", "bench"])
def test_one_process_modes_refuse_several_auxiliary_engines(base, registry,  # noqa: F811
                                                            mode):
    base["mode"] = mode
    base["cluster"] = {"node_num": 1, "gpu_per_node": 0}
    base["explorer"]["rollout_model"].update(engine_num=1, tensor_parallel_size=1)
    base["synchronizer"]["sync_method"] = "checkpoint" if mode == "bench" else "memory"
    base["explorer"]["auxiliary_models"] = [{"name": "judge", "model_path": "judge",
                                             "engine_type": "hf", "engine_num": 3}]
    with pytest.raises(ConfigError) as caught:
        build_stages(base, registry)
    assert (f"explorer.auxiliary_models[0].engine_num: mode {mode!r} runs an auxiliary model "
            "as one engine in its process, got 3: use 1") in caught.value.problems


def explore_config(tmp_path: Path, model: Path, engine_num: int = 2) -> Path:
    """Mode explore, one step of 2 tasks × 2 rollouts scored by ``llm_judge_workflow``
    with the tiny model as the judge, on a private Ray cluster."""
    tasks = arithmetic_tasks(tmp_path, 2)
    config = apply_overrides(tiny_run_config(model, tasks, tmp_path, steps=1), {
        "mode": "explore",
        "buffer.explorer_input.taskset.default_workflow_type": "llm_judge_workflow",
        "buffer.explorer_input.taskset.workflow_args": {"judge": "judge"},
        "buffer.trainer_input.experience_buffer": {"name": "exp", "storage_type": "sql",
                                                   "path": str(tmp_path / "exp.db")},
        "synchronizer": {"sync_method": "checkpoint", "sync_interval": 1},
        "explorer.auxiliary_models": [{"name": "judge", "model_path": str(model),
                                       "engine_type": "hf", "dtype": "float32",
                                       "engine_num": engine_num}],
        "cluster.ray_address": "local",
    })
    path = tmp_path / "explore.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_one_engine_builder_refuses_several(tmp_path, tiny_model_dir):
    """A mode without Ray builds each auxiliary model in its process: several engines there
    are one line (validation refuses them before: colocate, bench)."""
    stage = load_config(explore_config(tmp_path, tiny_model_dir)).stages[0]
    with pytest.raises(RftError, match=r"engine_num 2 needs engine actors on Ray \(modes both "
                                       r"and explore\)"):
        build_auxiliary_models(stage.config, stage.plan.auxiliary_models)


@pytest.mark.slow
def test_an_auxiliary_pool_spreads_calls_over_its_engines(tmp_path, tiny_model_dir):
    """Two engine actors: one-prompt calls go to each in turn, a call of several prompts is
    split over both, and the pool answers as one engine of the model does."""
    import ray

    stage = load_config(explore_config(tmp_path, tiny_model_dir)).stages[0]
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-auxiliary-pool",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    models = []
    try:
        models = build_auxiliary_models(stage.config, stage.plan.auxiliary_models,
                                        auxiliary_pools(stage.config))
        (judge,) = models
        assert isinstance(judge.engine, EnginePool) and len(judge.engine.replicas) == 2
        assert judge.engine.served() == [0, 0]
        messages = [[{"role": "user", "content": f"{i}+1="}] for i in range(4)]
        replies = [judge.chat(m, temperature=0.0)[0].response_text for m in messages]
        assert judge.engine.served() == [2, 2]  # one call each, in turn
        prompts = [judge.engine.apply_chat_template(m) for m in messages]
        judge.engine.generate(prompts, judge.defaults)  # 4 prompts: a chunk for each
        assert judge.engine.served() == [3, 3]
        aux = stage.config.explorer.auxiliary_models[0]
        alone = build_engine(engine_config(stage.config, aux),
                             stage.plan.auxiliary_models[0].engine.implementation)
        direct = ModelWrapper(alone, judge.defaults, name="judge")
        assert replies == [direct.chat(m, temperature=0.0)[0].response_text for m in messages]
    finally:
        close_models(models)
        ray.shutdown()


@pytest.mark.slow
def test_explore_with_a_judge_of_two_engines(tmp_path, tiny_model_dir, caplog):
    """Mode explore with the rollout model on one engine and the judge on two: the stage
    starts a private Ray cluster for the judge's engine actors, both of them score
    rollouts, and the cluster is gone afterwards."""
    import ray

    caplog.set_level(logging.INFO, logger="rft.distributed.engine_pool")
    assert run(load_config(explore_config(tmp_path, tiny_model_dir))) == 0
    assert not ray.is_initialized()
    (line,) = [r.getMessage() for r in caplog.records
               if r.name == "rft.distributed.engine_pool"]
    served = [int(n) for n in line.split("served ")[1].removesuffix(" calls").split(", ")]
    assert line.startswith(f"engine pool of {tiny_model_dir}: its 2 replicas served")
    assert len(served) == 2 and min(served) >= 1 and sum(served) >= 4, line
    import sqlite3

    with sqlite3.connect(tmp_path / "exp.db") as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM experiences").fetchone()
    assert count == 4


def test_an_external_auxiliary_model_warns_that_engine_num_has_no_effect(tmp_path,
                                                                         tiny_model_dir,
                                                                         monkeypatch):
    monkeypatch.setenv("RFT_TEST_JUDGE_URL", "http://127.0.0.1:9/v1")
    path = explore_config(tmp_path, tiny_model_dir)
    config = yaml.safe_load(path.read_text())
    config["explorer"]["auxiliary_models"] = [{
        "name": "judge", "engine_type": "external", "engine_num": 3,
        "external_model_config": {"base_url_env": "RFT_TEST_JUDGE_URL"}}]
    path.write_text(yaml.safe_dump(config))
    warnings = load_config(path).warnings
    expected = ("explorer.auxiliary_models[0].engine_num: an external model is served by its "
                "own server and rft opens one client to it; it has no effect")
    assert [w for w in warnings if "engine_num" in w] == [expected]


@pytest.mark.slow
def test_both_with_a_judge_of_two_engines(tmp_path, tiny_model_dir):
    """Mode both: the explorer actor builds the judge's two engine actors; both score
    rollouts (each worker process logs the pools it closes to a file of the test)."""
    import ray

    pools = tmp_path / "pools.log"

    def log_pools() -> None:
        handler = logging.FileHandler(pools)
        logger = logging.getLogger("rft.distributed.engine_pool")
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)

    path = explore_config(tmp_path, tiny_model_dir)
    config = yaml.safe_load(path.read_text())
    config.update(mode="both")
    config["synchronizer"] = {"sync_method": "memory", "sync_interval": 1}
    del config["cluster"]["ray_address"]
    path.write_text(yaml.safe_dump(config))
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-auxiliary-both", runtime_env={
                 "env_vars": {"OMP_NUM_THREADS": "1"}, "worker_process_setup_hook": log_pools})
    try:
        assert run(load_config(path)) == 0
    finally:
        ray.shutdown()
    (line,) = pools.read_text().splitlines()
    served = [int(n) for n in line.split("served ")[1].removesuffix(" calls").split(", ")]
    assert line.startswith(f"engine pool of {tiny_model_dir}: its 2 replicas served")
    assert len(served) == 2 and min(served) >= 1 and sum(served) >= 4, line
