"""rft-plugin-mix-chord: the policy-loss contract; without φ it is ``mix``; the φ-weighted
sum by hand; the μ schedule; ``sft_phi`` / ``sft_is``; the preset after validation; a
tiny run with expert rows. veRL 0.9.1 has no CHORD, so there is no veRL comparison."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft import hookimpl
from rft.buffer.sampling import SampleStrategy
from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.builtin.sample_strategies import DefaultSampleStrategy
from rft.contracts import AggContext, MissingInputError, PolicyLossInputs
from rft.experience import Experience
from rft.ops import agg_loss
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, Batch, batches, close, validated
from rft.testing.checks import check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_mix import MixArgs, mix_policy_loss
from rft_plugin_mix_chord import (MixChordArgs, SFTPhiArgs, chord_mu, mix_chord_policy_loss, phi,
                                  sft_is_loss, sft_phi_loss)

torch.set_num_threads(1)

MUS = st.sampled_from([0.0, 0.1, 1.0])


def _constant(mu: float, **changes: Any) -> MixChordArgs:
    return MixChordArgs(mu_peak=mu, mu_valley=mu, **changes)


def _inputs(batch: Batch, expert: torch.Tensor | None = None) -> PolicyLossInputs:
    old = batch.logps()
    new = (old + batch.randn(scale=0.3)).clamp(max=0.0).requires_grad_()
    return PolicyLossInputs(new, old, batch.randn(), batch.mask, AggContext(),
                            is_expert_mask=expert)


@SETTINGS
@given(policy_loss_inputs(expert_rows=True), MUS, st.booleans())
def test_mix_chord_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, mu: float,
                                                  use_phi: bool) -> None:
    """Masking, finite gradients, micro-batches add up (expert rows split with their
    mask). Zero advantages give a zero loss only without expert rows: the expert term
    does not use the advantages."""
    expert = inputs.is_expert_mask
    check_policy_loss(mix_chord_policy_loss, _constant(mu, enable_phi_function=use_phi), inputs,
                      zero_advantage_zero_loss=expert is None or not bool(expert.any()))


@SETTINGS
@given(batches(), MUS)
def test_without_phi_it_is_mix(batch: Batch, mu: float) -> None:
    """``enable_phi_function: false`` and a constant μ: ``mix``'s loss with ``mu = μ`` —
    values, gradients, metrics — with and without expert rows."""
    for expert in (None, torch.rand(batch.B, generator=batch.gen) < 0.5):
        inputs = _inputs(batch, expert)
        ours, metrics = mix_chord_policy_loss(inputs, _constant(mu, enable_phi_function=False))
        theirs, their_metrics = mix_policy_loss(inputs, MixArgs(mu=mu))
        close(ours, theirs)
        for key, value in their_metrics.items():
            close(torch.as_tensor(metrics[key]), value)
        (g_ours,) = torch.autograd.grad(agg_loss(ours, batch.mask), inputs.log_prob)
        (g_theirs,) = torch.autograd.grad(agg_loss(theirs, batch.mask), inputs.log_prob)
        close(g_ours, g_theirs)


@SETTINGS
@given(batches(), MUS)
def test_phi_weighted_sum_by_hand(batch: Batch, mu: float) -> None:
    """Expert rows: ``μ · (−log p) · φ(p)`` with gradient ``−μ φ(p)``; rollout rows:
    ``(1 − μ) · ppo``."""
    expert = torch.rand(batch.B, generator=batch.gen) < 0.5
    inputs = _inputs(batch, expert)
    ours, metrics = mix_chord_policy_loss(inputs, _constant(mu))
    p = torch.exp(inputs.log_prob.detach())
    ppo, _ = ppo_policy_loss(dataclasses.replace(inputs, is_expert_mask=None), PPOArgs())
    close(ours, torch.where(expert[:, None], mu * -inputs.log_prob.detach() * p * (1 - p),
                            (1 - mu) * ppo.detach()))
    (grad,) = torch.autograd.grad(ours.sum(), inputs.log_prob)
    close(grad[expert], (-mu * p * (1 - p))[expert])
    assert metrics["mu"] == mu


def test_mu_schedule() -> None:
    """Warm-up 4 steps to 0.5, cosine decay over 4 steps to 0.1."""
    args = SimpleNamespace(mu_warmup_steps=4, mu_decay_steps=4, mu_peak=0.5, mu_valley=0.1)
    assert [chord_mu(s, args) for s in (0, 2, 4, 6, 8, 100)] == pytest.approx(
        [0.0, 0.25, 0.5, 0.3, 0.1, 0.1])
    assert chord_mu(7, args) == pytest.approx(0.1 + 0.4 * 0.5 * (1 + math.cos(math.pi * 3 / 4)))


SCHEDULE = MixChordArgs(mu_warmup_steps=2, mu_decay_steps=3, mu_peak=0.6, mu_valley=0.1)


@SETTINGS
@given(batches(), st.integers(1, 8))
def test_the_loss_follows_the_step_it_is_given(batch: Batch, step: int) -> None:
    """``μ = chord_mu(inputs.global_step)``: the metric, and the loss equals the constant-μ
    loss at that μ."""
    expert = torch.arange(batch.B) % 2 == 0
    inputs = dataclasses.replace(_inputs(batch, expert), global_step=step)
    mu = chord_mu(step, SCHEDULE)
    loss, metrics = mix_chord_policy_loss(inputs, SCHEDULE)
    assert metrics["mu"] == pytest.approx(mu)
    fixed, _ = mix_chord_policy_loss(inputs, _constant(mu))
    close(loss, fixed)


@SETTINGS
@given(batches())
def test_a_schedule_without_the_step_is_one_line(batch: Batch) -> None:
    inputs = _inputs(batch, torch.ones(batch.B, dtype=torch.bool))
    with pytest.raises(MissingInputError, match="mix_chord's mu schedule needs global_step"):
        mix_chord_policy_loss(inputs, SCHEDULE)
    mix_chord_policy_loss(inputs, _constant(0.3))  # a constant mu needs no step
    with pytest.raises(ValueError, match="mu_peak"):
        MixChordArgs(mu_peak=1.5)


@SETTINGS
@given(policy_loss_inputs(), st.sampled_from([1.0, 0.5]))
def test_sft_phi_and_is_keep_the_policy_loss_contract(inputs: PolicyLossInputs,
                                                      cutoff: float) -> None:
    """The NLLs ignore the advantages (``zero_advantage_zero_loss=False``)."""
    check_policy_loss(sft_phi_loss, SFTPhiArgs(cutoff_prob=cutoff), inputs,
                      zero_advantage_zero_loss=False)
    check_policy_loss(sft_is_loss, None, inputs, zero_advantage_zero_loss=False)


def test_sft_phi_and_is_by_hand() -> None:
    """p = (0.5, 0.9): φ = (0.25, 0.09); with cutoff 0.8 the second token is clamped at
    log 0.8 and gets no gradient."""
    log_prob = torch.tensor([[math.log(0.5), math.log(0.9)]], dtype=torch.float64,
                            requires_grad=True)
    inputs = PolicyLossInputs(log_prob, log_prob.detach(), torch.zeros(1, 2, dtype=torch.float64),
                              torch.ones(1, 2, dtype=torch.float64), AggContext())
    loss, _ = sft_phi_loss(inputs, SFTPhiArgs(cutoff_prob=0.8))
    assert loss[0].tolist() == pytest.approx([0.25 * math.log(2), -0.09 * math.log(0.8)])
    (grad,) = torch.autograd.grad(loss.sum(), log_prob)
    assert grad[0].tolist() == pytest.approx([-0.25, 0.0])
    loss, _ = sft_is_loss(dataclasses.replace(inputs, log_prob=log_prob), None)
    assert loss[0].tolist() == pytest.approx([0.5 * math.log(2), -0.9 * math.log(0.9)])
    assert phi(torch.tensor([0.0, 0.5, 1.0])).tolist() == [0.0, 0.25, 0.0]


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "mix_chord").distribution == "rft-plugin-mix-chord"
    for name in ("mix_chord", "sft_phi", "sft_is"):
        assert registry.registration("policy_loss_fn", name).distribution == "rft-plugin-mix-chord"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated(
        {"algorithm_type": "mix_chord", "sample_strategy_args": {"expert_data_ratio": 0.25}},
        str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "mix_chord", "k2", "none", "mix", "mix", 8)
    args = plan.loss.policy_loss.args
    assert (args.mu_peak, args.mu_valley, args.enable_phi_function) == (0.1, 0.1, True)
    assert plan.preset.use_reference


class HalfExpert(SampleStrategy):
    """The default batch with its second half marked as expert rows (rft's runtime opens
    no auxiliary buffer yet, so ``mix``'s strategy cannot read expert data in a run)."""

    def sample(self, step: int, model_version: int) -> tuple[list[Experience], dict[str, float]]:
        batch, metrics = DefaultSampleStrategy(self.buffers, self.batch_size,
                                               self.timeout).sample(step, model_version)
        for i, exp in enumerate(batch):
            exp.info["is_expert"] = i >= len(batch) // 2
        return batch, metrics


class HalfExpertPlugin:
    @hookimpl
    def register_sample_strategies(self):
        return {"half_expert_test": HalfExpert}


def test_a_tiny_run_mixes_expert_rows(rft_run) -> None:
    """Three steps with a warm-up of 2 and a decay of 2: the trainer's step reaches the
    loss, ``μ`` = 0.15, 0.3, then halfway down the cosine to 0.1 (0.2)."""
    outcome = rft_run({"algorithm.algorithm_type": "mix_chord", "algorithm.repeat_times": 2,
                       "algorithm.sample_strategy": "half_expert_test",
                       "algorithm.policy_loss_fn_args": {"mu_warmup_steps": 2,
                                                         "mu_decay_steps": 2,
                                                         "mu_peak": 0.3, "mu_valley": 0.1}},
                      plugins=[HalfExpertPlugin()], steps=3)
    assert [step["actor/mu"] for step in outcome.metrics] == pytest.approx([0.15, 0.3, 0.2])
    for step in outcome.metrics:
        assert step["expert/fraction"] == pytest.approx(0.5)
        assert math.isfinite(step["expert/sft_loss"]) and "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
