"""rft-plugin-rec: the advantage and policy-loss contracts; equality with veRL 0.9.1
where REC reduces to one of its functions (float64, hypothesis, the kit's tolerance
``atol = rtol = 1e-6``): the advantage without std or drop is GRPO without the std, the
loss without clipping or weighting is ``gpg``, and one-side clipping with importance
sampling has PPO's (``vanilla``, no dual clip) gradient; hand-computed cases for the
rest; the preset after validation and a tiny run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs, AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, close, validated
from rft.testing.runs import TextRewardPlugin
from rft.testing.checks import assert_equals_verl, check_advantage, check_policy_loss
from rft.testing.strategies import advantage_inputs, policy_loss_inputs
from rft_plugin_rec import RECAdvantageArgs, RECLossArgs, rec_advantages, rec_policy_loss

torch.set_num_threads(1)

CLIP_MODES = ["none", "one-side", "gspo-one-side", "two-side", "ring"]
WEIGHTS = ["none", "importance_sampling", "gspo_importance_sampling", "advantage"]


# ---- contracts -------------------------------------------------------------------------


@SETTINGS
@given(policy_loss_inputs(), st.sampled_from(CLIP_MODES), st.sampled_from(WEIGHTS),
       st.sampled_from([("none", 0.0), ("k2", 0.1), ("forward-kl", 0.1)]))
def test_rec_loss_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, clip_mode: str,
                                                 weight: str, regularizer: tuple) -> None:
    """Masked positions do not count, finite gradients at log-ratios up to ±20, micro-
    batches add up in every agg mode (``gspo-one-side`` aggregates itself with the
    mini-batch's counts). A regulariser is not zero at zero advantages, by design."""
    name, coef = regularizer
    args = RECLossArgs(clip_mode=clip_mode, weight=weight, regularizer=name,
                       regularizer_coef=coef)
    check_policy_loss(rec_policy_loss, args, inputs, zero_advantage_zero_loss=name == "none")


@SETTINGS
@given(advantage_inputs(), st.booleans(), st.sampled_from([None, "balance"]))
def test_rec_advantage_keeps_the_contract(inputs: AdvantageInputs, std_normalize: bool,
                                          drop: str | None) -> None:
    """Finite (B, T), zero on padding, no gradient; without dropping, invariant to a
    constant added to a group's rewards, and with the std also to scaling them
    (singletons have a fixed baseline and are left out by the check). Dropping decides
    below / above the mean, where a shift can move a tie, so it is checked without the
    invariances."""
    args = RECAdvantageArgs(std_normalize=std_normalize, drop=drop)
    plain = drop is None
    check_advantage(rec_advantages, args, inputs, shift_invariant=plain,
                    scale_invariant=plain and std_normalize)


# ---- veRL ------------------------------------------------------------------------------


@SETTINGS
@given(advantage_inputs())
def test_rec_advantage_equals_verl_dr_grpo(inputs: AdvantageInputs) -> None:
    """Without std normalisation or dropping, REC's baseline is the group mean (0 for a
    singleton): veRL's GRPO with ``norm_adv_by_std_in_grpo=False``."""
    assert_equals_verl(rec_advantages, RECAdvantageArgs(), "compute_grpo_outcome_advantage",
                       inputs, norm_adv_by_std_in_grpo=False)


@SETTINGS
@given(policy_loss_inputs())
def test_plain_rec_loss_equals_verl_gpg(inputs: PolicyLossInputs) -> None:
    """No clipping, no weighting, no regulariser: ``−A · log π``, veRL's ``gpg`` loss
    (value and gradient, every agg mode, with and without a mini-batch's counts)."""
    assert_equals_verl(rec_policy_loss, RECLossArgs(), "gpg", inputs, config={})


@SETTINGS
@given(policy_loss_inputs(), st.sampled_from([0.2, 0.05]))
def test_one_side_is_has_the_ppo_gradient(inputs: PolicyLossInputs, eps: float) -> None:
    """One-side clipping with importance sampling keeps exactly the tokens PPO's clipped
    surrogate passes a gradient to, weighted by the ratio: the gradient of veRL's
    ``vanilla`` loss without the dual clip (``clip_ratio_c`` huge). The values differ
    (REC's loss is linear in ``log π``)."""
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    log_prob = inputs.log_prob.detach().clone().requires_grad_()
    pg_loss, _ = rec_policy_loss(
        PolicyLossInputs(log_prob, inputs.old_log_prob, inputs.advantages,
                         inputs.response_mask, inputs.agg),
        RECLossArgs(epsilon_low=eps, epsilon_high=eps, clip_mode="one-side",
                    weight="importance_sampling"))
    ours = inputs.agg(pg_loss, inputs.response_mask)
    info = {k: v for k, v in inputs.agg.kwargs().items() if v is not None}
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                         clip_ratio_low=eps, clip_ratio_high=eps, clip_ratio_c=1e9,
                         global_batch_info=info)
    theirs, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=inputs.old_log_prob, log_prob=log_prob, advantages=inputs.advantages,
        response_mask=inputs.response_mask, loss_agg_mode=inputs.agg.mode, config=config)
    if torch.isnan(theirs):  # veRL on an all-empty micro-batch without global counts
        assert inputs.response_mask.sum() == 0
        return
    (g_ours,) = torch.autograd.grad(ours, log_prob, allow_unused=True)
    (g_theirs,) = torch.autograd.grad(theirs, log_prob)
    close(torch.zeros_like(log_prob) if g_ours is None else g_ours, g_theirs)


