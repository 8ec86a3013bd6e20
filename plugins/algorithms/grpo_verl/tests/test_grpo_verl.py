"""rft-plugin-grpo-verl: the preset is GRPO's after validation, the ``grpo_verl``
advantage is rft-plugin-grpo's ``grpo`` and equals veRL 0.9.1's
``compute_grpo_outcome_advantage`` (float64, hypothesis, the kit's tolerance
``atol = rtol = 1e-6``), and a tiny run."""

from __future__ import annotations

import math

import torch
from hypothesis import given

from rft.contracts import AdvantageInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import FEW, validated
from rft.testing.runs import TextRewardPlugin
from rft.testing.checks import assert_equals_verl
from rft.testing.strategies import advantage_inputs
from rft_plugin_grpo import GRPOArgs, grpo_advantages

torch.set_num_threads(1)

GRPO_VERL = PluginRegistry.create().get("advantage_fn", "grpo_verl")
"""What ``advantage_fn: grpo_verl`` selects."""


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "grpo_verl").distribution == "rft-plugin-grpo-verl"
    registration = registry.registration("advantage_fn", "grpo_verl")
    assert registration.distribution == "rft-plugin-grpo-verl"
    assert registration.implementation is grpo_advantages


@FEW
@given(advantage_inputs())
def test_grpo_verl_advantage_equals_verl(inputs: AdvantageInputs) -> None:
    """The function the name selects, against veRL, with Trinity's ``epsilon`` 1e-6
    (the full property tests of ``grpo`` live in rft-plugin-grpo)."""
    assert_equals_verl(GRPO_VERL, GRPOArgs(), "compute_grpo_outcome_advantage", inputs, epsilon=1e-6)


def test_preset_is_grpo(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "grpo_verl"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "ppo", "k2", "none", "default", "default", 2)
    grpo = PluginRegistry.create().get("algorithm", "grpo")
    assert plan.preset == grpo
    assert plan.preset.use_reference and not plan.preset.advantage_in_explorer




def test_the_loss_moves_the_tiny_model(rft_run) -> None:
    outcome = rft_run({"algorithm.algorithm_type": "grpo_verl",
                       "algorithm.advantage_fn": "grpo_verl",
                       "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward"},
                      plugins=[TextRewardPlugin()])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert all(math.isfinite(v) for v in step.values()), step
        assert "actor/pg_clipfrac" in step
    assert any(step["actor/grad_norm"] > 0 for step in outcome.metrics)
