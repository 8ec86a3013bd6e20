"""Built-in experience operators, through the registry and a config."""

from __future__ import annotations

import pytest
import torch

from rft.buffer.operators import run_pipeline
from rft.config.convert import to_dataclass
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry


def exp(task: int, reward: float, **metrics: float) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=reward,
                      eid=EID(batch=1, task=task, run=0), metrics=dict(metrics))


@pytest.fixture(scope="module")
def registry():
    return PluginRegistry.create()


def build(registry, name, args):
    cls = registry.get("experience_operator", name)
    problems: list[str] = []
    built = to_dataclass(cls.Args, args, f"{name}.args", problems)
    assert problems == []
    return cls(built)


def test_reward_filter(registry):
    kept, metrics = build(registry, "reward_filter", {"threshold": 0.5}).process(
        [exp(0, 0.0), exp(0, 1.0), exp(1, 0.7)])
    assert [e.reward for e in kept] == [1.0, 0.7] and metrics == {"dropped": 1.0}


def test_reward_std_filter_drops_constant_groups(registry):
    batch = [exp(0, 1.0), exp(0, 1.0), exp(1, 0.0), exp(1, 1.0), exp(2, 0.5)]
    kept, metrics = build(registry, "reward_std_filter", {}).process(batch)
    assert [(e.eid.task, e.reward) for e in kept] == [(1, 0.0), (1, 1.0)]
    assert metrics == {"dropped": 3.0, "dropped_groups": 2.0}


def test_reward_shaping(registry):
    shaping = build(registry, "reward_shaping_mapper", {"reward_shaping_configs": [
        {"stats_key": "quality", "op_type": "ADD", "weight": 0.5},
        {"stats_key": "scale", "op_type": "MUL", "weight": 2.0}]})
    shaped, metrics = shaping.process([exp(0, 1.0, quality=2.0, scale=3.0), exp(1, 1.0)])
    assert shaped[0].reward == (1.0 + 0.5 * 2.0) * 2.0 * 3.0
    assert shaped[1].reward == 1.0 and metrics == {"missing_stats": 2.0}


def test_pipeline_prefixes_metrics(registry):
    operators = [("reward_filter", build(registry, "reward_filter", {"threshold": 1.0}))]
    kept, metrics = run_pipeline(operators, [exp(0, 0.0), exp(0, 2.0)])
    assert len(kept) == 1 and metrics == {"pipeline/reward_filter/dropped": 1.0}


def test_bad_shaping_op_is_a_config_problem(registry):
    cls = registry.get("experience_operator", "reward_shaping_mapper")
    problems: list[str] = []
    to_dataclass(cls.Args, {"reward_shaping_configs": [{"stats_key": "q", "op_type": "SUB"}]},
                  "data_processor.experience_pipeline.operators[0].args", problems)
    assert problems == ["data_processor.experience_pipeline.operators[0].args."
                        "reward_shaping_configs[0].op_type: 'SUB' is not allowed; expected "
                        "one of 'ADD', 'MUL'"]
