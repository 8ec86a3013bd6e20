"""rft-plugin-gspo: the loss equals veRL 0.9.1's ``compute_policy_loss_gspo`` (values,
gradients, metrics; float64, hypothesis), and the preset after validation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.checks import assert_equals_verl, check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_gspo import GSPOArgs, gspo_policy_loss

torch.set_num_threads(1)

CLIPS = st.sampled_from([(0.2, None, None), (0.2, 3e-4, 4e-4), (0.1, 0.3, 0.05)])


@SETTINGS
@given(policy_loss_inputs(), CLIPS)
def test_gspo_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, clips: tuple) -> None:
    """Masking (the sequence ratio averages masked tokens only), finite gradients at
    log-ratios up to ±20 (the sequence log-ratio is clamped at 10), zero loss for zero
    advantages, micro-batches add up in every agg mode."""
    clip, low, high = clips
    check_policy_loss(gspo_policy_loss,
                      GSPOArgs(clip_range=clip, clip_range_low=low, clip_range_high=high), inputs)


@SETTINGS
@given(policy_loss_inputs(), CLIPS)
def test_gspo_equals_verl(inputs: PolicyLossInputs, clips: tuple) -> None:
    """Values, gradients and metrics, every agg mode, with and without a mini-batch's
    global counts. Large drifts reach the log-ratio clamp at 10. Empty masks: veRL's NaN
    for an all-empty batch without global counts becomes 0 in rft (see the core's
    agg_loss)."""
    clip, low, high = clips
    assert_equals_verl(gspo_policy_loss,
                       GSPOArgs(clip_range=clip, clip_range_low=low, clip_range_high=high),
                       "gspo", inputs,
                       config={"clip_ratio": clip, "clip_ratio_low": low, "clip_ratio_high": high})


def test_ratio_is_per_sequence() -> None:
    """All tokens of a sequence share one ratio: the geometric mean of the token ratios."""
    old = torch.zeros(1, 3, dtype=torch.float64)
    new = torch.tensor([[0.3, -0.1, 0.1]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    advantages = -torch.ones(1, 3, dtype=torch.float64)  # no clipping side for A<0 small ratio
    pg_loss, _ = gspo_policy_loss(PolicyLossInputs(new, old, advantages, mask, AggContext()),
                                  GSPOArgs(clip_range_low=10.0, clip_range_high=10.0))
    expected = torch.exp(new.mean()).item()
    assert pg_loss[0].tolist() == pytest.approx([expected] * 3)


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "gspo").distribution == "rft-plugin-gspo"
    assert registry.registration("policy_loss_fn", "gspo").distribution == "rft-plugin-gspo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "gspo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "gspo", "none", "none", "none", "default", 2)
    args = plan.loss.policy_loss.args
    assert (args.clip_range_low, args.clip_range_high) == (3e-4, 4e-4)
    assert not plan.preset.use_reference
