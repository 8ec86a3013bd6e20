"""The core's built-in loss-path functions keep the plugin contracts, checked with the
kit rft ships for plugin authors (:mod:`rft.testing.strategies`,
:mod:`rft.testing.checks`): the ``ppo`` policy loss, every KL estimator and both entropy
terms (``mix`` with expert rows). Their equality with veRL is ``tests/test_verl_equivalence.py``."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.builtin.entropy import EntropyArgs, entropy_bonus, no_entropy, rollout_entropy_bonus
from rft.builtin.kl import KL_FNS, KLArgs
from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.contracts import EntropyInputs, KLInputs, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS
from rft.testing.checks import check_entropy, check_kl, check_policy_loss
from rft.testing.references import ClippedSurrogate
from rft.testing.strategies import entropy_inputs, kl_inputs, policy_loss_inputs

torch.set_num_threads(1)

NONNEGATIVE = {"abs", "k2", "mse", "k3", "low_var_kl"}
"""Estimators whose value is ``≥ 0`` (their ``+`` variants share the value)."""


@SETTINGS
@given(policy_loss_inputs(),
       st.sampled_from([(0.2, None, None), (0.2, 0.2, 0.28), (0.1, 0.3, 0.05)]),
       st.sampled_from([1.5, 3.0, 10.0]))
def test_ppo_keeps_the_policy_loss_contract(inputs: PolicyLossInputs, clips: tuple,
                                            clip_ratio_c: float) -> None:
    """Dual-clip surrogate: masking, finite gradients at log-ratios up to ±20 (the
    ±20 clamp), zero loss and gradient for zero advantages, micro-batches add up in every
    agg mode; and its maths equal the kit's independent reference (clip region, gradient
    sign, values, gradients, metrics)."""
    clip, low, high = clips
    check_policy_loss(ppo_policy_loss, PPOArgs(clip_range=clip, clip_range_low=low,
                                               clip_range_high=high, clip_ratio_c=clip_ratio_c),
                      inputs, reference=ClippedSurrogate(clip, low, high,
                                                         clip_ratio_c=clip_ratio_c))


@pytest.mark.parametrize("name", sorted(KL_FNS))
@SETTINGS
@given(inputs=kl_inputs())
def test_every_kl_estimator_keeps_the_contract(name: str, inputs: KLInputs) -> None:
    """(B, T), finite values and gradients (k3's clamps at ±20 / ±10 included), 0 where
    the two log-probs agree; non-negative where the estimator is."""
    check_kl(KL_FNS[name], KLArgs(), inputs, nonnegative=name.rstrip("+") in NONNEGATIVE)


@SETTINGS
@given(entropy_inputs(), st.sampled_from([0.0, 0.003, 1.0]))
def test_entropy_terms_keep_the_contract(inputs: EntropyInputs, coef: float) -> None:
    """0-dim, finite, masked positions have no effect, micro-batches add up."""
    check_entropy(entropy_bonus, EntropyArgs(entropy_coef=coef), inputs)
    check_entropy(no_entropy, None, inputs)
    rows = inputs.response_mask.shape[0]
    expert = torch.arange(rows) % 2 == 1  # every other row is expert data
    check_entropy(rollout_entropy_bonus, EntropyArgs(entropy_coef=coef),
                  dataclasses.replace(inputs, is_expert_mask=expert))


def test_every_registered_builtin_is_checked() -> None:
    """A new built-in loss-path function must be added to this module."""
    registry = PluginRegistry.create(autoload=False)
    assert set(registry.names("policy_loss_fn")) == {"ppo"}
    assert set(registry.names("kl_fn")) == set(KL_FNS)
    assert set(registry.names("entropy_loss_fn")) == {"default", "mix", "none"}
