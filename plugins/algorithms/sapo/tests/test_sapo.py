"""rft-plugin-sapo: the policy-loss contract, equality with veRL 0.9.1's
``compute_policy_loss_sapo`` (values, gradients, metrics; float64, hypothesis, the kit's
tolerance ``atol = rtol = 1e-6``), hand-computed gradients of both surrogates, the preset
after validation and a tiny run."""

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
from rft_plugin_sapo import SAPOArgs, sapo_policy_loss

torch.set_num_threads(1)

TAUS = st.sampled_from([(1.0, 1.05), (0.5, 2.0), (3.0, 3.0)])


@SETTINGS
@given(policy_loss_inputs(), TAUS, st.sampled_from(["paper", "trinity"]))
def test_sapo_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, taus: tuple,
                                             surrogate: str) -> None:
    """Masked positions do not count, finite gradients at log-ratios up to ±20 (the gate
    saturates), zero advantages give zero loss, micro-batches add up in every agg mode."""
    check_policy_loss(sapo_policy_loss, SAPOArgs(*taus, surrogate=surrogate), inputs)


@SETTINGS
@given(policy_loss_inputs(modes=["seq-mean-token-mean"]), TAUS)
def test_sapo_equals_verl(inputs: PolicyLossInputs, taus: tuple) -> None:
    """Loss, gradient and ``ppo_kl``, with and without a mini-batch's counts. veRL always
    aggregates SAPO with ``seq-mean-token-mean`` (whatever ``loss_agg_mode`` says), so the
    comparison draws that mode; in rft it is the trainer's ``loss_agg_mode``."""
    tau_pos, tau_neg = taus
    assert_equals_verl(sapo_policy_loss, SAPOArgs(tau_pos, tau_neg), "sapo", inputs,
                       config={"tau_pos": tau_pos, "tau_neg": tau_neg})


def _inputs(log_prob: list[float], adv: list[float]) -> PolicyLossInputs:
    logp = torch.tensor([log_prob], dtype=torch.float64, requires_grad=True)
    return PolicyLossInputs(logp, torch.zeros(1, len(log_prob), dtype=torch.float64),
                            torch.tensor([adv], dtype=torch.float64),
                            torch.ones(1, len(log_prob), dtype=torch.float64), AggContext())


def _grad(args: SAPOArgs, inputs: PolicyLossInputs) -> list[float]:
    pg_loss, _ = sapo_policy_loss(inputs, args)
    (grad,) = torch.autograd.grad(pg_loss.sum(), inputs.log_prob)
    return grad[0].tolist()


def test_on_policy_gradients_of_both_surrogates() -> None:
    """At ratio 1 the gate is 2/τ with slope 1: the paper's gradient is −A (as PPO's),
    Trinity-RFT's is −A·2/τ."""
    inputs = _inputs([0.0, 0.0], [1.0, -1.0])
    assert _grad(SAPOArgs(), inputs) == pytest.approx([-1.0, 1.0])
    assert _grad(SAPOArgs(surrogate="trinity"), inputs) == pytest.approx([-2.0, 2 / 1.05])
    pg_loss, metrics = sapo_policy_loss(inputs, SAPOArgs())
    assert pg_loss[0].tolist() == pytest.approx([-2.0, 2 / 1.05])
    assert metrics["avg_soft_gate"].item() == pytest.approx((2.0 + 2 / 1.05) / 2)
    assert metrics["pos_adv_frac"].item() == pytest.approx(0.5)


def test_gate_damps_far_off_policy_tokens() -> None:
    """Ratio e (log-ratio 1), τ = 1: the paper's gradient weight is 4σ(1−σ)·r with
    σ = σ(e − 1); far off policy (log-ratio 10) it is nearly 0."""
    sig = 1 / (1 + math.exp(-(math.e - 1)))
    grads = _grad(SAPOArgs(), _inputs([1.0, 10.0], [1.0, 1.0]))
    assert grads[0] == pytest.approx(-4 * sig * (1 - sig) * math.e)
    assert abs(grads[1]) < 1e-100


def test_rejects_bad_temperatures() -> None:
    inputs = _inputs([0.0], [1.0])
    with pytest.raises(ValueError, match="tau_neg"):
        sapo_policy_loss(inputs, SAPOArgs(tau_pos=2.0, tau_neg=1.0))
    with pytest.raises(ValueError, match="> 0"):
        sapo_policy_loss(inputs, SAPOArgs(tau_pos=0.0))


# ---- preset, registry and a tiny run ---------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "sapo").distribution == "rft-plugin-sapo"
    assert registry.registration("policy_loss_fn", "sapo").distribution == "rft-plugin-sapo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "sapo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "sapo", "k2", "none", "default", "default", 2)
    args = plan.loss.policy_loss.args
    assert (args.tau_pos, args.tau_neg, args.surrogate) == (1.0, 1.05, "paper")
    assert plan.preset.use_reference and not plan.preset.use_critic




def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "sapo",
                       "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward"},
                      plugins=[TextRewardPlugin()])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert "actor/avg_soft_gate" in step
    assert any(step["actor/grad_norm"] > 0 for step in outcome.metrics)
