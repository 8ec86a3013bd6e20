"""``data_processor.experience_pipeline.inputs`` / ``output``: extra input buffers whose
experiences go through the operators with the explorer's; the output buffer is what the
trainer reads. Validation refuses what cannot work, one line each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from rft.buffer.storage import open_storage
from rft.config import load_config
from rft.errors import ConfigError
from rft.experience import EID, Experience
from rft.rollout.explorer import pipeline_source_storages, read_available
from rft.testing.runs import apply_overrides, run_tiny, tiny_run_config, write_taskset


def config_file(tmp_path: Path, model: Path, overrides: dict) -> Path:
    taskset = write_taskset(tmp_path / "tasks.jsonl", 4)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(apply_overrides(
        tiny_run_config(model, taskset, tmp_path), overrides)))
    return path


def stored(path: Path, rewards: list[float]) -> Path:
    """A file buffer holding one experience per reward."""
    storage = open_storage("file", "offline", str(path))
    storage.write([Experience(tokens=torch.tensor([5, 6, 7, 8]), prompt_length=2, reward=r,
                              eid=EID(batch="offline", task=i, run=0))
                   for i, r in enumerate(rewards)])
    storage.close()
    return path


def test_output_is_what_the_trainer_reads(tmp_path, tiny_model_dir):
    out = {"name": "shaped", "storage_type": "file", "path": str(tmp_path / "shaped.jsonl")}
    path = config_file(tmp_path, tiny_model_dir, {
        "buffer.trainer_input": {"experience_buffer": None},
        "data_processor": {"experience_pipeline": {"output": out}}})
    plan = load_config(path).stages[0].plan
    assert plan.experience_buffer.name == "shaped"
    assert plan.experience_buffer.path == str(tmp_path / "shaped.jsonl")


def test_output_and_a_different_trainer_buffer_is_one_line(tmp_path, tiny_model_dir):
    out = {"name": "shaped", "storage_type": "file", "path": str(tmp_path / "shaped.jsonl")}
    path = config_file(tmp_path, tiny_model_dir, {
        "data_processor": {"experience_pipeline": {"output": out}}})
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        "data_processor.experience_pipeline.output: differs from "
        "buffer.trainer_input.experience_buffer, which the trainer reads; set one of them "
        "(the pipeline writes what the trainer reads)"]


def test_inputs_that_cannot_be_read_are_one_line_each(tmp_path, tiny_model_dir):
    path = config_file(tmp_path, tiny_model_dir, {"data_processor": {"experience_pipeline": {
        "inputs": {"live": {"storage_type": "queue"}, "offline": {"storage_type": "file"}}}}})
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems == [
        "data_processor.experience_pipeline.inputs.live.storage_type: 'queue' lives in one "
        "process and nothing else writes it; an input buffer is a file or sql buffer",
        "data_processor.experience_pipeline.inputs.offline.path: required: the file buffer "
        "whose experiences join each explore step's in the pipeline"]


def test_input_buffers_are_opened_and_drained(tmp_path, tiny_model_dir):
    source = stored(tmp_path / "offline.jsonl", [0.5, 1.0])
    path = config_file(tmp_path, tiny_model_dir, {"data_processor": {"experience_pipeline": {
        "inputs": {"offline": {"storage_type": "file", "path": str(source)}}}}})
    plan = load_config(path).stages[0].plan
    [(name, storage)] = pipeline_source_storages(plan)
    try:
        assert name == "offline"
        assert [e.reward for e in read_available(storage)] == [0.5, 1.0]
        assert read_available(storage) == []  # taken once
    finally:
        storage.close()


@pytest.mark.slow
def test_input_experiences_go_through_the_operators_to_the_trainer(tmp_path, tiny_model_dir):
    source = stored(tmp_path / "offline.jsonl", [0.25, 0.75])
    trained = tmp_path / "trained.jsonl"
    outcome = run_tiny(tiny_model_dir, write_taskset(tmp_path / "tasks.jsonl", 4), tmp_path, {
        "buffer.trainer_input": {"experience_buffer": None},
        "data_processor": {"experience_pipeline": {
            "inputs": {"offline": {"storage_type": "file", "path": str(source)}},
            "output": {"name": "out", "storage_type": "file", "path": str(trained)},
            "operators": [{"name": "reward_shaping_mapper", "args": {
                "reward_shaping_configs": [{"stats_key": "bonus", "op_type": "ADD"}]}}]}}},
        steps=1)
    [metrics] = outcome.metrics
    assert metrics["pipeline/inputs/offline"] == 2.0
    rows = [json.loads(line) for line in trained.read_text().splitlines()]
    assert len(rows) == 4 + 2  # the step's 2 tasks × 2 rollouts, and the input's two
    assert [r["reward"] for r in rows if r["eid"]["batch"] == "offline"] == [0.25, 0.75]
    # the operators saw them: the shaping rule found no "bonus" on any of the 6
    assert metrics["pipeline/reward_shaping_mapper/missing_stats"] == 6.0
