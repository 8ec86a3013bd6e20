"""Mode ``explore`` with ``explorer.rollout_model.engine_num: 2``: the explorer's engine is
a pool of two engine actors on a private Ray cluster (real Ray, the ``hf`` engine, the
tiny model, a SQLite buffer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from fixtures_models import arithmetic_tasks
from rft.checkpoint import save_checkpoint
from rft.config import load_config
from rft.distributed import explore_engines
from rft.distributed.engine_pool import EnginePool
from rft.engines.hf_engine import HFEngine
from rft.distributed.ray_runtime import RayDistributed
from rft.launcher import MODE_RUNNERS, RUNTIME, run
from rft.modes.explore import run_explore_mode
from rft.testing.runs import apply_overrides, read_metrics, tiny_run_config


class RecordingPool(EnginePool):
    """The real pool, recording how many prompts each ``generate`` call split."""

    made: list[RecordingPool] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prompts_per_call: list[int] = []
        RecordingPool.made.append(self)

    def generate(self, prompt_token_ids, sampling, n=1):
        self.prompts_per_call.append(len(prompt_token_ids))
        return super().generate(prompt_token_ids, sampling, n)


def test_the_launcher_runs_explore_through_the_engine_pool_runner() -> None:
    assert MODE_RUNNERS["explore"] is run_explore_mode
    assert isinstance(RUNTIME, RayDistributed)  # its engine_pool: explore_engines.pool_builder


@pytest.mark.slow
def test_explore_with_two_engines(tmp_path, tiny_model_dir, monkeypatch) -> None:
    """Both replicas serve the step (its two tasks' merged call is split over them), both
    took the trainer's checkpoint: every experience's log-probs are those of
    ``global_step_1``, not of the initial model; the private cluster is gone afterwards."""
    import ray

    from transformers import AutoModelForCausalLM

    job = tmp_path / "checkpoints" / "rft_run" / "run"  # tiny_run_config's job dir
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    save_checkpoint(str(job), 1, {"optimizer": {}}, {"step": 1}, save_hf=model.save_pretrained)

    tasks = arithmetic_tasks(tmp_path, 4)
    config = apply_overrides(tiny_run_config(tiny_model_dir, tasks, tmp_path, steps=1), {
        "mode": "explore", "continue_from_checkpoint": True,
        "buffer.trainer_input.experience_buffer": {"name": "exp", "storage_type": "sql",
                                                   "path": str(tmp_path / "exp.db")},
        "synchronizer": {"sync_method": "checkpoint", "sync_interval": 1},
        "explorer.rollout_model.engine_num": 2,
        "cluster.ray_address": "local",
    })
    path = tmp_path / "explore.yaml"
    path.write_text(yaml.safe_dump(config))
    RecordingPool.made.clear()
    monkeypatch.setattr(explore_engines, "EnginePool", RecordingPool)
    assert run(load_config(path)) == 0
    assert not ray.is_initialized()

    (pool,) = RecordingPool.made
    assert len(pool.replicas) == 2 and max(pool.prompts_per_call) >= 2  # a chunk for each
    import sqlite3

    with sqlite3.connect(tmp_path / "exp.db") as conn:
        rows = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM experiences")]
    assert len(rows) == 4 and {row["model_version"] for row in rows} == {1}
    step1 = HFEngine(str(job / "global_step_1" / "hf"), dtype="float32")
    initial = HFEngine(str(tiny_model_dir), dtype="float32")
    for row in rows:
        sampled = torch.tensor(row["logprobs"])
        args = ([row["tokens"]], [row["prompt_length"]])
        assert torch.allclose(step1.compute_logprobs(*args)[0], sampled, atol=1e-4)
        assert not torch.allclose(initial.compute_logprobs(*args)[0], sampled, atol=1e-4)
    (logged,) = read_metrics(Path(job))
    assert logged["sync/model_version"] == 1.0
