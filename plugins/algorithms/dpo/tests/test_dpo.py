"""rft-plugin-dpo: algebra of the loss (log 2 at the reference, closed form, gradient,
micro-batch additivity), the trainer's calling convention, the preset."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from rft.contracts import AggContext, PolicyLossInputs, needs_ref_log_prob
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, Batch, batches, close, validated
from rft.testing.checks import check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_dpo import DPOArgs, dpo_loss

torch.set_num_threads(1)


@SETTINGS
@given(policy_loss_inputs(pairs=True, ref_log_prob=True), st.sampled_from([0.0, 0.1, 0.3]),
       st.sampled_from([0.01, 0.1, 2.0]))
def test_dpo_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, smoothing: float,
                                            beta: float) -> None:
    """A sequence-level 0-dim loss: masking, finite gradients at log-ratios up to ±20, and
    micro-batches of whole pairs (``unit_size=2``) add up with the mini-batch's
    ``global_batch_size``. ``zero_advantage_zero_loss=False``: DPO does not use the
    advantages (its signal is the preference between the rows of a pair)."""
    check_policy_loss(dpo_loss, DPOArgs(beta=beta, label_smoothing=smoothing), inputs,
                      zero_advantage_zero_loss=False, unit_size=2)


def _inputs(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, mask: torch.Tensor,
            global_batch_size: float | None = None) -> PolicyLossInputs:
    """What the trainer passes: old log-probs and advantages are not used by DPO."""
    return PolicyLossInputs(log_prob, log_prob.detach(), torch.zeros_like(log_prob), mask,
                            AggContext(global_batch_size=global_batch_size),
                            ref_log_prob=ref_log_prob)


@SETTINGS
@given(batches(even_b=True), st.sampled_from([0.0, 0.1, 0.3]), st.sampled_from([0.01, 0.1, 2.0]))
def test_log_two_at_the_reference(batch: Batch, smoothing: float, beta: float) -> None:
    logp = batch.logps()
    loss, metrics = dpo_loss(_inputs(logp, logp, batch.mask),
                             DPOArgs(beta=beta, label_smoothing=smoothing))
    assert loss.item() == pytest.approx(math.log(2), abs=1e-12)
    assert metrics["margin"].item() == 0.0 and metrics["accuracy_mean"].item() == 0.0


@SETTINGS
@given(batches(even_b=True), st.sampled_from([0.0, 0.2]), st.sampled_from([0.1, 1.0]))
def test_closed_form_and_gradient(batch: Batch, smoothing: float, beta: float) -> None:
    """Per pair ``−(1−ε) log σ(z) − ε log σ(−z)``, ``z = β (ρ_c − ρ_r)``, averaged;
    ``∂loss/∂logπ_it = ∓ β σ'(…) · mask_it / (B/2)``, checked against autograd of the
    formula written per pair."""
    logp = batch.logps().requires_grad_()
    ref = batch.logps()
    loss, _ = dpo_loss(_inputs(logp, ref, batch.mask),
                       DPOArgs(beta=beta, label_smoothing=smoothing))
    expected = 0.0
    for k in range(batch.B // 2):
        c, r = 2 * k, 2 * k + 1
        rho_c = ((logp[c] - ref[c]) * batch.mask[c]).sum()
        rho_r = ((logp[r] - ref[r]) * batch.mask[r]).sum()
        z = beta * (rho_c - rho_r)
        expected = expected + (-(1 - smoothing) * F.logsigmoid(z) - smoothing * F.logsigmoid(-z))
    expected = expected / (batch.B // 2)
    close(loss, expected)
    (g_ours,) = torch.autograd.grad(loss, logp, retain_graph=True)
    (g_ref,) = torch.autograd.grad(expected, logp)
    close(g_ours, g_ref)


def test_micro_batches_add_up() -> None:
    gen = torch.Generator().manual_seed(3)
    logp = -torch.rand(8, 5, generator=gen, dtype=torch.float64)
    ref = -torch.rand(8, 5, generator=gen, dtype=torch.float64)
    mask = (torch.rand(8, 5, generator=gen) < 0.8).to(torch.float64)
    full, _ = dpo_loss(_inputs(logp, ref, mask), DPOArgs())
    parts = [dpo_loss(_inputs(logp[s], ref[s], mask[s], global_batch_size=8), DPOArgs())[0]
             for s in (slice(0, 2), slice(2, 8))]
    assert sum(parts).item() == pytest.approx(full.item(), rel=1e-12)


def test_rejects_odd_rows_and_bad_smoothing() -> None:
    x = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="pairs"):
        dpo_loss(_inputs(x, x, x + 1), DPOArgs())
    y = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(_inputs(y, y, y + 1), DPOArgs(label_smoothing=0.5))


def test_declares_that_it_needs_the_reference() -> None:
    assert needs_ref_log_prob(dpo_loss)


def test_trainer_gives_it_the_reference(tmp_path) -> None:
    """Through rft.trainer.loss: the loss declares needs_ref_log_prob, and a scalar
    loss is taken as already aggregated."""
    from rft.trainer.loss import AggContext, LossInputs, actor_loss

    _, plan = validated({"algorithm_type": "dpo"}, str(tmp_path))
    fns = plan.loss
    assert fns.policy_needs_ref and fns.needs_ref
    logp = torch.full((4, 3), -1.0, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(4, 3, dtype=torch.float64)
    out = actor_loss(fns, LossInputs(logp, mask, ref_log_prob=logp.detach()),
                     AggContext.for_mini_batch(mask, "token-mean"))
    assert out.loss.item() == pytest.approx(math.log(2))
    assert "actor/accuracy_mean" in out.averaged


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "dpo").distribution == "rft-plugin-dpo"
    assert registry.registration("policy_loss_fn", "dpo").distribution == "rft-plugin-dpo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "dpo",
                                       "policy_loss_fn_args": {"beta": 0.2}}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == (None, "dpo", "none", "none", "none", "default", 2)
    args = plan.loss.policy_loss.args
    assert (args.beta, args.label_smoothing) == (0.2, 0.0)
    preset = plan.preset
    assert preset.use_reference and preset.train_only and preset.experience_format == "dpo"


def test_repeat_times_is_set_to_two_with_a_warning(tmp_path) -> None:
    """The guide: "In dpo, this is automatically set to 2"; a warning names the value
    that was replaced (it was a validation error)."""
    from rft.config import build_stages
    from rft.testing.algorithms import minimal_config

    loaded = build_stages(minimal_config({"algorithm_type": "dpo", "repeat_times": 4},
                                         str(tmp_path)), PluginRegistry.create())
    assert loaded.stages[0].config.algorithm.repeat_times == 2
    assert "algorithm.repeat_times: dpo uses repeat_times=2; 4 is replaced" in loaded.warnings
