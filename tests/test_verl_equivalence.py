"""rft's loss and advantage maths equals veRL 0.9.1's on random tensors (values and gradients).

veRL is the reference (``pip install --no-deps -r requirements/verl-test.txt``); the module
is skipped where it is not installed. Hypothesis draws the shapes, masks (all-zero rows
included), groups (singletons included) and reward kinds; the tensors themselves come from
a seeded generator, in float64. Every comparison is at ``atol = rtol = 1e-6``; where veRL
returns NaN or raises on an edge case, the test says so in its docstring and checks what
rft does instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
verl_F = pytest.importorskip("verl.utils.torch_functional")
from omegaconf import OmegaConf  # noqa: E402

from rft import ops  # noqa: E402
from rft.algorithms_math import advantages as adv  # noqa: E402
from rft.builtin.entropy import entropy_bonus  # noqa: E402
from rft.builtin.kl import KL_FNS  # noqa: E402
from rft.builtin.policy_loss import clipped_value_loss, ppo_policy_loss  # noqa: E402

torch.set_num_threads(1)

TOL = {"atol": 1e-6, "rtol": 1e-6}
SETTINGS = settings(max_examples=40, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
FEW = settings(SETTINGS, max_examples=20)
AGG_MODES = list(ops.LOSS_AGG_MODES)
VERL_KL_NAMES = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3",
                 "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+"]


def close(ours: torch.Tensor, theirs: torch.Tensor | float) -> None:
    theirs = torch.as_tensor(theirs, dtype=torch.float64)
    torch.testing.assert_close(ours.to(torch.float64), theirs.to(torch.float64), **TOL)


# --------------------------------------------------------------------------------------
# Random batches
# --------------------------------------------------------------------------------------


@dataclass
class Batch:
    B: int
    T: int
    gen: torch.Generator
    mask: torch.Tensor  # (B, T) float64 0/1
    groups: np.ndarray  # (B,) string labels, veRL style

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*(shape or (self.B, self.T)), generator=self.gen,
                           dtype=torch.float64) * scale


@st.composite
def batches(draw: st.DrawFn, max_b: int = 12, max_t: int = 16, min_tokens: int = 0) -> Batch:
    B = draw(st.integers(1, max_b))
    T = draw(st.integers(1, max_t))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["prefix", "random", "full"]))
    if kind == "full":
        mask = torch.ones(B, T, dtype=torch.float64)
    elif kind == "prefix":  # right padding: a response of length 0 … T
        lengths = torch.randint(0, T + 1, (B,), generator=gen)
        mask = (torch.arange(T) < lengths[:, None]).to(torch.float64)
    else:  # holes: multi-turn observation tokens
        mask = (torch.rand(B, T, generator=gen) < 0.6).to(torch.float64)
    if draw(st.booleans()):  # force some empty responses
        mask[torch.rand(B, generator=gen) < 0.3] = 0.0
    if mask.sum() < min_tokens:
        mask.view(-1)[:min_tokens] = 1.0
    num_groups = draw(st.integers(1, B))
    labels = torch.randint(0, num_groups, (B,), generator=gen).numpy()
    groups = np.array([f"uid-{g}" for g in labels], dtype=object)
    return Batch(B, T, gen, mask, groups)


def rewards_for(batch: Batch, kind: str) -> torch.Tensor:
    """Token-level rewards ``(B, T)``: outcome 0/1 on the last token (constant groups are
    common), continuous dense rewards, or one constant everywhere."""
    if kind == "binary":
        rewards = torch.zeros(batch.B, batch.T, dtype=torch.float64)
        rewards[:, -1] = (torch.rand(batch.B, generator=batch.gen) < 0.5).to(torch.float64)
        return rewards
    if kind == "constant":
        return torch.full((batch.B, batch.T), 0.25, dtype=torch.float64)
    return batch.randn()


REWARD_KINDS = st.sampled_from(["binary", "continuous", "constant"])


def logps(batch: Batch, scale: float) -> torch.Tensor:
    return -batch.randn().abs() * scale


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
    ours = entropy_bonus(ops.entropy_from_logits(logits), batch.mask, entropy_coef=coef,
                         loss_agg_mode=mode)
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
    ours = KL_FNS[name](logp, ref_logp)
    ref = core_algos.kl_penalty(logp, ref_logp, name)
    close(ours, ref)
    weights = batch.randn()
    g_ours = torch.autograd.grad((ours * weights).sum(), (logp, ref_logp))
    g_ref = torch.autograd.grad((ref * weights).sum(), (logp, ref_logp))
    for a, b in zip(g_ours, g_ref, strict=True):
        close(a, b)


def test_kl_none_is_zero() -> None:
    logp = torch.randn(3, 4, dtype=torch.float64)
    assert torch.all(KL_FNS["none"](logp, logp - 1) == 0)


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
    pg_loss, metrics = ppo_policy_loss(new, old, advantages, batch.mask, clip_range=clip,
                                       clip_range_low=low, clip_range_high=high,
                                       clip_ratio_c=clip_ratio_c)
    ours = ops.agg_loss(pg_loss, batch.mask, mode, **info)
    for key in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
        close(metrics[key], ref_metrics[f"actor/{key}"])
    if torch.isnan(ref):
        assert batch.mask.sum() == 0 and ours.item() == 0.0
        return
    close(ours, ref)
    (g_ours,) = torch.autograd.grad(ours, new)
    (g_ref,) = torch.autograd.grad(ref, new)
    close(g_ours, g_ref)


def test_ppo_rejects_clip_ratio_c_at_most_one() -> None:
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_policy_loss(x, x, x, x + 1, clip_ratio_c=1.0)


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


# --------------------------------------------------------------------------------------
# Advantages
# --------------------------------------------------------------------------------------


def _pair(ours: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor]) -> None:
    close(ours[0], ref[0])
    close(ours[1], ref[1])


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS, st.booleans(), st.sampled_from([1e-6, 1e-2]))
def test_grpo(batch: Batch, kind: str, norm_by_std: bool, epsilon: float) -> None:
    """GRPO and Dr.GRPO (``norm_adv_by_std_in_grpo=False``), singletons (``μ=0, σ=1``)
    and constant-reward groups included; labels as strings (veRL's uids) and as a tensor."""
    rewards = rewards_for(batch, kind)
    ref = core_algos.compute_grpo_outcome_advantage(
        rewards.clone(), batch.mask, batch.groups, epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_by_std)
    _pair(adv.grpo_advantages(rewards, batch.mask, batch.groups, epsilon, norm_by_std), ref)
    tensor_ids = adv.group_ids(batch.groups) * 3 + 5  # non-contiguous integer ids
    _pair(adv.grpo_advantages(rewards, batch.mask, tensor_ids, epsilon, norm_by_std), ref)


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS)
def test_rloo(batch: Batch, kind: str) -> None:
    """RLOO (veRL's loop version ``rloo``: a singleton keeps its raw score)."""
    rewards = rewards_for(batch, kind)
    ref = core_algos.compute_rloo_outcome_advantage(rewards.clone(), batch.mask, batch.groups)
    _pair(adv.rloo_advantages(rewards, batch.mask, batch.groups), ref)


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS)
def test_opo(batch: Batch, kind: str) -> None:
    """OPO's length-weighted baseline.

    Divergence: when every response of a group (of two or more) is empty, veRL's baseline
    is 0/0 = NaN, which the zero mask does not remove (NaN·0 = NaN); rft's baseline is 0
    there, so those rows are 0. Checked explicitly; all other rows must match."""
    rewards = rewards_for(batch, kind)
    ref_adv, ref_ret = core_algos.compute_opo_outcome_advantage(
        rewards.clone(), batch.mask, batch.groups)
    ours, returns = adv.opo_advantages(rewards, batch.mask, batch.groups)
    nan_rows = torch.isnan(ref_adv).any(dim=-1)
    if nan_rows.any():
        event("veRL NaN rows (all-empty group)")
        assert torch.all(batch.mask[nan_rows] == 0)
        assert torch.all(ours[nan_rows] == 0)
    close(ours[~nan_rows], ref_adv[~nan_rows])
    close(returns[~nan_rows], ref_ret[~nan_rows])


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS)
def test_reinforce_plus_plus_baseline(batch: Batch, kind: str) -> None:
    """REINFORCE++-baseline. veRL raises ValueError when the batch has fewer than two
    masked tokens (unbiased variance); rft raises the same."""
    rewards = rewards_for(batch, kind)
    try:
        ref = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(
            rewards.clone(), batch.mask, batch.groups)
    except ValueError:
        event("veRL raises: < 2 masked tokens")
        with pytest.raises(ValueError):
            adv.reinforce_plus_plus_baseline_advantages(rewards, batch.mask, batch.groups)
        return
    _pair(adv.reinforce_plus_plus_baseline_advantages(rewards, batch.mask, batch.groups), ref)


