"""rft-plugin-sppo: the policy-loss contract, the band by hand, the preset after
validation, a tiny run. veRL 0.9.1 has no sPPO, so there is no veRL comparison."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AggContext, PolicyLossInputs
from rft.ops import agg_loss
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.checks import check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_sppo import SPPOArgs, sppo_policy_loss

torch.set_num_threads(1)


@SETTINGS
@given(policy_loss_inputs(), st.sampled_from([0.05, 0.3, 2.0]))
def test_sppo_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, epsilon: float) -> None:
    """Masking, finite gradients at log-ratios up to ±20, zero loss for zero advantages,
    micro-batches add up in every agg mode."""
    check_policy_loss(sppo_policy_loss, SPPOArgs(epsilon=epsilon), inputs)


def test_the_band_by_hand() -> None:
    """ε = 0.3: the band is [1/1.3, 1.3] ≈ [0.769, 1.3] in ratio, i.e. log-ratios in
    [−0.262, 0.262]. Inside: −A·δ with gradient −A; outside: 0."""
    log_ratio = [0.1, -0.2, 0.3, -0.3, 0.0]
    log_prob = torch.tensor([log_ratio], dtype=torch.float64, requires_grad=True)
    old = torch.zeros_like(log_prob)
    advantages = torch.tensor([[2.0, -1.0, 1.0, 1.0, 5.0]], dtype=torch.float64)
    mask = torch.ones_like(old)
    pg_loss, metrics = sppo_policy_loss(
        PolicyLossInputs(log_prob, old, advantages, mask, AggContext()), SPPOArgs())
    assert pg_loss[0].tolist() == pytest.approx([-0.2, -0.2, 0.0, 0.0, 0.0])
    (grad,) = torch.autograd.grad(pg_loss.sum(), log_prob)
    assert grad[0].tolist() == pytest.approx([-2.0, 1.0, 0.0, 0.0, -5.0])
    assert metrics["pg_clipfrac"].item() == pytest.approx(2 / 5)


def test_token_mean_is_trinitys_masked_mean() -> None:
    """Aggregated with ``token-mean`` the loss is Trinity-RFT's ``masked_mean`` of the
    per-token terms over the action mask."""
    gen = torch.Generator().manual_seed(0)
    log_prob = (-torch.rand(3, 4, generator=gen, dtype=torch.float64)).requires_grad_()
    old = log_prob.detach() + 0.2 * torch.randn(3, 4, generator=gen, dtype=torch.float64)
    advantages = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    pg_loss, _ = sppo_policy_loss(PolicyLossInputs(log_prob, old, advantages, mask,
                                                   AggContext()), SPPOArgs(epsilon=0.3))
    ratio = torch.exp(log_prob.detach() - old)
    inside = ((ratio >= 1 / 1.3) & (ratio <= 1.3)).double()
    expected = (-advantages * (log_prob.detach() - old) * inside * mask).sum() / mask.sum()
    assert agg_loss(pg_loss, mask, "token-mean").item() == pytest.approx(expected.item())


def test_args_are_checked() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        SPPOArgs(epsilon=0.0)


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "sppo").distribution == "rft-plugin-sppo"
    assert registry.registration("policy_loss_fn", "sppo").distribution == "rft-plugin-sppo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "sppo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("opmd", "sppo", "none", "none", "none", "default", 2)
    assert plan.loss.policy_loss.args.epsilon == 0.3
    assert not plan.preset.use_reference


def test_a_tiny_run_trains_with_sppo(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "sppo"})
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert "actor/pg_clipfrac" in step and "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
