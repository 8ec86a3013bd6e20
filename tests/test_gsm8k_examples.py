"""The GSM8K alignment-benchmark configs (examples/gsm8k/): each validates as shipped
(tests/test_examples.py only globs examples/*.yaml), and one of them runs two
explore+train steps on the real GSM8K train split with the tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from rft.config import load_config
from rft.launcher import run

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "examples" / "gsm8k").glob("*.yaml"))


def test_the_four_experiments_are_shipped():
    assert [p.name.split("_")[0] for p in CONFIGS] == ["exp1", "exp2", "exp3", "exp4"]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_gsm8k_example_validates(path, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the taskset path is relative to the repository root
    # written for a node of 8 GPUs: validated as on a cluster of such nodes (here, with no
    # GPU, validation refuses cluster.gpu_per_node 8)
    loaded = load_config(path, [f"checkpoint_root_dir={tmp_path}",
                                "cluster.ray_address=10.0.0.1:6379"])
    (stage,) = loaded.stages
    config = stage.config
    plain = yaml.safe_load(path.read_text())
    assert config.model.model_path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert config.algorithm.algorithm_type == "grpo" and config.algorithm.repeat_times == 8
    assert config.buffer.batch_size == 96 and config.buffer.train_batch_size == 768
    taskset = config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == "verl_gsm8k_workflow"
    assert taskset.default_reward_fn_type == "gsm8k_reward"
    assert config.trainer.trainer_type == "torch"
    kl = plain["algorithm"]["kl_loss_fn_args"]["kl_coef"]
    entropy = plain["algorithm"]["entropy_loss_fn_args"]["entropy_coef"]
    regularised = path.name.startswith(("exp2", "exp4"))
    assert (kl, entropy) == ((0.001, 0.003) if regularised else (0.0, 0.0))


def test_two_steps_of_an_example_on_the_real_gsm8k_file(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(REPO)
    path = REPO / "examples" / "gsm8k" / "exp4_independent_with_reg.yaml"
    overrides = [
        f"checkpoint_root_dir={tmp_path}", f"model.model_path={tiny_model_dir}",
        "model.max_prompt_tokens=512", "model.max_response_tokens=8",
        "buffer.batch_size=2", "buffer.total_steps=2", "algorithm.repeat_times=2",
        "algorithm.optimizer.lr=1e-3", "cluster.gpu_per_node=0",
        # the hf engine: vLLM's CPU attention has no kernel for the tiny model's head size 16
        "explorer.rollout_model.engine_type=hf",
        "explorer.rollout_model.dtype=float32", "explorer.runner_per_model=1",
        "trainer.save_interval=0", "monitor.monitor_type=jsonl",
        "buffer.trainer_input.experience_buffer.storage_type=file",
        f"buffer.trainer_input.experience_buffer.path={tmp_path / 'experiences.jsonl'}",
    ]
    loaded = load_config(path, overrides)
    stage = loaded.stages[0]
    assert run(loaded) == 0
    job = Path(stage.config.checkpoint_job_dir)
    trainer = [json.loads(x) for x in (job / "monitor" / "trainer.jsonl").read_text().splitlines()]
    explorer = [json.loads(x) for x in (job / "monitor" / "explorer.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trainer] == [1, 2] and [r["step"] for r in explorer] == [1, 2]
    for record in explorer:
        m = record["metrics"]
        assert m["rollout/failed_tasks"] == 0 and m["rollout/experiences"] == 4
        # gsm8k_reward scores 0 or 1 per response (veRL's gsm8k.compute_score defaults)
        assert 0.0 <= m["rollout/reward/min"] <= m["rollout/reward/max"] <= 1.0
    for record in trainer:
        m = record["metrics"]
        for name in ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/grad_norm",
                     "critic/score/mean", "critic/advantages/mean"):
            assert math.isfinite(m[name]), (name, m[name])
        assert m["actor/kl_coef"] == pytest.approx(0.001)
    # every experience was scored by gsm8k_reward: its one part, "accuracy", is the reward
    experiences = [json.loads(x) for x in (tmp_path / "experiences.jsonl").read_text().splitlines()]
    assert len(experiences) == 8
    for exp in experiences:
        assert set(exp["metrics"]) >= {"reward/accuracy"}
        assert exp["reward"] == exp["metrics"]["reward/accuracy"] in (0.0, 1.0)
    # the experiences were written and read: both steps trained on 4 of them each
    state = json.loads((job / "global_step_2" / "state.json").read_text())
    assert state["experiences_written"] == state["experiences_read"] == 8
