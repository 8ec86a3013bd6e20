"""rft's core loss maths equals veRL 0.9.1's on random tensors (values and gradients).

veRL is the reference, installed in the test environment by ``scripts/setup.sh --test``
(``pip install --no-deps -r requirements/verl-test.txt``). Hypothesis draws the shapes, masks (all-zero rows
included), groups (singletons included) and reward kinds; the tensors themselves come from
a seeded generator, in float64. Every comparison is at ``atol = rtol = 1e-6``; where veRL
returns NaN or raises on an edge case, the test says so in its docstring and checks what
rft does instead.

The advantage estimators live in their algorithm plugins, each with its own veRL test
(``plugins/algorithms/<name>/tests``); the random batches come from
:mod:`rft.testing.algorithms`, shared with those tests.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.utils import torch_functional as verl_F

from rft import ops
from rft.builtin.entropy import EntropyArgs, entropy_bonus
from rft.builtin.kl import KL_FNS, KLArgs
from rft.builtin.policy_loss import PPOArgs, clipped_value_loss, ppo_policy_loss
from rft.contracts import AggContext, EntropyInputs, KLInputs, PolicyLossInputs
from rft.testing.algorithms import (
    FEW, SETTINGS, Batch, assert_policy_loss_matches, batches, close)

torch.set_num_threads(1)

AGG_MODES = list(ops.LOSS_AGG_MODES)
VERL_KL_NAMES = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3",
                 "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+"]


def logps(batch: Batch, scale: float) -> torch.Tensor:
    return batch.logps(scale)


def verl_actor_config(**values: object):
    base = {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None,
            "clip_ratio_c": 3.0, "global_batch_info": {}}
    base.update(values)
    return OmegaConf.create(base)


# --------------------------------------------------------------------------------------
# ops
# --------------------------------------------------------------------------------------


@SETTINGS
@given(batches(), st.sampled_from([None, 0, 1]))
def test_masked_sum_and_mean(batch: Batch, dim: int | None) -> None:
    values = batch.randn().requires_grad_()
    mine = [ops.masked_sum(values, batch.mask, dim), ops.masked_mean(values, batch.mask, dim)]
    theirs = [verl_F.masked_sum(values, batch.mask, dim), verl_F.masked_mean(values, batch.mask, dim)]
    for ours, ref in zip(mine, theirs, strict=True):
        close(ours, ref)
        (g_ours,) = torch.autograd.grad(ours.sum(), values)
        (g_ref,) = torch.autograd.grad(ref.sum(), values)
        close(g_ours, g_ref)


@SETTINGS
@given(batches(), st.booleans(), st.booleans())
def test_masked_var_and_whiten(batch: Batch, unbiased: bool, shift_mean: bool) -> None:
    """veRL raises ValueError for the unbiased variance (hence whitening) of fewer than two
    masked elements; rft raises the same error type."""
    values = batch.randn(scale=3.0)
    try:
        expected_var = verl_F.masked_var(values, batch.mask, unbiased=unbiased)
    except ValueError:
        event("veRL raises: < 2 masked elements")
        with pytest.raises(ValueError):
            ops.masked_var(values, batch.mask, unbiased=unbiased)
        with pytest.raises(ValueError):
            ops.masked_whiten(values, batch.mask, shift_mean=shift_mean)
        return
    close(ops.masked_var(values, batch.mask, unbiased=unbiased), expected_var)
    if unbiased:
        close(ops.masked_whiten(values, batch.mask, shift_mean=shift_mean),
              verl_F.masked_whiten(values, batch.mask, shift_mean=shift_mean))


@SETTINGS
@given(batches(), st.sampled_from(AGG_MODES), st.booleans(), st.sampled_from([None, 7.0]))
def test_agg_loss(batch: Batch, mode: str, global_counts: bool, scale_factor: float | None) -> None:
    """Values and gradients equal veRL's ``agg_loss`` in every mode, with and without the
    global token / sequence counts and ``dp_size``.

    Divergence: with an all-zero mask and no global count veRL divides 0 by 0 (NaN) in the
    ``token-mean`` and ``seq-mean-*`` modes; rft returns 0 (an empty micro-batch adds no
    loss and no gradient)."""
    loss_mat = batch.randn().requires_grad_()
    kwargs: dict = {"loss_scale_factor": scale_factor}
    if global_counts:
        kwargs.update(dp_size=2, batch_num_tokens=batch.mask.sum().item() + 3,
                      global_batch_size=batch.B + 1)
    ours = ops.agg_loss(loss_mat, batch.mask, mode, **kwargs)
    ref = core_algos.agg_loss(loss_mat, batch.mask, mode, **kwargs)
    if torch.isnan(ref):
        event("veRL NaN on an empty mask")
        assert batch.mask.sum() == 0 and not global_counts and mode != "token-sum"
        assert ours.item() == 0.0
        (g_ours,) = torch.autograd.grad(ours, loss_mat)
        assert torch.all(g_ours == 0)
        return
    close(ours, ref)
    (g_ours,) = torch.autograd.grad(ours, loss_mat)
    (g_ref,) = torch.autograd.grad(ref, loss_mat)
    close(g_ours, g_ref)


@SETTINGS
@given(batches(max_b=6, max_t=6), st.integers(1, 40), st.sampled_from([0.1, 1.0, 30.0]))
def test_entropy_and_logprobs_from_logits(batch: Batch, vocab: int, scale: float) -> None:
    logits = batch.randn(batch.B, batch.T, vocab, scale=scale).requires_grad_()
    labels = torch.randint(0, vocab, (batch.B, batch.T), generator=batch.gen)
    pairs = [(ops.entropy_from_logits(logits), verl_F.entropy_from_logits(logits)),
             (ops.entropy_from_log_probs(torch.log_softmax(logits, dim=-1)),  # the trainer's
              verl_F.entropy_from_logits(logits)),
             (ops.logprobs_from_logits(logits, labels), verl_F.logprobs_from_logits(logits, labels))]
    for ours, ref in pairs:
        close(ours, ref)
        weights = batch.randn()
        (g_ours,) = torch.autograd.grad((ours * weights).sum(), logits)
        (g_ref,) = torch.autograd.grad((ref * weights).sum(), logits)
        close(g_ours, g_ref)


@FEW
@given(batches(max_b=6, max_t=6), st.integers(1, 20), st.sampled_from(AGG_MODES),
       st.sampled_from([0.0, 0.003, 1.0]))
def test_entropy_loss(batch: Batch, vocab: int, mode: str, coef: float) -> None:
    """``default`` entropy term = ``entropy_coef × compute_entropy_loss`` (veRL subtracts
    ``entropy_coeff × entropy_loss``). Empty masks: see ``test_agg_loss``."""
    logits = batch.randn(batch.B, batch.T, vocab).requires_grad_()
    ref = coef * core_algos.compute_entropy_loss(logits, batch.mask, loss_agg_mode=mode)
    ours = entropy_bonus(EntropyInputs(ops.entropy_from_logits(logits), batch.mask,
                                       AggContext(mode)), EntropyArgs(entropy_coef=coef))
    if torch.isnan(ref):
        assert batch.mask.sum() == 0 and ours.item() == 0.0
        return
    close(ours, ref)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    close(g_ours, g_ref)


# --------------------------------------------------------------------------------------
# KL, policy loss, value loss
# --------------------------------------------------------------------------------------


@SETTINGS
@given(batches(), st.sampled_from(VERL_KL_NAMES), st.sampled_from([0.05, 1.0, 15.0]))
def test_kl_estimators(batch: Batch, name: str, scale: float) -> None:
    """Every name veRL's ``kl_penalty`` accepts: value and gradient w.r.t. both log-probs
    (large scales reach low_var_kl's ±20 / ±10 clamps)."""
    logp = logps(batch, scale).requires_grad_()
    ref_logp = logps(batch, scale).requires_grad_()
    ours = KL_FNS[name](KLInputs(logp, ref_logp), KLArgs())
    ref = core_algos.kl_penalty(logp, ref_logp, name)
    close(ours, ref)
    weights = batch.randn()
    g_ours = torch.autograd.grad((ours * weights).sum(), (logp, ref_logp))
    g_ref = torch.autograd.grad((ref * weights).sum(), (logp, ref_logp))
    for a, b in zip(g_ours, g_ref, strict=True):
        close(a, b)


def test_kl_none_is_zero() -> None:
    logp = torch.randn(3, 4, dtype=torch.float64)
    assert torch.all(KL_FNS["none"](KLInputs(logp, logp - 1), KLArgs()) == 0)


@SETTINGS
@given(batches(), st.sampled_from(AGG_MODES), st.sampled_from([0.02, 0.3, 25.0]),
       st.sampled_from([(0.2, None, None), (0.2, 0.2, 0.28), (0.1, 0.3, 0.05)]),
       st.sampled_from([1.5, 3.0, 10.0]), st.booleans())
def test_ppo_policy_loss(batch: Batch, mode: str, drift: float, clips: tuple,
                         clip_ratio_c: float, global_counts: bool) -> None:
    """``ppo`` = veRL ``vanilla``: loss, gradient w.r.t. the log-probs, and the metrics
    ``pg_clipfrac``, ``pg_clipfrac_lower``, ``ppo_kl``. Large drifts reach the ±20
    log-ratio clamp. Empty masks: see ``test_agg_loss``."""
    clip, low, high = clips
    old = logps(batch, 1.0)
    new = (old + batch.randn(scale=drift)).requires_grad_()
    advantages = batch.randn(scale=2.0)
    info = ({"batch_num_tokens": batch.mask.sum().item() + 1, "global_batch_size": batch.B + 2,
             "dp_size": 1} if global_counts else {})
    ref, ref_metrics = core_algos.compute_policy_loss_vanilla(
        old_log_prob=old, log_prob=new, advantages=advantages, response_mask=batch.mask,
        loss_agg_mode=mode,
        config=verl_actor_config(clip_ratio=clip, clip_ratio_low=low, clip_ratio_high=high,
                                 clip_ratio_c=clip_ratio_c, global_batch_info=info))
    pg_loss, metrics = ppo_policy_loss(
        PolicyLossInputs(new, old, advantages, batch.mask, AggContext(mode, **info)),
        PPOArgs(clip_range=clip, clip_range_low=low, clip_range_high=high,
                clip_ratio_c=clip_ratio_c))
    assert_policy_loss_matches(pg_loss, metrics, ref, ref_metrics, batch.mask, mode, info, new)


def test_ppo_rejects_clip_ratio_c_at_most_one() -> None:
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_policy_loss(PolicyLossInputs(x, x, x, x + 1, AggContext()),
                        PPOArgs(clip_ratio_c=1.0))


@SETTINGS
@given(batches(), st.sampled_from(AGG_MODES), st.sampled_from([0.05, 0.5, 5.0]),
       st.booleans())
def test_value_loss(batch: Batch, mode: str, cliprange_value: float, global_counts: bool) -> None:
    """Clipped value loss = veRL ``compute_value_loss``: ``vf_loss``, its gradient w.r.t.
    the predicted values, ``vf_clipfrac``. Empty masks: see ``test_agg_loss``."""
    old_values = batch.randn()
    values = (old_values + batch.randn(scale=0.5)).requires_grad_()
    returns = batch.randn()
    info = ({"batch_num_tokens": batch.mask.sum().item() + 1, "global_batch_size": batch.B + 2,
             "dp_size": 2} if global_counts else {})
    ref, ref_clipfrac = core_algos.compute_value_loss(
        values, returns, old_values, batch.mask, cliprange_value, loss_agg_mode=mode, **info)
    ours, clipfrac = clipped_value_loss(values, old_values, returns, batch.mask,
                                        cliprange_value=cliprange_value, loss_agg_mode=mode,
                                        **info)
    close(clipfrac, ref_clipfrac)
    if torch.isnan(ref):
        assert batch.mask.sum() == 0 and ours.item() == 0.0
        return
    close(ours, ref)
    (g_ours,) = torch.autograd.grad(ours, values)
    (g_ref,) = torch.autograd.grad(ref, values)
    close(g_ours, g_ref)
