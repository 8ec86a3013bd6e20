"""rft-plugin-mix: ratio 0 is the RL loss, the weighted sum by hand, the sample strategy
on real queue storages, the preset after validation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.buffer.sampling import TrainerBuffers
from rft.buffer.storage import QueueStorage
from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.contracts import AggContext, PolicyLossInputs
from rft.errors import RftError
from rft.experience import EID, Experience
from rft.ops import agg_loss
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, Batch, batches, close, validated
from rft.testing.checks import check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_mix import MixArgs, MixSampleArgs, MixSampleStrategy, mix_policy_loss

torch.set_num_threads(1)


def _inputs(batch: Batch):
    old = batch.logps()
    new = (old + batch.randn(scale=0.3)).requires_grad_()
    return new, old, batch.randn()


def _loss_inputs(new, old, advantages, mask, expert=None) -> PolicyLossInputs:
    return PolicyLossInputs(new, old, advantages, mask, AggContext(), is_expert_mask=expert)


@SETTINGS
@given(policy_loss_inputs(expert_rows=True), st.sampled_from([0.0, 0.1, 1.0]))
def test_mix_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, mu: float) -> None:
    """Masking, finite gradients, micro-batches (expert rows split with their mask) add
    up. Zero advantages give a zero loss only without expert rows: the SFT part
    ``μ·(−log π)`` on expert rows does not use the advantages."""
    expert = inputs.is_expert_mask
    check_policy_loss(mix_policy_loss, MixArgs(mu=mu), inputs,
                      zero_advantage_zero_loss=expert is None or not bool(expert.any()))


@SETTINGS
@given(batches(), st.sampled_from([0.0, 0.1, 0.7]))
def test_without_expert_rows_it_is_the_rl_loss(batch: Batch, mu: float) -> None:
    """``expert_data_ratio: 0`` (no ``is_expert_mask``): exactly the ``ppo`` loss, values,
    gradients and metrics, whatever ``μ``."""
    new, old, advantages = _inputs(batch)
    ours, metrics = mix_policy_loss(_loss_inputs(new, old, advantages, batch.mask), MixArgs(mu=mu))
    ref, ref_metrics = ppo_policy_loss(_loss_inputs(new, old, advantages, batch.mask), PPOArgs())
    assert torch.equal(ours, ref)
    assert metrics.keys() == ref_metrics.keys()
    (g_ours,) = torch.autograd.grad(agg_loss(ours, batch.mask), new)
    (g_ref,) = torch.autograd.grad(agg_loss(ref, batch.mask), new)
    close(g_ours, g_ref)


@SETTINGS
@given(batches(), st.sampled_from([0.0, 0.1, 1.0]))
def test_weighted_sum_of_rl_and_sft(batch: Batch, mu: float) -> None:
    """Rollout rows carry ``(1 − μ)·ppo``, expert rows ``μ·(−log π)``, per token; the
    RL metrics only see rollout rows."""
    new, old, advantages = _inputs(batch)
    expert = torch.rand(batch.B, generator=batch.gen) < 0.5
    ours, metrics = mix_policy_loss(_loss_inputs(new, old, advantages, batch.mask, expert),
                                    MixArgs(mu=mu))
    ppo, _ = ppo_policy_loss(_loss_inputs(new, old, advantages, batch.mask), PPOArgs())
    expected = torch.where(expert[:, None], mu * -new, (1 - mu) * ppo)
    close(ours, expected)
    (g_ours,) = torch.autograd.grad(agg_loss(ours, batch.mask), new, retain_graph=True)
    (g_ref,) = torch.autograd.grad(agg_loss(expected, batch.mask), new)
    close(g_ours, g_ref)
    usual_mask = batch.mask * (~expert[:, None])
    _, usual_metrics = ppo_policy_loss(_loss_inputs(new, old, advantages, usual_mask), PPOArgs())
    close(metrics["ppo_kl"], usual_metrics["ppo_kl"])
    assert metrics["expert/fraction"].item() == pytest.approx(expert.double().mean().item())


def test_all_rollout_rows_with_mu_zero_is_the_rl_loss() -> None:
    gen = torch.Generator().manual_seed(0)
    new, old = -torch.rand(4, 3, generator=gen), -torch.rand(4, 3, generator=gen)
    adv, mask = torch.randn(4, 3, generator=gen), torch.ones(4, 3)
    ours, _ = mix_policy_loss(_loss_inputs(new, old, adv, mask, torch.zeros(4, dtype=bool)),
                              MixArgs(mu=0.0))
    assert torch.equal(ours, ppo_policy_loss(_loss_inputs(new, old, adv, mask), PPOArgs())[0])
    with pytest.raises(ValueError, match="mu"):
        mix_policy_loss(_loss_inputs(new, old, adv, mask), MixArgs(mu=1.5))


def _experiences(n: int, reward: float | None) -> list[Experience]:
    return [Experience(tokens=torch.arange(5), prompt_length=2, reward=reward,
                       logprobs=torch.zeros(3), eid=EID(batch=0, task=i, run=0))
            for i in range(n)]


def _strategy(ratio: float, batch_size: int = 8, **aux):
    usual = QueueStorage("experience")
    usual.write(_experiences(batch_size, 1.0))
    buffers = TrainerBuffers(usual, dict(aux))
    return MixSampleStrategy(buffers, batch_size=batch_size, timeout=0.1,
                             args=MixSampleArgs(expert_data_ratio=ratio))


def test_sample_strategy_mixes_and_marks() -> None:
    expert = QueueStorage("expert")
    expert.write(_experiences(5, None))
    batch, metrics = _strategy(0.3, expert=expert).sample(step=0, model_version=0)
    assert len(batch) == 8 and metrics["sample/expert_count"] == 3.0  # ceil(0.3 · 8)
    assert [e.info["is_expert"] for e in batch] == [False] * 5 + [True] * 3
    assert all(e.reward == 0.0 for e in batch[5:])


def test_sample_strategy_ratio_zero_needs_no_expert_buffer() -> None:
    batch, metrics = _strategy(0.0).sample(step=0, model_version=0)
    assert len(batch) == 8 and metrics["sample/expert_count"] == 0.0
    assert not any("is_expert" in e.info for e in batch)


def test_sample_strategy_errors() -> None:
    with pytest.raises(RftError, match="auxiliary_buffers.expert"):
        _strategy(0.5)
    with pytest.raises(RftError, match="expert_data_ratio"):
        _strategy(1.5)


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind in ("algorithm", "policy_loss_fn", "sample_strategy"):
        assert registry.registration(kind, "mix").distribution == "rft-plugin-mix"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated(
        {"algorithm_type": "mix", "sample_strategy_args": {"expert_data_ratio": 0.25}},
        str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "mix", "k2", "none", "mix", "mix", 8)
    assert plan.loss.policy_loss.args.mu == 0.1
    sample_args = plan.sample_strategy.args
    assert (sample_args.expert_data_ratio, sample_args.expert_buffer) == (0.25, "expert")
    assert plan.preset.use_reference
