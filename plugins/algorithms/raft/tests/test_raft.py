"""rft-plugin-raft: the advantage and policy-loss contracts, hand-computed cases (veRL
0.9.1 has no RAFT), the preset after validation and a tiny run."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs, AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.checks import check_advantage, check_policy_loss
from rft.testing.strategies import advantage_inputs, policy_loss_inputs
from rft_plugin_raft import RAFTArgs, raft_advantages, raft_policy_loss

torch.set_num_threads(1)


@SETTINGS
@given(advantage_inputs(), st.sampled_from([1.0, 0.0, -0.5]), st.booleans())
def test_raft_selection_keeps_the_advantage_contract(inputs: AdvantageInputs, threshold: float,
                                                     best: bool) -> None:
    """Finite (B, T), zero on padding, no gradient, and 0/1 on the response tokens: 1
    exactly for rows whose reward passes the threshold (and is their group's best)."""
    args = RAFTArgs(reward_threshold=threshold, best_of_group=best)
    advantages, _ = check_advantage(raft_advantages, args, inputs)
    scores = inputs.token_level_rewards.sum(-1)  # (B,)
    rows = advantages.max(dim=-1).values  # (B,)
    alive = inputs.response_mask.sum(-1) > 0
    assert set(advantages.unique().tolist()) <= {0.0, 1.0}
    assert torch.all((rows[alive] == 1) <= (scores[alive] >= threshold))
    if not best:
        assert torch.equal(rows[alive] == 1, scores[alive] >= threshold)


@SETTINGS
@given(policy_loss_inputs(advantage_kinds=("sequence", "zero")))
def test_raft_loss_keeps_the_policy_loss_contract(inputs: PolicyLossInputs) -> None:
    """Masked positions do not count, zero advantages (nothing selected) give zero loss,
    micro-batches add up in every agg mode."""
    check_policy_loss(raft_policy_loss, None, inputs)


def test_selection_by_hand() -> None:
    rewards = torch.zeros(5, 2, dtype=torch.float64)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.5, 1.0, 2.0])
    mask = torch.ones(5, 2, dtype=torch.float64)
    inputs = AdvantageInputs(rewards, mask, ["a", "a", "b", "b", "b"])
    plain, returns = raft_advantages(inputs, RAFTArgs())
    assert plain[:, 0].tolist() == [1.0, 0.0, 0.0, 1.0, 1.0] and returns is plain
    best, _ = raft_advantages(inputs, RAFTArgs(reward_threshold=0.0, best_of_group=True))
    assert best[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_loss_is_the_nll_of_the_selected_rows() -> None:
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    pg_loss, metrics = raft_policy_loss(
        PolicyLossInputs(logp, logp.detach(), adv, mask, AggContext()), None)
    assert pg_loss.flatten().tolist() == [1.0, 2.0, 0.0, 0.0]
    assert metrics["selected_frac"].item() == pytest.approx(0.5)
    assert metrics["sft_loss"].item() == pytest.approx(1.5)


# ---- preset, registry and a tiny run ---------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind in ("algorithm", "advantage_fn", "policy_loss_fn"):
        assert registry.registration(kind, "raft").distribution == "rft-plugin-raft"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "raft"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("raft", "raft", "none", "none", "none", "default", 1)
    args = plan.loss.advantage.args
    assert (args.reward_threshold, args.best_of_group) == (1.0, False)
    assert not plan.preset.use_reference and not plan.preset.train_only


def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    """The tiny model's reward is 0, below the default threshold: with threshold 0 every
    rollout is selected and the run fine-tunes on them."""
    outcome = rft_run({"algorithm.algorithm_type": "raft",
                       "algorithm.advantage_fn_args": {"reward_threshold": 0.0}})
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert step["actor/selected_frac"] == pytest.approx(1.0)
        assert step["actor/grad_norm"] > 0
