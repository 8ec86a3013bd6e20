"""rft-plugin-rloo: veRL equivalence, a hand-computed case, the preset."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import REWARD_KINDS, SETTINGS, Batch, batches, close, rewards_for, validated
from rft_plugin_rloo import RLOOArgs, rloo_advantages

torch.set_num_threads(1)


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS)
def test_rloo_equals_verl(batch: Batch, kind: str) -> None:
    """RLOO (veRL's loop version ``rloo``: a singleton keeps its raw score)."""
    from verl.trainer.ppo import core_algos
    rewards = rewards_for(batch, kind)
    ref = core_algos.compute_rloo_outcome_advantage(rewards.clone(), batch.mask, batch.groups)
    ours = rloo_advantages(AdvantageInputs(rewards, batch.mask, batch.groups), RLOOArgs())
    close(ours[0], ref[0])
    close(ours[1], ref[1])


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
