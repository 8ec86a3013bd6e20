"""The embedded (colocate) run end to end on the tiny model, with the real plugins:
GRPO steps, counts, checkpoints, resume, GSM8K, and the run-level bad inputs."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from fixtures_models import apply_changes, arithmetic_tasks
from rft.checkpoint import CheckpointError, list_checkpoints
from rft.config import load_config
from rft.errors import RftError
from rft.launcher import run

REPO = Path(__file__).resolve().parents[1]
GSM8K_TEST = REPO / "examples" / "data" / "gsm8k" / "test.jsonl"


def write_config(tmp_path: Path, model: Path, tasks: Path, **changes) -> Path:
    config = {
        "project": "e2e", "name": "run", "mode": "colocate",
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(model), "max_prompt_tokens": 128, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {
            "batch_size": 2, "total_steps": 2,
            "explorer_input": {
                "taskset": {"name": "train", "path": str(tasks),
                            "format": {"prompt_key": "question", "response_key": "answer"},
                            "default_workflow_type": "simple_workflow",
                            "default_reward_fn_type": "accuracy_reward"},
            },
            "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "queue"}},
        },
        "explorer": {"eval_interval": 100, "rollout_model": {"engine_type": "hf",
                                                             "dtype": "float32"}},
        "synchronizer": {"sync_method": "memory", "sync_interval": 1},
        "trainer": {"trainer_type": "torch", "save_interval": 1},
        "monitor": {"monitor_type": "jsonl"},
    }
    apply_changes(config, changes)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def tasks(tmp_path) -> Path:
    return arithmetic_tasks(tmp_path, 6)


def trainer_steps(job_dir: Path) -> list[int]:
    lines = (job_dir / "monitor" / "trainer.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def test_grpo_steps_write_metrics_checkpoints_and_summary(tmp_path, tiny_model_dir, tasks):
    loaded = load_config(write_config(tmp_path, tiny_model_dir, tasks))
    before = set(threading.enumerate())
    assert run(loaded) == 0
    # no workflow thread outlives the run (one alive at interpreter exit aborted the
    # process: "terminate called without an active exception", see explorer/runner.py)
    assert [t.name for t in set(threading.enumerate()) - before
            if t.name.startswith("rft-workflow")] == []
    job = tmp_path / "ck" / "e2e" / "run"
    assert trainer_steps(job) == [1, 2]
    record = json.loads((job / "monitor" / "trainer.jsonl").read_text().splitlines()[-1])
    for name in ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "critic/score/mean",
                 "response_length/mean", "actor/grad_norm"):
        assert name in record["metrics"]
    explorer = [json.loads(x) for x in (job / "monitor" / "explorer.jsonl").read_text().splitlines()]
    assert [e["metrics"]["rollout/experiences"] for e in explorer] == [4.0, 4.0]
    assert [c.step for c in list_checkpoints(str(job))] == [1, 2]
    state = json.loads((job / "global_step_2" / "state.json").read_text())
    assert state["experiences_written"] == state["experiences_read"] == 8
    assert (job / "global_step_2" / "hf" / "config.json").exists()
    summary = json.loads((job / "summary.json").read_text())
    assert summary["stages"][0]["steps"] == 2
    assert (job / "log" / "launcher.log").is_file()  # the `log` section's file


def test_resume_repeats_and_skips_no_step(tmp_path, tiny_model_dir, tasks):
    run(load_config(write_config(tmp_path, tiny_model_dir, tasks)))
    job = tmp_path / "ck" / "e2e" / "run"
    selector_after_2 = json.loads((job / "global_step_2" / "state.json").read_text())["selectors"]
    assert selector_after_2 == [{"consumed": 4}]
    run(load_config(write_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=4)))
    assert trainer_steps(job) == [1, 2, 3, 4]
    state = json.loads((job / "global_step_4" / "state.json").read_text())
    assert state["selectors"] == [{"consumed": 8}]


def test_corrupt_newest_checkpoint_is_skipped_with_a_warning(tmp_path, tiny_model_dir, tasks,
                                                             caplog):
    """The newest checkpoint is corrupt: the run resumes from the newest readable one, with a
    warning naming the one skipped (moved aside), and ends as the run uninterrupted."""
    run(load_config(write_config(tmp_path, tiny_model_dir, tasks)))
    job = tmp_path / "ck" / "e2e" / "run"
    trainer_file = job / "global_step_2" / "trainer.pt"
    trainer_file.write_bytes(trainer_file.read_bytes()[:100])
    loaded = load_config(write_config(
        tmp_path, tiny_model_dir, tasks, buffer__total_steps=3,
        explorer__rollout_model={"engine_type": "hf", "dtype": "float32",
                                 "enable_openai_api": True}))
    with caplog.at_level("WARNING", logger="rft.checkpoint"):
        assert run(loaded) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"checkpoint {trainer_file} is corrupt" in w and "skipped (moved to "
               f"{job}/global_step_2.corrupt)" in w for w in warnings), warnings
    assert (job / "global_step_2.corrupt").is_dir()  # kept for a post-mortem, never listed
    assert [c.step for c in list_checkpoints(str(job))] == [1, 2, 3]
    assert trainer_steps(job) == [1, 2, 3]  # step 2 redone and recorded once
    assert not [t for t in threading.enumerate() if t.name == "rft-openai-api"]


def test_no_readable_checkpoint_is_a_one_line_error(tmp_path, tiny_model_dir, tasks):
    run(load_config(write_config(tmp_path, tiny_model_dir, tasks, trainer__save_interval=0,
                                 buffer__total_steps=1)))
    job = tmp_path / "ck" / "e2e" / "run"
    trainer_file = job / "global_step_1" / "trainer.pt"
    trainer_file.write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match=f"checkpoint {trainer_file} is corrupt"):
        run(load_config(write_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=2)))
    assert trainer_steps(job) == [1]  # logged metrics are not lost
    assert trainer_file.exists()  # nothing moved: a second try fails the same way


def test_unwritable_checkpoint_directory(tmp_path, tiny_model_dir, tasks):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    loaded = load_config(write_config(tmp_path, tiny_model_dir, tasks,
                                      checkpoint_root_dir=str(blocker / "ck")))
    with pytest.raises(RftError, match=r"checkpoint_root_dir: cannot write to .*a_file/ck/e2e/run"):
        run(loaded)


def test_failing_tasks_are_recorded_and_the_run_goes_on(tmp_path, tiny_model_dir):
    tasks = tmp_path / "tasks.jsonl"
    # countdown_reward needs {"target", "numbers"}: the plain-number rows make it raise
    rows = [{"question": "q", "answer": {"target": 3, "numbers": [1, 2]}},
            {"question": "q", "answer": 7}] * 2
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # train_batch_size is 4 tasks × 2 = 8; the step yields 4: the trainer takes those
    # at once (one process: nothing else will arrive) instead of waiting max_read_timeout.
    loaded = load_config(write_config(
        tmp_path, tiny_model_dir, tasks, buffer__total_steps=1, buffer__batch_size=4,
        buffer__trainer_input__experience_buffer__max_read_timeout=600.0,
        buffer__explorer_input__taskset__default_reward_fn_type="countdown_reward"))
    started = time.monotonic()
    assert run(loaded) == 0
    assert time.monotonic() - started < 120
    job = tmp_path / "ck" / "e2e" / "run"
    metrics = json.loads((job / "monitor" / "explorer.jsonl").read_text().splitlines()[0])["metrics"]
    assert metrics["rollout/failed_tasks"] == 2.0 and metrics["rollout/experiences"] == 4.0
    assert trainer_steps(job) == [1]


def test_a_step_whose_tasks_all_fail_is_a_clear_error(tmp_path, tiny_model_dir):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": "q", "answer": 7}) + "\n" for _ in range(2)))
    loaded = load_config(write_config(
        tmp_path, tiny_model_dir, tasks, buffer__total_steps=1,
        buffer__explorer_input__taskset__default_reward_fn_type="countdown_reward"))
    with pytest.raises(RftError, match=r"step 1: no experiences to train on; 2 task\(s\) "
                                       r"failed so far, the last: task train\[1\] failed"):
        run(loaded)


def test_gsm8k_workflow_and_reward_on_the_real_file(tmp_path, tiny_model_dir):
    loaded = load_config(write_config(
        tmp_path, tiny_model_dir, GSM8K_TEST, model__max_prompt_tokens=512,
        buffer__explorer_input__taskset__default_workflow_type="verl_gsm8k_workflow",
        buffer__explorer_input__taskset__default_reward_fn_type="gsm8k_reward",
        trainer__save_interval=0))
    assert run(loaded) == 0
    job = tmp_path / "ck" / "e2e" / "run"
    assert trainer_steps(job) == [1, 2]
    explorer = [json.loads(x)["metrics"] for x in (job / "monitor" / "explorer.jsonl").read_text().splitlines()]
    assert all(m["rollout/failed_tasks"] == 0 and m["rollout/experiences"] == 4 for m in explorer)
    assert os.path.exists(job / "global_step_2" / "hf")


def test_sft_stage_passes_over_the_data_as_often_as_total_steps_needs(tmp_path, tiny_model_dir):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                            for i in range(4)))
    config = {
        "project": "e2e", "name": "sft", "mode": "train",
        "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(tiny_model_dir), "max_prompt_tokens": 32,
                  "max_response_tokens": 4},
        "buffer": {"batch_size": 4, "total_steps": 3, "trainer_input": {"experience_buffer": {
            "name": "sft", "storage_type": "file", "path": str(data),
            "format": {"prompt_type": "plaintext", "prompt_key": "question",
                       "response_key": "answer"}}}},
        "explorer": {"rollout_model": {"engine_type": "hf", "dtype": "float32"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch"},
        "monitor": {"monitor_type": "jsonl"},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(config))
    assert run(load_config(path)) == 0  # 3 steps × 4 rows from a 4-row file: 3 passes
    assert trainer_steps(tmp_path / "ck" / "e2e" / "sft") == [1, 2, 3]


def test_default_sampling_takes_the_rollout_model_overrides(tmp_path):
    """``explorer.rollout_model`` overrides (response budget, repetition penalty,
    ignore_eos) win over the ``model`` section's defaults; unset ones inherit."""
    from rft.config import build_stages
    from rft.engines.engine_factory import default_sampling
    from rft.plugins import PluginRegistry
    from rft.testing.algorithms import minimal_config

    config = minimal_config({"algorithm_type": "grpo"}, str(tmp_path), mode="colocate")
    config["buffer"]["explorer_input"] = {"taskset": {
        "name": "t", "path": str(tmp_path), "default_workflow_type": "simple_workflow"}}
    config["model"].update(min_response_tokens=2, repetition_penalty=1.1, temperature=0.7)
    inherited = default_sampling(build_stages(config, PluginRegistry.create()).stages[0].config)
    assert (inherited.max_tokens, inherited.min_tokens, inherited.repetition_penalty,
            inherited.temperature, inherited.ignore_eos) == (8, 2, 1.1, 0.7, False)
    config["explorer"]["rollout_model"].update(max_response_tokens=5, min_response_tokens=1,
                                               repetition_penalty=1.3, ignore_eos=True)
    overridden = default_sampling(build_stages(config, PluginRegistry.create()).stages[0].config)
    assert (overridden.max_tokens, overridden.min_tokens, overridden.repetition_penalty,
            overridden.temperature, overridden.ignore_eos) == (5, 1, 1.3, 0.7, True)


