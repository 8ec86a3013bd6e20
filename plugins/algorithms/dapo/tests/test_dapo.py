"""rft-plugin-dapo: the ``overlong_penalty`` operator by hand, the preset after
validation (DAPO is a preset over ``grpo`` and the core's ``ppo``, whose veRL equality is
tested where they live), and a tiny run through the experience pipeline."""

from __future__ import annotations

import math

import pytest
import torch

from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.testing.algorithms import validated
from rft.testing.runs import TextRewardPlugin
from rft_plugin_dapo import OverlongPenalty, OverlongPenaltyArgs, overlong_penalty

torch.set_num_threads(1)


def test_overlong_penalty_by_hand() -> None:
    """L_max = 10, L_cache = 4: free up to 6 tokens, then −¼ per token, −1 beyond 10."""
    args = OverlongPenaltyArgs(max_response_length=10, cache_length=4)
    assert [overlong_penalty(n, args) for n in (0, 5, 6, 7, 8, 10, 11, 50)] == [
        0.0, 0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0]
    half = OverlongPenaltyArgs(max_response_length=10, cache_length=4, penalty_factor=0.5)
    assert overlong_penalty(8, half) == -0.25


def _experience(response: int, reward: float | None = 1.0, token_level: bool = False,
                run: int = 0) -> Experience:
    tokens = torch.arange(3 + response)
    levels = torch.zeros(response) if token_level else None
    return Experience(tokens=tokens, prompt_length=3, reward=None if token_level else reward,
                      token_level_reward=levels, eid=EID(batch=0, task=0, run=run))


def test_operator_shapes_rewards() -> None:
    operator = OverlongPenalty(OverlongPenaltyArgs(max_response_length=10, cache_length=4))
    short, long_, dense, unscored = (_experience(5), _experience(8, run=1),
                                     _experience(12, token_level=True, run=2),
                                     _experience(9, reward=None, run=3))
    out, metrics = operator.process([short, long_, dense, unscored])
    assert out == [short, long_, dense, unscored]
    assert (short.reward, long_.reward, unscored.reward) == (1.0, 0.5, None)
    assert dense.token_level_reward[-1].item() == -1.0 and dense.token_level_reward[:-1].sum() == 0
    assert long_.metrics["overlong_penalty"] == -0.5 and "overlong_penalty" not in unscored.metrics
    assert metrics == {"penalized": 2.0, "mean_penalty": pytest.approx(-1.5 / 4)}


def test_operator_rejects_a_cache_longer_than_the_limit() -> None:
    with pytest.raises(ValueError, match="cache_length < max_response_length"):
        OverlongPenalty(OverlongPenaltyArgs(max_response_length=4, cache_length=4))


# ---- preset, registry and a tiny run ---------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "dapo").distribution == "rft-plugin-dapo"
    assert (registry.registration("experience_operator", "overlong_penalty").distribution
            == "rft-plugin-dapo")


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "dapo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "ppo", "none", "none", "default", "default", 16)
    args = plan.loss.policy_loss.args
    assert (args.clip_range, args.clip_range_low, args.clip_range_high) == (0.2, 0.2, 0.28)
    assert plan.loss.loss_agg_mode == "token-mean"
    assert not plan.preset.use_reference and not plan.preset.use_critic


def test_user_clip_values_merge_with_the_preset(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "dapo", "repeat_times": 4,
                                 "policy_loss_fn_args": {"clip_range_high": 0.3}}, str(tmp_path))
    args = plan.loss.policy_loss.args
    assert (algorithm.repeat_times, args.clip_range_low, args.clip_range_high) == (4, 0.2, 0.3)




def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    """DAPO with its overlong penalty in the experience pipeline (responses of at most 8
    tokens; the penalty starts after 2)."""
    outcome = rft_run({
        "algorithm.algorithm_type": "dapo", "algorithm.repeat_times": 2,
        "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward",
        "data_processor": {"experience_pipeline": {"operators": [
            {"name": "overlong_penalty",
             "args": {"max_response_length": 6, "cache_length": 4}}]}}},
        plugins=[TextRewardPlugin()])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert step["pipeline/overlong_penalty/mean_penalty"] <= 0.0
    assert any(step["actor/grad_norm"] > 0 for step in outcome.metrics)
