"""The rollout record (``monitor.rollout_record*``, :mod:`rft.monitor.rollout_record`):
every sample of every k-th explore step, whole, bounded; its fields validated."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from recorded_runs import RECORD_EVERY, STEPS, RecordedRuns

from rft.config import build_stages
from rft.errors import ConfigError
from rft.experience import EID, Experience
from rft.monitor.rollout_record import RolloutRecorder, step_file_name
from rft.plugins import PluginRegistry
from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset
from rft.testing.toy_rewards import vowel_reward


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_kth_step_is_recorded_whole(recorded_runs: RecordedRuns) -> None:
    folder = recorded_runs.vowels / "monitor" / "rollouts"
    assert sorted(os.listdir(folder)) == [step_file_name(s)
                                          for s in range(RECORD_EVERY, STEPS + 1, RECORD_EVERY)]
    explorer = {r["step"]: r["metrics"] for r in
                _rows(recorded_runs.vowels / "monitor" / "explorer.jsonl")}
    for step in range(RECORD_EVERY, STEPS + 1, RECORD_EVERY):
        rows = _rows(folder / step_file_name(step))
        assert len(rows) == 16  # every sample: 4 tasks x 4 rollouts
        assert {r["step"] for r in rows} == {step}
        # the samples the explorer scored that step, no fewer, no others
        mean = sum(r["reward"] for r in rows) / len(rows)
        assert mean == pytest.approx(explorer[step]["rollout/reward/mean"])
        for row in rows:
            assert row["prompt"].startswith("<|im_start|>user\n")
            assert len(row["tokens"]) == len(row["logprobs"]) == len(row["action_mask"])
            assert "".join(row["tokens"]) == row["response"]
            assert all(lp <= 0 for lp in row["logprobs"])
            assert row["reward"] == pytest.approx(
                vowel_reward(row["response"].replace("<|im_end|>", ""))["vowels"])
            assert row["advantage_source"] == "trainer" and row["entropy"] is None
        # GRPO: each task's advantages are its rewards standardised within the group
        for task in {r["task"] for r in rows}:
            group = [r for r in rows if r["task"] == task]
            assert sum(r["advantage"] for r in group) == pytest.approx(0.0, abs=1e-4)
            best = max(group, key=lambda r: r["reward"])
            assert best["advantage"] == max(r["advantage"] for r in group)


def _experience(task: int, length: int) -> Experience:
    tokens = torch.arange(4 + length) % 50
    return Experience(tokens=tokens, prompt_length=4, reward=1.0,
                      logprobs=torch.full((length,), -0.5), eid=EID(batch=1, task=task))


def test_the_bound_drops_the_oldest_steps_with_one_warning(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "rollouts"
    recorder = RolloutRecorder(str(folder), every=1, max_mb=0.01,  # ~10 KB
                               decode=lambda ids: "".join(f"<{i}>" for i in ids))
    samples = [_experience(task, 40) for task in range(6)]
    one_step = 0
    with caplog.at_level(logging.WARNING, logger="rft.monitor.rollout_record"):
        for step in range(1, 9):
            path = recorder.record(step, samples)
            assert path is not None
            one_step = os.path.getsize(path)
    kept = sorted(os.listdir(folder))
    total = sum(os.path.getsize(folder / name) for name in kept)
    assert total <= 0.01 * 1024 * 1024 < total + one_step  # as many steps as fit
    assert kept[-1] == step_file_name(8) and step_file_name(1) not in kept
    assert recorder.dropped_steps == 8 - len(kept)
    warnings = [r for r in caplog.records if "rollout_record_max_mb" in r.getMessage()]
    assert len(warnings) == 1
    # a step larger than the bound alone is still kept (the newest always is)
    big = RolloutRecorder(str(tmp_path / "big"), every=1, max_mb=1e-6, decode=str)
    big.record(1, samples)
    big.record(2, samples)
    assert os.listdir(tmp_path / "big") == [step_file_name(2)]


def test_only_every_kth_step_is_wanted(tmp_path: Path) -> None:
    recorder = RolloutRecorder(str(tmp_path), every=3, max_mb=1.0, decode=str)
    assert [s for s in range(0, 10) if recorder.wants(s)] == [3, 6, 9]
    assert recorder.record(4, [_experience(0, 2)]) is None
    assert not os.listdir(tmp_path)


def test_a_resumed_run_forgets_the_steps_it_redoes(tmp_path: Path) -> None:
    recorder = RolloutRecorder(str(tmp_path / "r"), every=2, max_mb=1.0, decode=str)
    recorder.rewind(0)  # no record yet: nothing to do
    for step in range(1, 9):
        recorder.record(step, [_experience(0, 2)])
    recorder.rewind(4)  # resumed from global_step_4
    assert sorted(os.listdir(tmp_path / "r")) == [step_file_name(2), step_file_name(4)]
    recorder.rewind(0)  # started afresh in the same job dir
    assert os.listdir(tmp_path / "r") == []


def test_record_fields_are_checked_in_one_line_each(rft_tiny_model: Path,
                                                    tmp_path: Path) -> None:
    base = tiny_run_config(rft_tiny_model, write_taskset(tmp_path / "t.jsonl"), tmp_path)
    registry = PluginRegistry.create()
    with pytest.raises(ConfigError) as caught:
        build_stages(apply_overrides(base, {"monitor.rollout_record_every": 0,
                                            "monitor.rollout_record_max_mb": 0}), registry)
    problems = caught.value.problems
    assert "monitor.rollout_record_every: must be 1 or more (record every k-th explore " \
           "step), got 0" in problems
    assert "monitor.rollout_record_max_mb: must be above 0 (MiB), got 0.0" in problems
    both = build_stages(apply_overrides(base, {"mode": "both", "monitor.rollout_record": True}),
                        registry)
    # mode both records in its explorer actor (tests/test_rollout_record_modes.py): no warning
    assert not any(w.startswith("monitor.rollout_record") for w in both.warnings)
