"""Replay buffer: priority order, cooldown, use-count limit, config errors."""

from __future__ import annotations

import pytest
import torch

from rft.buffer.factory import open_experience_buffer
from rft.buffer.replay import ReplayStorage
from rft.config.schema import ExperienceBufferConfig, ReplayBufferConfig
from rft.errors import RftError
from rft.experience import EID, Experience


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
    store = ReplayStorage("r", "linear_decay", {}, reuse_cooldown_time=None)
    store.write([exp(0, 0), exp(2, 1), exp(1, 2)])
    assert tasks(store.read(2, timeout=1)) == [1, 2]  # newest versions first
    assert store.available() == 1


def test_reuse_after_cooldown_by_linear_decay():
    clock = Clock()
    store = ReplayStorage("r", "linear_decay", {"decay": 2.0}, reuse_cooldown_time=10,
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
    store = ReplayStorage("r", "linear_decay_use_count_control_randomization",
                          {"use_count_limit": 2}, reuse_cooldown_time=0, clock=clock)
    store.write([exp(0, 0)])
    store.read(1, timeout=1)
    store.read(1, timeout=1)
    assert store.available() == 0


def test_factory_and_errors():
    cfg = ExperienceBufferConfig(name="b", replay_buffer=ReplayBufferConfig(enable=True))
    assert isinstance(open_experience_buffer(cfg), ReplayStorage)
    with pytest.raises(RftError, match="replay_buffer.priority_fn: unknown 'lifo'"):
        ReplayStorage("r", "lifo", {}, None)
    with pytest.raises(RftError, match=r"replay_buffer.priority_fn_args.decy: unknown key; "
                                        r"did you mean 'decay'\?"):
        ReplayStorage("r", "linear_decay", {"decy": 1}, None)
