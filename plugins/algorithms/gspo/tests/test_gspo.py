"""rft-plugin-gspo: the loss equals veRL 0.9.1's ``compute_policy_loss_gspo`` (values,
gradients, metrics; float64, hypothesis), and the preset after validation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft import ops
from rft.contracts import AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import (SETTINGS, Batch, assert_policy_loss_matches, batches,
                                    validated)
from rft_plugin_gspo import GSPOArgs, gspo_policy_loss

torch.set_num_threads(1)


@SETTINGS
@given(batches(), st.sampled_from(list(ops.LOSS_AGG_MODES)),
       st.sampled_from([0.001, 0.05, 0.5, 30.0]),
       st.sampled_from([(0.2, None, None), (0.2, 3e-4, 4e-4), (0.1, 0.3, 0.05)]),
       st.booleans())
def test_gspo_equals_verl(batch: Batch, mode: str, drift: float, clips: tuple,
                          global_counts: bool) -> None:
    """Large drifts reach the log-ratio clamp at 10. Empty masks: veRL's NaN for an
    all-empty batch without global counts becomes 0 in rft (see the core's agg_loss)."""
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    clip, low, high = clips
    old = batch.logps()
    new = (old + batch.randn(scale=drift)).requires_grad_()
    advantages = batch.randn(scale=2.0)
    info = ({"batch_num_tokens": batch.mask.sum().item() + 1, "global_batch_size": batch.B + 2,
             "dp_size": 1} if global_counts else {})
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                         clip_ratio=clip, clip_ratio_low=low, clip_ratio_high=high,
                         global_batch_info=info)
    ref, ref_metrics = core_algos.compute_policy_loss_gspo(
        old_log_prob=old, log_prob=new, advantages=advantages, response_mask=batch.mask,
        loss_agg_mode=mode, config=config)
    pg_loss, metrics = gspo_policy_loss(
        PolicyLossInputs(new, old, advantages, batch.mask, AggContext(mode, **info)),
        GSPOArgs(clip_range=clip, clip_range_low=low, clip_range_high=high))
    assert_policy_loss_matches(pg_loss, metrics, ref, ref_metrics, batch.mask, mode, info, new)


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
