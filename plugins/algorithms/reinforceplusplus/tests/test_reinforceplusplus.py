"""rft-plugin-reinforceplusplus: veRL equivalence of both estimators, the presets."""

from __future__ import annotations

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import REWARD_KINDS, SETTINGS, Batch, batches, close, rewards_for, validated
from rft_plugin_reinforceplusplus import (ReinforcePlusPlusArgs, ReinforcePlusPlusBaselineArgs,
                                          reinforce_plus_plus_advantages,
                                          reinforce_plus_plus_baseline_advantages)

torch.set_num_threads(1)


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS)
def test_baseline_equals_verl(batch: Batch, kind: str) -> None:
    """REINFORCE++-baseline. veRL raises ValueError when the batch has fewer than two
    masked tokens (unbiased variance); rft raises the same."""
    from verl.trainer.ppo import core_algos
    rewards = rewards_for(batch, kind)
    inputs = AdvantageInputs(rewards, batch.mask, batch.groups)
    args = ReinforcePlusPlusBaselineArgs()
    try:
        ref = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
            rewards.clone(), batch.mask, batch.groups)
    except ValueError:
        event("veRL raises: < 2 masked tokens")
        with pytest.raises(ValueError):
            reinforce_plus_plus_baseline_advantages(inputs, args)
        return
    ours = reinforce_plus_plus_baseline_advantages(inputs, args)
    close(ours[0], ref[0])
    close(ours[1], ref[1])


@SETTINGS
@given(batches(), REWARD_KINDS, st.sampled_from([1.0, 0.99, 0.5]))
def test_reinforce_plus_plus_equals_verl(batch: Batch, kind: str, gamma: float) -> None:
    """Discounted returns carried across observation tokens, whitened. Fewer than two
    masked tokens: both raise ValueError."""
    from verl.trainer.ppo import core_algos
    from omegaconf import OmegaConf

    rewards = rewards_for(batch, kind)
    inputs = AdvantageInputs(rewards, batch.mask, batch.groups)
    args = ReinforcePlusPlusArgs(gamma=gamma)
    try:
        ref = core_algos.compute_reinforce_plus_plus_outcome_advantage(
            rewards.clone(), batch.mask, config=OmegaConf.create({"gamma": gamma}))
    except ValueError:
        with pytest.raises(ValueError):
            reinforce_plus_plus_advantages(inputs, args)
        return
    ours = reinforce_plus_plus_advantages(inputs, args)
    close(ours[0], ref[0])
    close(ours[1], ref[1])


def test_returns_by_hand() -> None:
    rewards = torch.tensor([[1.0, 0.0, 2.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64)
    _, returns = reinforce_plus_plus_advantages(AdvantageInputs(rewards, mask, [0]),
                                                ReinforcePlusPlusArgs(gamma=0.5))
    assert returns[0].tolist() == pytest.approx([1.0 + 0.5 * 2.0, 0.0, 2.0])


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind in ("algorithm", "advantage_fn"):
        for name in ("reinforceplusplus", "reinforceplusplus_baseline"):
            assert (registry.registration(kind, name).distribution
                    == "rft-plugin-reinforceplusplus")


@pytest.mark.parametrize(("name", "repeat_times"), [("reinforceplusplus", 1),
                                                     ("reinforceplusplus_baseline", 2)])
def test_presets_fill_defaults(tmp_path, name: str, repeat_times: int) -> None:
    algorithm, plan = validated({"algorithm_type": name}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.entropy_loss_fn, algorithm.sample_strategy, algorithm.repeat_times) == (
        name, "ppo", "k2", "default", "default", repeat_times)
    assert plan.preset.use_reference
    if name == "reinforceplusplus":
        assert plan.loss.advantage.args.gamma == 1.0
