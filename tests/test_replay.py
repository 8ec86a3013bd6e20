"""Replay buffer: priority order, cooldown, use-count limit, config errors."""

from __future__ import annotations

import pytest
import torch

from rft.buffer.factory import open_experience_buffer
from rft.buffer.replay import ReplayStorage
from rft.builtin.priority import (LinearDecayArgs, RandomizedDecayArgs, linear_decay,
                                  randomized_linear_decay)
from rft.config import build_stages
from rft.config.plan import Selected
from rft.config.schema import ExperienceBufferConfig, ReplayBufferConfig
from rft.errors import ConfigError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.testing.algorithms import minimal_config


def exp(version: int, task: int) -> Experience:
    return Experience(tokens=torch.tensor([1, 2]), prompt_length=1, reward=1.0,
                      model_version=version, eid=EID(task=task))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tasks(batch: list[Experience]) -> list[int]:
    return [e.eid.task for e in batch]


def test_without_cooldown_nothing_is_read_twice():
    store = ReplayStorage("r", linear_decay, LinearDecayArgs(), reuse_cooldown_time=None)
    store.write([exp(0, 0), exp(2, 1), exp(1, 2)])
    assert tasks(store.read(2, timeout=1)) == [1, 2]  # newest versions first
    assert store.available() == 1


def test_reuse_after_cooldown_by_linear_decay():
    clock = Clock()
    store = ReplayStorage("r", linear_decay, LinearDecayArgs(decay=2.0), reuse_cooldown_time=10,
                          clock=clock)
    store.write([exp(3, 0), exp(2, 1)])
    assert tasks(store.read(1, timeout=1)) == [0]  # priority 3 vs 2
    assert tasks(store.read(1, timeout=1)) == [1]  # task 0 is cooling down
    clock.now = 11
    store.write([exp(2, 2)])
    # priorities now: task0 3-2=1, task1 2-2=0, task2 2
    assert tasks(store.read(3, timeout=1)) == [2, 0, 1]


def test_use_count_limit_removes_experiences():
    clock = Clock()
    store = ReplayStorage("r", randomized_linear_decay, RandomizedDecayArgs(use_count_limit=2),
                          reuse_cooldown_time=0, clock=clock)
    store.write([exp(0, 0)])
    store.read(1, timeout=1)
    store.read(1, timeout=1)
    assert store.available() == 0


def test_factory_and_errors():
    cfg = ExperienceBufferConfig(name="b", replay_buffer=ReplayBufferConfig(enable=True))
    chosen = Selected("buffer.trainer_input.experience_buffer.replay_buffer.priority_fn",
                      "linear_decay", linear_decay, LinearDecayArgs())
    assert isinstance(open_experience_buffer(cfg, chosen), ReplayStorage)


def replay_plan(tmp_path, priority_fn: str, args: dict):
    plain = minimal_config({"algorithm_type": "grpo"}, str(tmp_path), mode="colocate")
    plain["buffer"]["explorer_input"] = {"taskset": {
        "name": "t", "path": str(tmp_path), "default_workflow_type": "math_workflow"}}
    plain["buffer"]["trainer_input"]["experience_buffer"] = {
        "name": "exp", "storage_type": "queue", "replay_buffer": {
            "enable": True, "priority_fn": priority_fn, "priority_fn_args": args}}
    return build_stages(plain, PluginRegistry.create()).stages[0].plan


def test_priority_fns_are_plugins_resolved_by_validation(tmp_path):
    plan = replay_plan(tmp_path, "linear_decay_use_count_control_randomization", {"sigma": 0.5})
    assert plan.priority_fn.implementation is randomized_linear_decay
    assert plan.priority_fn.args == RandomizedDecayArgs(sigma=0.5)
    key = "buffer.trainer_input.experience_buffer.replay_buffer"
    with pytest.raises(ConfigError) as caught:
        replay_plan(tmp_path, "lifo", {})
    assert any(p.startswith(f"{key}.priority_fn: unknown priority function 'lifo'")
               for p in caught.value.problems), caught.value.problems
    with pytest.raises(ConfigError) as caught:
        replay_plan(tmp_path, "linear_decay", {"decy": 1})
    assert f"{key}.priority_fn_args.decy: unknown key; did you mean 'decay'?" in \
        caught.value.problems
