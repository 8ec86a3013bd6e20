"""bench/readme_figures.py: the example copies it runs and the figures it reads back."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rft.config import load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("readme_figures",
                                                  ROOT / "bench" / "readme_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("example", ["quickstart", "both_cpu"])
def test_a_shortened_copy_of_the_example(bench, example, tmp_path, tiny_model_dir, monkeypatch):
    path = bench.example_config(ROOT / "examples" / f"{example}.yaml", tmp_path, "trinity_0",
                                "grpo", 5, False, 54)
    monkeypatch.chdir(ROOT)
    loaded = load_config(path, [f"model.model_path={tiny_model_dir}"])
    (stage,) = loaded.stages
    assert stage.name == "grpo" and stage.config.buffer.total_steps == 5
    assert stage.config.trainer.max_token_len_per_gpu == 54
    assert not stage.config.buffer.explorer_input.eval_tasksets
    assert stage.plan.job_dir.startswith(str(tmp_path / "checkpoints" / example / "trinity_0"))


def test_step_times_and_micro_batches(bench, tmp_path):
    path = tmp_path / "trainer.jsonl"
    path.write_text("".join(json.dumps({"step": s, "time": 10.0 + 0.5 * s, "metrics": {
        "timing_s/step": 0.4, "timing_s/update_actor": 0.25, "prompt_length/mean": 19.0,
        "response_length/mean": 3.0}}) + "\n" for s in range(1, 5)))
    assert bench.step_times(path, 54) == {"steady_s_per_step": 0.5, "update_actor_s": 0.25,
                                          "micro_batches": 64}  # 2 rows of 22 per 54 tokens
    assert bench.step_times(path, 3456)["micro_batches"] == 1
