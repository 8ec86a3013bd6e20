"""rft-plugin-cispo: the policy-loss contract, equality with veRL 0.9.1's
``compute_policy_loss_cispo`` (values, gradients, metrics; float64, hypothesis, the kit's
tolerance ``atol = rtol = 1e-6``), hand-computed cases, the preset after validation and
a tiny run."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.runs import TextRewardPlugin
from rft.testing.checks import assert_equals_verl, check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_cispo import CISPOArgs, cispo_policy_loss

torch.set_num_threads(1)

CLIPS = st.sampled_from([(1.0, 0.28), (0.2, 0.2), (0.5, 5.0)])


@SETTINGS
@given(policy_loss_inputs(), CLIPS, st.booleans())
def test_cispo_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, clips: tuple,
                                              mask_clip: bool) -> None:
    """Masked positions do not count, finite gradients at log-ratios up to ±20, zero
    advantages give zero loss, micro-batches add up in every agg mode."""
    low, high = clips
    check_policy_loss(cispo_policy_loss,
                      CISPOArgs(low, high, enable_mask_clip=mask_clip, mask_clip_range_low=low,
                                mask_clip_range_high=high), inputs)


@SETTINGS
@given(policy_loss_inputs(), CLIPS)
def test_cispo_equals_verl(inputs: PolicyLossInputs, clips: tuple) -> None:
    """Loss, gradient and the shared metrics (``pg_clipfrac``, ``ppo_kl``,
    ``pg_clipfrac_lower``) in every agg mode, with and without a mini-batch's counts.
    veRL has no token mask (``enable_mask_clip`` off)."""
    low, high = clips
    assert_equals_verl(cispo_policy_loss, CISPOArgs(clip_range_low=low, clip_range_high=high),
                       "cispo", inputs, config={"clip_ratio_low": low, "clip_ratio_high": high})


def _inputs(log_prob: list[float], old: list[float], adv: list[float]) -> PolicyLossInputs:
    logp = torch.tensor([log_prob], dtype=torch.float64, requires_grad=True)
    return PolicyLossInputs(logp, torch.tensor([old], dtype=torch.float64),
                            torch.tensor([adv], dtype=torch.float64),
                            torch.ones(1, len(log_prob), dtype=torch.float64), AggContext())


def test_weights_are_clipped_and_every_token_keeps_its_gradient() -> None:
    """Ratios 2, 1, 0.5 with ε_h = 0.28, no lower bound: weights 1.28, 1, 0.5; the
    gradient is −w·A even where PPO would clip it away."""
    inputs = _inputs([math.log(2.0), 0.0, math.log(0.5)], [0.0, 0.0, 0.0], [1.0, 1.0, -2.0])
    pg_loss, metrics = cispo_policy_loss(inputs, CISPOArgs())
    (grad,) = torch.autograd.grad(pg_loss.sum(), inputs.log_prob)
    assert grad[0].tolist() == pytest.approx([-1.28, -1.0, 1.0])
    assert pg_loss[0].tolist() == pytest.approx([-1.28 * math.log(2.0), 0.0,
                                                 2 * 0.5 * math.log(0.5)])
    assert metrics["pg_clipfrac"].item() == pytest.approx(1 / 3)
    assert metrics["unmasked_frac"].item() == pytest.approx(1.0)


def test_mask_clip_drops_tokens_moving_out_of_range() -> None:
    """With the mask: ratio 2 and A > 0 is dropped; ratio 0.5 and A < 0 is dropped only
    when 0.5 < 1 − mask_clip_range_low."""
    inputs = _inputs([math.log(2.0), math.log(0.5), 0.0], [0.0, 0.0, 0.0], [1.0, -1.0, 1.0])
    args = CISPOArgs(enable_mask_clip=True, mask_clip_range_low=0.2)
    pg_loss, metrics = cispo_policy_loss(inputs, args)
    (grad,) = torch.autograd.grad(pg_loss.sum(), inputs.log_prob)
    assert grad[0].tolist() == pytest.approx([0.0, 0.0, -1.0])
    assert metrics["unmasked_frac"].item() == pytest.approx(1 / 3)


# ---- preset, registry and a tiny run ---------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "cispo").distribution == "rft-plugin-cispo"
    assert registry.registration("policy_loss_fn", "cispo").distribution == "rft-plugin-cispo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "cispo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "cispo", "k2", "none", "default", "default", 2)
    args = plan.loss.policy_loss.args
    assert (args.clip_range_low, args.clip_range_high, args.enable_mask_clip) == (1.0, 0.28,
                                                                                  False)
    assert plan.preset.use_reference and not plan.preset.use_critic




def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "cispo",
                       "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward"},
                      plugins=[TextRewardPlugin()])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert "actor/unmasked_frac" in step and "actor/pg_clipfrac" in step
    assert any(step["actor/grad_norm"] > 0 for step in outcome.metrics)
