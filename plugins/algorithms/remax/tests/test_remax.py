"""rft-plugin-remax: veRL equivalence, a hand-computed case, the preset, the trainer's
calling convention (it needs reward_baselines)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_remax import ReMaxArgs, remax_advantages

torch.set_num_threads(1)


@SETTINGS
@given(advantage_inputs(max_b=12, reward_baselines=True))
def test_remax_keeps_the_advantage_contract(inputs: AdvantageInputs) -> None:
    """Finite (B, T), no gradient. ``zero_at_masked=False``: veRL's formula
    (``returns = reverse cumsum of rewards·mask``, ``A = returns − b·mask``) leaves the
    return-to-go of the later response tokens on a hole of the mask (a multi-turn
    observation token); no loss reads a masked advantage, and matching veRL keeps it.
    Neither invariance holds: the greedy baseline does not move with the rewards."""
    check_advantage(remax_advantages, ReMaxArgs(), inputs, zero_at_masked=False)


@SETTINGS
@given(advantage_inputs(max_b=12, reward_baselines=True))
def test_remax_equals_verl(inputs: AdvantageInputs) -> None:
    assert_equals_verl(remax_advantages, ReMaxArgs(), "compute_remax_outcome_advantage", inputs)


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
