"""rft-plugin-topr: the policy-loss and advantage contracts, hand-computed cases (veRL
0.9.1 has neither TOPR nor a baseline-free REINFORCE advantage), the preset after
validation and a tiny run."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs, AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.runs import TextRewardPlugin
from rft.testing.checks import check_advantage, check_policy_loss
from rft.testing.strategies import advantage_inputs, policy_loss_inputs
from rft_plugin_topr import TOPRArgs, reinforce_advantages, topr_policy_loss

torch.set_num_threads(1)


@SETTINGS
@given(policy_loss_inputs(), st.sampled_from([0.0, -0.5, 1.0]))
def test_topr_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, threshold: float) -> None:
    """Masked positions do not count, finite gradients at log-ratios up to ±20, zero
    advantages give zero loss, micro-batches add up in every agg mode."""
    check_policy_loss(topr_policy_loss, TOPRArgs(advantage_threshold=threshold), inputs)


@SETTINGS
@given(advantage_inputs())
def test_reinforce_keeps_the_advantage_contract(inputs: AdvantageInputs) -> None:
    """Finite (B, T), zero on padding, no gradient; it is the reward itself (no
    baseline), so neither shift- nor scale-invariance holds."""
    advantages, _ = check_advantage(reinforce_advantages, None, inputs)
    scores = inputs.token_level_rewards.sum(-1, keepdim=True)  # (B, 1)
    torch.testing.assert_close(advantages, scores * inputs.response_mask)


def test_topr_by_hand() -> None:
    """A = 1, −1, −1 with ratios 2, ½, 2: α = 1 (positive), ½ (truncated ratio), 1
    (ratio capped at 1), so ∂/∂log π = −1, ½, 1."""
    logp = torch.tensor([[math.log(2.0), math.log(0.5), math.log(2.0)]], dtype=torch.float64,
                        requires_grad=True)
    inputs = PolicyLossInputs(logp, torch.zeros(1, 3, dtype=torch.float64),
                              torch.tensor([[1.0, -1.0, -1.0]], dtype=torch.float64),
                              torch.ones(1, 3, dtype=torch.float64), AggContext())
    pg_loss, metrics = topr_policy_loss(inputs, TOPRArgs())
    (grad,) = torch.autograd.grad(pg_loss.sum(), logp)
    assert grad[0].tolist() == pytest.approx([-1.0, 0.5, 1.0])
    assert pg_loss[0].tolist() == pytest.approx([-math.log(2.0), 0.5 * math.log(0.5),
                                                 math.log(2.0)])
    assert metrics["avg_alpha"].item() == pytest.approx(2.5 / 3)
    assert metrics["avg_ratio"].item() == pytest.approx(4.5 / 3)
    # with threshold −2 no token is "negative": plain REINFORCE everywhere
    pg_loss, _ = topr_policy_loss(inputs, TOPRArgs(advantage_threshold=-2.0))
    (grad,) = torch.autograd.grad(pg_loss.sum(), logp)
    assert grad[0].tolist() == pytest.approx([-1.0, 1.0, 1.0])


def test_reinforce_by_hand() -> None:
    rewards = torch.tensor([[0.0, 2.0], [1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    advantages, returns = reinforce_advantages(AdvantageInputs(rewards, mask, ["a", "a"]), None)
    assert advantages.tolist() == [[2.0, 2.0], [1.0, 0.0]]
    assert returns is advantages


# ---- preset, registry and a tiny run ---------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "topr").distribution == "rft-plugin-topr"
    assert registry.registration("policy_loss_fn", "topr").distribution == "rft-plugin-topr"
    assert registry.registration("advantage_fn", "reinforce").distribution == "rft-plugin-topr"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "topr"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("reinforce", "topr", "k2", "none", "default",
                                        "default", 2)
    assert plan.loss.policy_loss.args.advantage_threshold == 0.0
    assert plan.preset.use_reference and plan.preset.min_repeat_times == 1
    algorithm, _ = validated({"algorithm_type": "topr", "repeat_times": 1}, str(tmp_path))
    assert algorithm.repeat_times == 1




def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "topr",
                       "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward"},
                      plugins=[TextRewardPlugin()])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert "actor/avg_alpha" in step
    assert any(step["actor/grad_norm"] > 0 for step in outcome.metrics)
