"""Trinity-RFT's grpo_gsm8k_experience_pipeline example (test copy under
``tests/data/trinity_pipeline_examples``): it validates as written (a Data-Juicer server
at ``server_url``), and runs 2 steps on the tiny model with the server started by the run
(``auto_start``): the data_juicer operator scores every experience, reward_shaping_mapper
adds the score to its reward, and no server is left afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from rft.config import load_config
from rft.launcher import run

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = (REPO / "tests" / "data" / "trinity_pipeline_examples"
           / "grpo_gsm8k_experience_pipeline" / "gsm8k.yaml")


@pytest.fixture
def environ(monkeypatch, tmp_path, tiny_model_dir):
    monkeypatch.chdir(REPO)  # the example's relative paths start at the repository root
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
    monkeypatch.setenv("TRINITY_DJ_URL", "http://127.0.0.1:5005")


def servers() -> list[psutil.Process]:
    """Data-Juicer servers started from this process, still running."""
    return [p for p in psutil.Process().children(recursive=True)
            if "rft_plugin_data_juicer.server" in " ".join(p.cmdline())]


def test_the_example_validates_as_written(environ):
    # written for nodes of 8 GPUs: validated as on a cluster of such nodes
    loaded = load_config(EXAMPLE, ["cluster.ray_address=10.0.0.1:6379"])
    config = loaded.stages[0].config
    assert config.service.data_juicer is not None
    assert config.service.data_juicer.server_url == "http://127.0.0.1:5005"
    assert [o.name for o in config.data_processor.experience_pipeline.operators] == [
        "data_juicer", "reward_shaping_mapper"]
    assert [s.name for s in loaded.stages[0].plan.services] == ["data_juicer"]
    assert any(w.startswith("data_processor.data_processor_url: Trinity-RFT's older form, "
                            "read as service.data_juicer.server_url") for w in loaded.warnings)


@pytest.mark.slow
def test_the_example_runs_two_steps_with_an_auto_started_server(environ, tmp_path):
    overrides = [
        "service.data_juicer.auto_start=true", "service.data_juicer.server_url=null",
        "data_processor.data_processor_url=null",
        "cluster.gpu_per_node=0", "mode=colocate", "synchronizer.sync_method=memory",
        "trainer.trainer_type=torch", "trainer.trainer_config_path=null",
        "explorer.rollout_model.engine_type=hf", "explorer.rollout_model.engine_num=1",
        "explorer.rollout_model.dtype=float32", "explorer.runner_per_model=1",
        "explorer.runner_num=null", "explorer.eval_interval=100",
        "buffer.explorer_input.eval_tasksets=[]",
        "model.max_prompt_tokens=512", "model.max_response_tokens=8", "model.max_model_len=520",
        "buffer.batch_size=2", "buffer.total_steps=2", "algorithm.repeat_times=2",
        "trainer.save_interval=0", "monitor.monitor_type=jsonl",
        "buffer.trainer_input.experience_buffer.storage_type=file",
        f"buffer.trainer_input.experience_buffer.path={tmp_path / 'experiences.jsonl'}",
    ]
    loaded = load_config(EXAMPLE, overrides)
    assert run(loaded) == 0
    assert servers() == []  # stopped with the stage
    job = Path(loaded.stages[0].config.checkpoint_job_dir)
    explorer = [json.loads(x) for x in (job / "monitor" / "explorer.jsonl").read_text()
                .splitlines()]
    assert [r["step"] for r in explorer] == [1, 2]
    for record in explorer:
        m = record["metrics"]
        assert m["pipeline/data_juicer/kept"] == 4.0 and m["pipeline/data_juicer/dropped"] == 0
        assert 0.0 <= m["pipeline/data_juicer/alnum_ratio/mean"] <= 1.0
    experiences = [json.loads(x) for x in (tmp_path / "experiences.jsonl").read_text()
                   .splitlines()]
    assert len(experiences) == 8
    scores = [exp["info"]["alnum_ratio"] for exp in experiences]
    assert all(0.0 <= score <= 1.0 for score in scores)
    # reward = the workflow's reward (the explorer's rollout/reward/mean, taken before the
    # pipeline) + 1.0 × Data-Juicer's alnum_ratio
    before = [exp["reward"] - score for exp, score in zip(experiences, scores)]
    assert sum(before) / 8 == pytest.approx(
        sum(r["metrics"]["rollout/reward/mean"] for r in explorer) / 2)
    assert sum(scores) > 0  # the shaping changed something
    assert (job / "log" / "data_juicer_server.log").exists()
