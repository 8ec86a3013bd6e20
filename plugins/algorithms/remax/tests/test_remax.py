"""rft-plugin-remax: veRL equivalence, a hand-computed case, the preset, the trainer's
calling convention (it needs reward_baselines)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import REWARD_KINDS, SETTINGS, Batch, batches, close, rewards_for, validated
from rft_plugin_remax import ReMaxArgs, remax_advantages

torch.set_num_threads(1)


@SETTINGS
@given(batches(), REWARD_KINDS)
def test_remax_equals_verl(batch: Batch, kind: str) -> None:
    from verl.trainer.ppo import core_algos
    rewards = rewards_for(batch, kind)
    baselines = batch.randn(batch.B)
    ref = core_algos.compute_remax_outcome_advantage(rewards, baselines, batch.mask)
    ours = remax_advantages(AdvantageInputs(rewards, batch.mask, batch.groups,
                                            reward_baselines=baselines), ReMaxArgs())
    close(ours[0], ref[0])
    close(ours[1], ref[1])


def test_remax_by_hand() -> None:
    rewards = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    adv, returns = remax_advantages(
        AdvantageInputs(rewards, mask, [0],
                        reward_baselines=torch.tensor([0.25], dtype=torch.float64)), ReMaxArgs())
    assert returns[0].tolist() == [1.0, 1.0, 0.0]
    assert adv[0].tolist() == [0.75, 0.75, 0.0]


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "remax").distribution == "rft-plugin-remax"
    assert registry.registration("advantage_fn", "remax").distribution == "rft-plugin-remax"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "remax"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.entropy_loss_fn, algorithm.sample_strategy, algorithm.repeat_times) == (
        "remax", "ppo", "k2", "default", "default", 1)


def test_trainer_requires_reward_baselines(tmp_path) -> None:
    from rft.errors import RftError
    from rft.trainer.loss import compute_advantages

    _, plan = validated({"algorithm_type": "remax"}, str(tmp_path))
    selected = plan.loss.advantage
    rewards, mask = torch.zeros(2, 3), torch.ones(2, 3)
    inputs = AdvantageInputs(rewards, mask, ["a", "a"])
    with pytest.raises(RftError, match=r"^algorithm.advantage_fn: 'remax' needs reward_baselines"):
        compute_advantages(selected, inputs)
    inputs = AdvantageInputs(rewards, mask, ["a", "a"], reward_baselines=torch.tensor([0.5, 0.5]))
    advantages, _ = compute_advantages(selected, inputs)
    assert torch.allclose(advantages, torch.full((2, 3), -0.5))