def test_remax_run_gets_greedy_baselines_from_the_explorer(tmp_path, tiny_model_dir, tasks):
    """``algorithm_type: remax`` end to end: the explorer asks the workflow for the greedy
    baseline, the trainer's remax advantage uses it (two finite steps)."""
    path = write_config(tmp_path, tiny_model_dir, tasks,
                        algorithm={"algorithm_type": "remax", "repeat_times": 2})
    assert run(load_config(path)) == 0
    lines = [json.loads(line) for line in (tmp_path / "ck" / "e2e" / "run" / "monitor"
                                          / "trainer.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert all(math.isfinite(line["metrics"]["actor/pg_loss"]) for line in lines)


def test_remax_with_a_workflow_that_sets_no_baseline_is_a_clear_error(tmp_path, tiny_model_dir,
                                                                      tasks):
    from rft import hookimpl
    from rft.plugins import PluginRegistry
    from rft.workflow import Workflow

    class NoBaseline(Workflow):
        def run(self):
            experiences = self.model.chat(self.task.chat_messages(), n=self.task.repeat_times)
            for exp in experiences:
                self.score(exp, "")
            return experiences

    class Plugin:
        @hookimpl
        def register_workflows(self):
            return {"no_baseline": NoBaseline}

    path = write_config(tmp_path, tiny_model_dir, tasks,
                        algorithm={"algorithm_type": "remax", "repeat_times": 2},
                        buffer__explorer_input__taskset__default_workflow_type="no_baseline")
    loaded = load_config(path, registry=PluginRegistry.create(extra_plugins=[Plugin()]))
    with pytest.raises(RftError, match=r"workflow NoBaseline sets no info\['reward_baseline'\]"
                                       r".*'remax'"):
        run(loaded)
