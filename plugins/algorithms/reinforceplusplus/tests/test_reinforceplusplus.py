"""rft-plugin-reinforceplusplus: veRL equivalence of both estimators, the presets."""

from __future__ import annotations

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_reinforceplusplus import (ReinforcePlusPlusArgs, ReinforcePlusPlusBaselineArgs,
                                          reinforce_plus_plus_advantages,
                                          reinforce_plus_plus_baseline_advantages)

torch.set_num_threads(1)

GAMMAS = st.sampled_from([1.0, 0.99, 0.5])


@SETTINGS
@given(advantage_inputs(min_tokens=2), GAMMAS)
def test_both_keep_the_advantage_contract(inputs: AdvantageInputs, gamma: float) -> None:
    """Finite, zero on padding, no gradient. Whitening over the batch makes both scale
    invariant (up to whitening's ``1e-8``); the baseline version also ignores a constant
    added to a group's rewards. The return-to-go version is not shift invariant per group
    (the whitening mean is the batch's). Whitening needs two masked tokens."""
    check_advantage(reinforce_plus_plus_advantages, ReinforcePlusPlusArgs(gamma=gamma), inputs,
                    scale_invariant=True)
    check_advantage(reinforce_plus_plus_baseline_advantages, ReinforcePlusPlusBaselineArgs(),
                    inputs, shift_invariant=True, scale_invariant=True)


@SETTINGS
@given(advantage_inputs())
def test_baseline_equals_verl(inputs: AdvantageInputs) -> None:
    """REINFORCE++-baseline. veRL raises ValueError when the batch has fewer than two
    masked tokens (unbiased variance); rft must raise the same (assert_equals_verl checks)."""
    if inputs.response_mask.sum() < 2:
        event("veRL raises: < 2 masked tokens")
    assert_equals_verl(reinforce_plus_plus_baseline_advantages, ReinforcePlusPlusBaselineArgs(),
                       "compute_reinforce_plus_plus_baseline_outcome_advantage", inputs)


@SETTINGS
@given(advantage_inputs(max_b=12), GAMMAS)
def test_reinforce_plus_plus_equals_verl(inputs: AdvantageInputs, gamma: float) -> None:
    """Discounted returns carried across observation tokens, whitened. Fewer than two
    masked tokens: both raise ValueError."""
    from omegaconf import OmegaConf

    assert_equals_verl(reinforce_plus_plus_advantages, ReinforcePlusPlusArgs(gamma=gamma),
                       "compute_reinforce_plus_plus_outcome_advantage", inputs,
                       config=OmegaConf.create({"gamma": gamma}))


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
