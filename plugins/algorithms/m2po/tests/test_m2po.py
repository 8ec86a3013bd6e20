"""rft-plugin-m2po: the mask against a literal Algorithm 1 loop, small cases by hand,
the policy-loss contract, the preset after validation, a tiny run. veRL 0.9.1 has no
M2PO, so there is no veRL comparison."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, Batch, batches, validated
from rft.testing.checks import check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_m2po import M2POArgs, m2po_mask, m2po_policy_loss

torch.set_num_threads(1)

THRESHOLDS = st.sampled_from([0.0, 0.01, 0.04, 1.0])


def _algorithm_one(log_ratio: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor,
                   threshold: float) -> torch.Tensor:
    """The paper's loop: drop the largest squared log-ratio of the trust region until the
    mean of what is left is at most the threshold."""
    keep = mask.bool().clone()
    trust = [(i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1])
             if mask[i, t] and ((advantages[i, t] > 0 and log_ratio[i, t] > 0)
                                or (advantages[i, t] < 0 and log_ratio[i, t] < 0))]
    while trust and sum(float(log_ratio[p]) ** 2 for p in trust) / len(trust) > threshold:
        worst = max(trust, key=lambda p: float(log_ratio[p]) ** 2)
        trust.remove(worst)
        keep[worst] = False
    return keep


def _inputs(new: list[list[float]], adv: list[list[float]], mask=None) -> PolicyLossInputs:
    log_prob = torch.tensor(new, dtype=torch.float64, requires_grad=True)
    old = torch.zeros_like(log_prob)
    advantages = torch.tensor(adv, dtype=torch.float64)
    mask = torch.ones_like(old) if mask is None else torch.tensor(mask, dtype=torch.float64)
    return PolicyLossInputs(log_prob, old, advantages, mask, AggContext())


@SETTINGS
@given(policy_loss_inputs(), THRESHOLDS)
def test_m2po_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, threshold: float) -> None:
    """Masking, finite gradients at log-ratios up to ±20, zero loss for zero advantages.
    Micro-batches do not add up by design: the mask is chosen over the tokens of the
    call (a nonlinear selection), so the whole batch is one unit here."""
    check_policy_loss(m2po_policy_loss, M2POArgs(m2_threshold=threshold), inputs,
                      unit_size=inputs.response_mask.shape[0])


@SETTINGS
@given(batches(), THRESHOLDS)
def test_mask_is_algorithm_one(batch: Batch, threshold: float) -> None:
    """The sort-and-prefix-mean selection keeps exactly what the paper's loop keeps, and
    what it keeps of the trust region has ``M2 ≤ τ``."""
    old = batch.logps()
    log_ratio = batch.drifted(old, 0.5) - old
    advantages = batch.randn()
    keep, metrics = m2po_mask(log_ratio, batch.mask, advantages, threshold)
    assert torch.equal(keep, _algorithm_one(log_ratio, batch.mask, advantages, threshold))
    assert metrics["m2_after"] <= threshold + 1e-12 or metrics["m2_after"] == metrics["m2_before"]
    assert not keep[batch.mask == 0].any()


def test_the_largest_trust_region_token_goes_first() -> None:
    """δ = (0.1, 0.2, 0.3), A > 0: M2 = 0.14/3 > 0.04; dropping 0.3 leaves 0.025."""
    inputs = _inputs([[0.1, 0.2, 0.3]], [[1.0, 1.0, 1.0]])
    pg_loss, metrics = m2po_policy_loss(inputs, M2POArgs())
    expected = [-math.exp(0.1), -math.exp(0.2), 0.0]
    assert pg_loss[0].tolist() == pytest.approx(expected)
    assert metrics["m2po/m2_before"] == pytest.approx((0.01 + 0.04 + 0.09) / 3)
    assert metrics["m2po/m2_after"] == pytest.approx(0.025)
    assert metrics["m2po/masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["m2po/trust_region_fraction"] == pytest.approx(1.0)


def test_only_the_clipping_quadrants_are_constrained() -> None:
    """``A < 0, δ > 0`` and ``A > 0, δ < 0`` are outside the trust region, kept whatever
    their size; masked-out tokens never count."""
    inputs = _inputs([[1.0, -1.0, 1.0, -1.0, 2.0]], [[-1.0, 1.0, 1.0, -1.0, 1.0]],
                     mask=[[1, 1, 1, 1, 0]])
    keep, metrics = m2po_mask(inputs.log_prob - inputs.old_log_prob, inputs.response_mask,
                              inputs.advantages, 0.1)
    assert keep.tolist() == [[True, True, False, False, False]]
    assert metrics["trust_region_fraction"] == pytest.approx(0.5)


def test_gradient_is_the_importance_weighted_policy_gradient() -> None:
    """On kept tokens ``∂pg/∂log π = −A · ρ``; beyond the log-ratio clip the value is
    ``exp(±c)`` and the gradient passes straight through."""
    inputs = _inputs([[0.05, -0.5, 3.0]], [[2.0, 1.0, -1.0]])
    pg_loss, _ = m2po_policy_loss(inputs, M2POArgs(m2_threshold=100.0, log_ratio_clip=1.0))
    (grad,) = torch.autograd.grad(pg_loss.sum(), inputs.log_prob)
    ratio = [math.exp(0.05), math.exp(-0.5), math.exp(1.0)]
    assert pg_loss[0].tolist() == pytest.approx([-2 * ratio[0], -ratio[1], ratio[2]])
    assert grad[0].tolist() == pytest.approx([-2 * ratio[0], -ratio[1], ratio[2]])


def test_args_are_checked() -> None:
    with pytest.raises(ValueError, match="m2_threshold"):
        M2POArgs(m2_threshold=-1.0)
    with pytest.raises(ValueError, match="log_ratio_clip"):
        M2POArgs(log_ratio_clip=0.0)


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "m2po").distribution == "rft-plugin-m2po"
    assert registry.registration("policy_loss_fn", "m2po").distribution == "rft-plugin-m2po"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "m2po"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "m2po", "none", "none", "default", "default", 8)
    assert plan.loss.policy_loss.args == M2POArgs()
    assert not plan.preset.use_reference


def test_a_tiny_run_trains_with_m2po(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "m2po", "algorithm.repeat_times": 2})
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert "m2po/m2_before" in step and "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
