"""rft-plugin-rloo: veRL equivalence, a hand-computed case, the preset."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_rloo import RLOOArgs, rloo_advantages

torch.set_num_threads(1)


@SETTINGS
@given(advantage_inputs())
def test_rloo_keeps_the_advantage_contract(inputs: AdvantageInputs) -> None:
    """Finite, zero on padding, no gradient; ``A_i = n/(n−1)·(r_i − μ_g)`` is invariant to a
    constant added to a group's rewards (not to scaling: it is linear in ``r``)."""
    check_advantage(rloo_advantages, RLOOArgs(), inputs, shift_invariant=True)


@SETTINGS
@given(advantage_inputs())
def test_rloo_equals_verl(inputs: AdvantageInputs) -> None:
    """RLOO (veRL's loop version ``rloo``: a singleton keeps its raw score)."""
    assert_equals_verl(rloo_advantages, RLOOArgs(), "compute_rloo_outcome_advantage", inputs)


def test_rloo_by_hand() -> None:
    rewards = torch.tensor([[1.0], [2.0], [6.0], [5.0]], dtype=torch.float64)
    out, _ = rloo_advantages(AdvantageInputs(rewards, torch.ones(4, 1), [0, 0, 0, 1]), RLOOArgs())
    # leave-one-out: 1 − (2+6)/2, 2 − (1+6)/2, 6 − (1+2)/2; singleton keeps its reward
    assert out[:, 0].tolist() == pytest.approx([-3.0, -1.5, 4.5, 5.0])


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "rloo").distribution == "rft-plugin-rloo"
    assert registry.registration("advantage_fn", "rloo").distribution == "rft-plugin-rloo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "rloo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.entropy_loss_fn, algorithm.sample_strategy, algorithm.repeat_times) == (
        "rloo", "ppo", "k2", "default", "default", 2)
    assert plan.preset.use_reference and not plan.preset.use_critic
