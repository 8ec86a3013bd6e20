"""rft-plugin-asymre: the advantage contract, equality with veRL 0.9.1's
``compute_grpo_outcome_advantage`` without the std (Dr.GRPO), which AsymRE is at
``baseline_shift = 0`` and from which it differs by ``−δ`` on grouped rows (float64,
hypothesis, the kit's tolerance ``atol = rtol = 1e-6``), a hand-computed case, the
preset after validation and a tiny run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, close, validated
from rft.testing.runs import TextRewardPlugin
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_asymre import ASYMREArgs, asymre_advantages

torch.set_num_threads(1)

SHIFTS = st.sampled_from([-0.1, 0.0, 0.5])


@SETTINGS
@given(advantage_inputs(), SHIFTS)
def test_asymre_keeps_the_advantage_contract(inputs: AdvantageInputs, shift: float) -> None:
    """Finite (B, T), zero on padding, no gradient, invariant to a constant added to a
    group's rewards (singletons have no baseline and are left out by the check); the
    shift δ breaks scale invariance by design."""
    check_advantage(asymre_advantages, ASYMREArgs(baseline_shift=shift), inputs,
                    shift_invariant=True)


@SETTINGS
@given(advantage_inputs(), SHIFTS)
def test_asymre_is_dr_grpo_shifted(inputs: AdvantageInputs, shift: float) -> None:
    """At δ = 0 it equals veRL's GRPO with ``norm_adv_by_std_in_grpo=False``
    (singletons: baseline 0); with δ the grouped rows' advantages move by −δ on their
    response tokens."""
    assert_equals_verl(asymre_advantages, ASYMREArgs(baseline_shift=0.0),
                       "compute_grpo_outcome_advantage", inputs, norm_adv_by_std_in_grpo=False)
    from verl.trainer.ppo import core_algos

    index = inputs.index.tolist() if isinstance(inputs.index, torch.Tensor) else inputs.index
    labels = [str(label) for label in index]
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        inputs.token_level_rewards.clone(), inputs.response_mask.clone(),
        np.array(labels, dtype=object), norm_adv_by_std_in_grpo=False)
    grouped = torch.tensor([labels.count(label) > 1 for label in labels],
                           dtype=torch.float64)  # (B,)
    ours, returns = asymre_advantages(inputs, ASYMREArgs(baseline_shift=shift))
    close(ours, theirs - shift * grouped.unsqueeze(-1) * inputs.response_mask)
    assert returns is ours


def test_asymre_by_hand() -> None:
    rewards = torch.zeros(3, 2, dtype=torch.float64)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    advantages, _ = asymre_advantages(AdvantageInputs(rewards, mask, ["a", "a", "b"]),
                                      ASYMREArgs())
    # group a: mean 0.5, V = 0.4 → 0.6, −0.4; singleton b: V = 0 → 1
    assert advantages.flatten().tolist() == pytest.approx([0.6, 0.6, -0.4, 0.0, 1.0, 1.0])


# ---- preset, registry and a tiny run ---------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "asymre").distribution == "rft-plugin-asymre"
    assert registry.registration("advantage_fn", "asymre").distribution == "rft-plugin-asymre"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "asymre"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("asymre", "opmd", "none", "none", "none", "default", 2)
    assert plan.loss.advantage.args.baseline_shift == -0.1
    assert plan.loss.policy_loss.args.tau == 1.0  # opmd's default; Trinity's example uses 0
    assert not plan.preset.use_reference and not plan.preset.use_critic




def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "asymre",
                       "algorithm.policy_loss_fn_args": {"tau": 0.0},
                       "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward"},
                      plugins=[TextRewardPlugin()])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert "actor/pg_loss" in step
    assert any(step["actor/grad_norm"] > 0 for step in outcome.metrics)