# ---- by hand ---------------------------------------------------------------------------


def test_balance_drop_by_hand() -> None:
    """Group a: rewards 1, 0, 0, 0 (one above the mean ¼, three below): two of the three
    below are dropped at random, the baseline is the mean of the two kept (½). Group b
    is a singleton: baseline 0."""
    rewards = torch.zeros(5, 1, dtype=torch.float64)
    rewards[:, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0])
    mask = torch.ones(5, 1, dtype=torch.float64)
    inputs = AdvantageInputs(rewards, mask, ["a", "a", "a", "a", "b"])
    advantages, returns = rec_advantages(inputs, RECAdvantageArgs(drop="balance"))
    column = advantages[:, 0].tolist()
    assert column[0] == 0.5 and column[4] == 3.0 and returns is advantages
    assert sorted(column[1:4]) == [-0.5, 0.0, 0.0]
    again, _ = rec_advantages(inputs, RECAdvantageArgs(drop="balance"))
    assert torch.equal(again, advantages)  # the seed makes the choice repeatable
    normed, _ = rec_advantages(inputs, RECAdvantageArgs(drop="balance", std_normalize=True))
    assert normed[0, 0].item() == pytest.approx(0.5 / (0.5 + 1e-6))  # population std ½
    plain, _ = rec_advantages(inputs, RECAdvantageArgs())
    assert plain[:, 0].tolist() == [0.75, -0.25, -0.25, -0.25, 3.0]


def _loss_grad(args: RECLossArgs, ratios: list[float], adv: list[float]
               ) -> tuple[list[float], dict]:
    logp = torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float64,
                        requires_grad=True)
    inputs = PolicyLossInputs(logp, torch.zeros_like(logp.detach()),
                              torch.tensor([adv], dtype=torch.float64),
                              torch.ones_like(logp.detach()), AggContext())
    pg_loss, metrics = rec_policy_loss(inputs, args)
    (grad,) = torch.autograd.grad(pg_loss.sum(), logp)
    return grad[0].tolist(), metrics


RATIOS = [2.0, 0.5, 1.1, 0.3, 3.5]
ADV = [1.0, -1.0, 1.0, 1.0, -1.0]


@pytest.mark.parametrize(("clip_mode", "kept"), [
    ("none", [1, 1, 1, 1, 1]),
    ("two-side", [0, 0, 1, 0, 0]),
    ("one-side", [0, 0, 1, 1, 1]),         # A > 0: r ≤ 1.2; A < 0: r ≥ 0.8
    ("ring", [0, 0, 1, 1, 1]),             # + A ≥ 0 with r ≤ 0.4, A ≤ 0 with r ≥ 3
])
def test_clip_modes_by_hand(clip_mode: str, kept: list[int]) -> None:
    grad, metrics = _loss_grad(RECLossArgs(clip_mode=clip_mode), RATIOS, ADV)
    assert grad == pytest.approx([-a * k for a, k in zip(ADV, kept, strict=True)])
    assert metrics["pg_clipfrac"].item() == pytest.approx(1 - sum(kept) / 5)


