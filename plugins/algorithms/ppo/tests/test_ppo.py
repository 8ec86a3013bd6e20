"""rft-plugin-ppo: GAE equals veRL 0.9.1 (hypothesis, float64), a hand-computed case,
the preset after validation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs
from rft.errors import RftError
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, validated
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_ppo import GAEArgs, gae_advantages

torch.set_num_threads(1)

GAMMAS = st.sampled_from([1.0, 0.99])
LAMBDAS = st.sampled_from([1.0, 0.95, 0.0])


@SETTINGS
@given(advantage_inputs(max_b=12, values=True), GAMMAS, LAMBDAS)
def test_gae_keeps_the_advantage_contract(inputs: AdvantageInputs, gamma: float,
                                          lam: float) -> None:
    """Finite (B, T), no gradient, inputs untouched. ``zero_at_masked=False``: as veRL,
    the advantages are whitened on every position, padding included, and the returns are
    ``Â + V`` everywhere; no loss reads a masked position. Whitening needs two masked
    tokens (it raises ValueError otherwise, like veRL)."""
    assume(inputs.response_mask.sum() >= 2)
    check_advantage(gae_advantages, GAEArgs(gamma=gamma, lam=lam), inputs, zero_at_masked=False)


@SETTINGS
@given(advantage_inputs(max_b=12, values=True), GAMMAS, LAMBDAS)
def test_gae_equals_verl(inputs: AdvantageInputs, gamma: float, lam: float) -> None:
    """GAE skipping unmasked tokens; whitening (padding included, as veRL). Fewer than two
    masked tokens: both raise ValueError."""
    assert_equals_verl(gae_advantages, GAEArgs(gamma=gamma, lam=lam),
                       "compute_gae_advantage_return", inputs, gamma=gamma, lam=lam)


def test_gae_returns_by_hand() -> None:
    """λ = 1, γ = 1: returns are rewards-to-go whatever the values; a hole is skipped."""
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]], dtype=torch.float64)
    values = torch.tensor([[0.3, -0.2, 0.5], [0.1, 0.4, 0.9]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    _, returns = gae_advantages(AdvantageInputs(rewards, mask, [0, 1], values=values), GAEArgs())
    assert returns[0, [0, 2]].tolist() == pytest.approx([1.0, 1.0])
    assert returns[1, :2].tolist() == pytest.approx([2.0, 2.0])


def test_gae_without_values_names_the_critic() -> None:
    inputs = AdvantageInputs(torch.zeros(2, 3), torch.ones(2, 3), [0, 1])
    with pytest.raises(RftError, match=r"^gae needs values, .*use_critic"):
        gae_advantages(inputs, GAEArgs())


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "ppo").distribution == "rft-plugin-ppo"
    for name in ("ppo", "gae"):
        assert registry.registration("advantage_fn", name).distribution == "rft-plugin-ppo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "ppo",
                                       "advantage_fn_args": {"lam": 0.95}}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("ppo", "ppo", "k2", "none", "default", "default", 1)
    args = plan.loss.advantage.args
    assert (args.gamma, args.lam) == (1.0, 0.95)
    assert plan.preset.use_critic and plan.preset.use_reference
