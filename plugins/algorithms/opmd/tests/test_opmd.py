"""rft-plugin-opmd: algebraic properties of the OPMD advantage and loss (veRL has no
OPMD), the preset after validation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs, AggContext, PolicyLossInputs
from rft.ops import agg_loss
from rft.plugins import PluginRegistry
from rft.testing.algorithms import (REWARD_KINDS, SETTINGS, Batch, batches, close, rewards_for,
                                    validated)
from rft.testing.checks import check_advantage, check_policy_loss
from rft.testing.strategies import advantage_inputs, policy_loss_inputs
from rft_plugin_opmd import OPMDAdvantageArgs, OPMDLossArgs, opmd_advantages, opmd_policy_loss

torch.set_num_threads(1)


def _loop_reference(rewards, mask, groups, baseline: str, tau: float) -> torch.Tensor:
    """The advantage written as a plain loop over groups (Trinity-RFT's structure)."""
    scores = rewards.sum(-1)
    out = torch.zeros_like(rewards)
    labels = list(groups)
    for label in set(labels):
        rows = [i for i, x in enumerate(labels) if x == label]
        group = scores[rows]
        if len(rows) == 1:
            b = 0.0
        elif baseline == "mean":
            b = group.mean()
        else:
            b = tau * (torch.logsumexp(group / tau, 0) - math.log(len(rows)))
        for i in rows:
            out[i] = (scores[i] - b) * mask[i]
    return out


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS, st.sampled_from(["mean", "logavgexp"]),
       st.sampled_from([0.1, 1.0, 10.0]))
def test_advantage_equals_the_loop(batch: Batch, kind: str, baseline: str, tau: float) -> None:
    rewards = rewards_for(batch, kind)
    ours, returns = opmd_advantages(AdvantageInputs(rewards, batch.mask, batch.groups),
                                    OPMDAdvantageArgs(baseline, tau))
    close(ours, _loop_reference(rewards, batch.mask, batch.groups, baseline, tau))
    assert returns is ours


@SETTINGS
@given(advantage_inputs(), st.sampled_from([0.1, 1.0, 10.0]))
def test_advantage_keeps_the_contract(inputs: AdvantageInputs, tau: float) -> None:
    """Finite, zero on padding, no gradient; both baselines move with a constant added to
    a group's rewards (``τ·logavgexp((r + c)/τ) = b + c``), so the advantages do not."""
    for baseline in ("mean", "logavgexp"):
        check_advantage(opmd_advantages, OPMDAdvantageArgs(baseline, tau), inputs,
                        shift_invariant=True)


@SETTINGS
@given(policy_loss_inputs(), st.sampled_from([0.0, 1.0, 4.0]))
def test_loss_keeps_the_contract(inputs: PolicyLossInputs, tau: float) -> None:
    """Masking, finite gradients, zero loss for zero advantages, micro-batches add up."""
    check_policy_loss(opmd_policy_loss, OPMDLossArgs(tau=tau), inputs)


def test_baselines_by_hand() -> None:
    rewards = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    mask = torch.ones(3, 1, dtype=torch.float64)
    inputs = AdvantageInputs(rewards, mask, [0, 0, 1])
    mean, _ = opmd_advantages(inputs, OPMDAdvantageArgs())
    assert mean[:, 0].tolist() == pytest.approx([-0.5, 0.5, 2.0])  # singleton: b = 0
    soft, _ = opmd_advantages(inputs, OPMDAdvantageArgs("logavgexp", 1.0))
    b = math.log((1 + math.e) / 2)
    assert soft[:, 0].tolist() == pytest.approx([-b, 1 - b, 2.0])
    # τ → 0: the baseline tends to the group max; τ → ∞: to the mean
    near_max, _ = opmd_advantages(inputs, OPMDAdvantageArgs("logavgexp", 1e-3))
    assert near_max[1, 0].item() == pytest.approx(0.0, abs=1e-2)
    near_mean, _ = opmd_advantages(inputs, OPMDAdvantageArgs("logavgexp", 1e4))
    assert near_mean[:, 0].tolist() == pytest.approx([-0.5, 0.5, 2.0], abs=1e-3)
    with pytest.raises(ValueError, match="opmd_baseline"):
        opmd_advantages(inputs, OPMDAdvantageArgs("median"))  # type: ignore[arg-type]


@SETTINGS
@given(batches(min_tokens=1), st.sampled_from([0.0, 1.0, 4.0]))
def test_loss_and_gradient(batch: Batch, tau: float) -> None:
    """``agg(−A·logπ)/(1+τ)``; its gradient w.r.t. ``logπ`` is ``−A·mask/((1+τ)·Σmask)``
    under token-mean, and the old log-probs do not enter the loss."""
    logp = batch.logps().requires_grad_()
    advantages = batch.randn()
    args, agg = OPMDLossArgs(tau=tau), AggContext()
    pg_loss, metrics = opmd_policy_loss(
        PolicyLossInputs(logp, batch.logps(), advantages, batch.mask, agg), args)
    other, _ = opmd_policy_loss(
        PolicyLossInputs(logp, batch.logps(3.0), advantages, batch.mask, agg), args)
    assert torch.equal(pg_loss, other)
    loss = agg_loss(pg_loss, batch.mask, "token-mean")
    close(loss, (-(advantages * logp) * batch.mask).sum() / batch.mask.sum() / (1 + tau))
    (grad,) = torch.autograd.grad(loss, logp)
    close(grad, -advantages * batch.mask / ((1 + tau) * batch.mask.sum()))
    assert set(metrics) == {"ppo_kl"}


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind in ("algorithm", "advantage_fn", "policy_loss_fn"):
        assert registry.registration(kind, "opmd").distribution == "rft-plugin-opmd"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated(
        {"algorithm_type": "opmd", "advantage_fn_args": {"opmd_baseline": "logavgexp"}},
        str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.entropy_loss_fn, algorithm.sample_strategy, algorithm.repeat_times) == (
        "opmd", "opmd", "k2", "default", "default", 2)
    adv_args = plan.loss.advantage.args
    assert (adv_args.opmd_baseline, adv_args.tau) == ("logavgexp", 1.0)
    assert plan.loss.policy_loss.args.tau == 1.0
    assert plan.preset.use_reference