def test_weights_and_regularizers_by_hand() -> None:
    grad, _ = _loss_grad(RECLossArgs(weight="importance_sampling"), RATIOS, ADV)
    assert grad == pytest.approx([-a * r for a, r in zip(ADV, RATIOS, strict=True)])
    grad, _ = _loss_grad(RECLossArgs(weight="advantage", temp=2.0), RATIOS, ADV)
    assert grad == pytest.approx([-a * math.exp(a / 2) for a in ADV])
    seq = math.exp(sum(math.log(r) for r in RATIOS) / 5)  # the geometric-mean ratio
    grad, _ = _loss_grad(RECLossArgs(weight="gspo_importance_sampling"), RATIOS, ADV)
    assert grad == pytest.approx([-a * seq for a in ADV])
    zero = [0.0] * 5
    grad, _ = _loss_grad(RECLossArgs(regularizer="forward-kl", regularizer_coef=0.1),
                         RATIOS, zero)
    assert grad == pytest.approx([-0.1] * 5)
    grad, _ = _loss_grad(RECLossArgs(regularizer="k2", regularizer_coef=0.1), RATIOS, zero)
    assert grad == pytest.approx([0.2 * math.log(r) for r in RATIOS])


def test_gspo_one_side_aggregates_per_sequence() -> None:
    """Sequence ratios e^0.1 (kept for A > 0 only if ≤ 1 + ε_h) — two rows of lengths 1
    and 2: the loss is the mean over rows of each row's token mean, whatever the
    trainer's mode."""
    logp = torch.tensor([[-1.0, 0.0], [-2.0, -4.0]], dtype=torch.float64, requires_grad=True)
    old = logp.detach() - 0.1
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 0.0], [-2.0, -2.0]], dtype=torch.float64)
    inputs = PolicyLossInputs(logp, old, adv, mask, AggContext("token-sum"))
    loss, _ = rec_policy_loss(inputs, RECLossArgs(clip_mode="gspo-one-side",
                                                  epsilon_high=0.2))
    assert loss.dim() == 0
    assert loss.item() == pytest.approx((1.0 * 1.0 + (-2.0 * 2 - 4.0 * 2) / 2) / 2)
    loss, metrics = rec_policy_loss(inputs, RECLossArgs(clip_mode="gspo-one-side",
                                                        epsilon_high=0.05))
    assert loss.item() == pytest.approx((-6.0) / 2)  # row 0 (A > 0, s = e^0.1) clipped
    assert metrics["pg_clipfrac"].item() == pytest.approx(1 / 3)


def test_rejects_bad_arguments() -> None:
    inputs = PolicyLossInputs(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1),
                              torch.ones(1, 1), AggContext())
    with pytest.raises(ValueError, match="epsilon_low must be in"):
        rec_policy_loss(inputs, RECLossArgs(epsilon_low=1.5))
    with pytest.raises(ValueError, match="clip_mode must be one of"):
        rec_policy_loss(inputs, RECLossArgs(clip_mode="both"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="drop must be"):
        rec_advantages(AdvantageInputs(torch.zeros(1, 1), torch.ones(1, 1), np.array(["a"])),
                       RECAdvantageArgs(drop="all"))  # type: ignore[arg-type]


# ---- preset, registry and a tiny run ---------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind in ("algorithm", "advantage_fn", "policy_loss_fn"):
        assert registry.registration(kind, "rec").distribution == "rft-plugin-rec"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "rec"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("rec", "rec", "k2", "none", "default", "default", 2)
    loss, adv = plan.loss.policy_loss.args, plan.loss.advantage.args
    assert (loss.clip_mode, loss.weight, loss.regularizer, loss.epsilon_low_prime,
            loss.epsilon_high_prime) == ("none", "none", "none", 0.6, 2.0)
    assert (adv.std_normalize, adv.drop, adv.epsilon) == (False, None, 1e-6)
    assert plan.preset.use_reference and not plan.preset.use_critic


def test_trinity_example_validates(tmp_path) -> None:
    """The REC-OneSide-NoIS settings of Trinity-RFT's rec_gsm8k example."""
    _, plan = validated({"algorithm_type": "rec", "repeat_times": 8,
                         "policy_loss_fn_args": {"epsilon_low": 0.2, "epsilon_high": 0.2,
                                                 "clip_mode": "one-side", "weight": "none"},
                         "advantage_fn_args": {"std_normalize": False},
                         "kl_loss_fn_args": {"kl_coef": 0.0}}, str(tmp_path))
    assert plan.loss.policy_loss.args.clip_mode == "one-side"




def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "rec",
                       "algorithm.policy_loss_fn_args": {"clip_mode": "one-side"},
                       "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward"},
                      plugins=[TextRewardPlugin()])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert "actor/pg_clipfrac" in step
    assert any(step["actor/grad_norm"] > 0 for step in outcome.metrics)