@SETTINGS
@given(batches(), REWARD_KINDS, st.sampled_from([1.0, 0.99, 0.5]))
def test_reinforce_plus_plus(batch: Batch, kind: str, gamma: float) -> None:
    """REINFORCE++ discounted returns carried across observation tokens, whitened.
    Fewer than two masked tokens: both raise ValueError."""
    rewards = rewards_for(batch, kind)
    config = OmegaConf.create({"gamma": gamma})
    try:
        ref = core_algos.compute_reinforce_plus_plus_outcome_advantage(
            rewards.clone(), batch.mask, config=config)
    except ValueError:
        with pytest.raises(ValueError):
            adv.reinforce_plus_plus_advantages(rewards, batch.mask, gamma)
        return
    _pair(adv.reinforce_plus_plus_advantages(rewards, batch.mask, gamma), ref)


@SETTINGS
@given(batches(), REWARD_KINDS, st.sampled_from([1.0, 0.99]), st.sampled_from([1.0, 0.95, 0.0]))
def test_gae(batch: Batch, kind: str, gamma: float, lam: float) -> None:
    """GAE skipping unmasked tokens; whitening (padding included, as veRL). Fewer than two
    masked tokens: both raise ValueError."""
    rewards = rewards_for(batch, kind)
    values = batch.randn()
    try:
        ref = core_algos.compute_gae_advantage_return(rewards, values, batch.mask, gamma, lam)
    except ValueError:
        with pytest.raises(ValueError):
            adv.gae_advantages(rewards, values, batch.mask, gamma, lam)
        return
    _pair(adv.gae_advantages(rewards, values, batch.mask, gamma, lam), ref)


@SETTINGS
@given(batches(), REWARD_KINDS)
def test_remax(batch: Batch, kind: str) -> None:
    rewards = rewards_for(batch, kind)
    baselines = batch.randn(batch.B)
    ref = core_algos.compute_remax_outcome_advantage(rewards, baselines, batch.mask)
    _pair(adv.remax_advantages(rewards, baselines, batch.mask), ref)
