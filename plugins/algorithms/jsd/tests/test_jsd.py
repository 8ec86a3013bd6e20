"""rft-plugin-jsd: the per-token JSD by hand and its properties (zero at equality,
non-negative, summed over a vocabulary it is the generalised JSD of the two
distributions), the advantage fn and its contract, the preset after validation, a tiny
run with an auxiliary teacher. veRL 0.9.1 has no JSD advantage, so there is no veRL comparison."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs, MissingInputError
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, close, validated
from rft.testing.checks import check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_jsd import JSDArgs, jsd_advantages, jsd_per_token

torch.set_num_threads(1)

LOGPS = st.lists(st.tuples(st.floats(-30, 0), st.floats(-30, 0)), min_size=1, max_size=10)
LAMBDAS = st.sampled_from([0.1, 0.5, 0.9])


def test_per_token_jsd_by_hand() -> None:
    """p_S = 1/2, p_T = 1/4, λ = 1/2: m = 3/8."""
    s, t = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    expected = 0.5 * 0.25 * math.log(0.25 / 0.375) + 0.5 * 0.5 * math.log(0.5 / 0.375)
    assert jsd_per_token(s.double(), t.double(), 0.5).item() == pytest.approx(expected)
    assert jsd_per_token(s, t, 0.0).item() == 0.0 and jsd_per_token(s, t, 1.0).item() == 0.0


@SETTINGS
@given(LOGPS, LAMBDAS)
def test_per_token_jsd_properties(pairs: list, lam: float) -> None:
    """Zero where the log-probs agree, never negative (Jensen on ``x log x``), and
    swapping student and teacher is swapping ``λ`` and ``1 − λ``."""
    s = torch.tensor([a for a, _ in pairs], dtype=torch.float64)
    t = torch.tensor([b for _, b in pairs], dtype=torch.float64)
    jsd = jsd_per_token(s, t, lam)
    assert torch.isfinite(jsd).all() and (jsd >= -1e-12).all()
    close(jsd_per_token(s, s, lam), torch.zeros_like(s))
    close(jsd_per_token(t, s, 1 - lam), jsd)


@SETTINGS
@given(st.integers(2, 12), st.integers(0, 2**31 - 1), LAMBDAS)
def test_summed_over_the_vocabulary_it_is_the_generalised_jsd(vocab: int, seed: int,
                                                              lam: float) -> None:
    """``Σ_v JSD(log p_S(v), log p_T(v)) = λ KL(p_T ‖ m) + (1 − λ) KL(p_S ‖ m)``,
    ``m = λ p_T + (1 − λ) p_S``: the per-token terms are the divergence's summands."""
    gen = torch.Generator().manual_seed(seed)
    p_s = torch.softmax(torch.randn(vocab, generator=gen, dtype=torch.float64) * 3, 0)
    p_t = torch.softmax(torch.randn(vocab, generator=gen, dtype=torch.float64) * 3, 0)
    m = lam * p_t + (1 - lam) * p_s
    expected = lam * (p_t * (p_t / m).log()).sum() + (1 - lam) * (p_s * (p_s / m).log()).sum()
    close(jsd_per_token(p_s.log(), p_t.log(), lam).sum(), expected)


def test_advantages_are_minus_the_jsd() -> None:
    s, t = math.log(0.5), math.log(0.25)
    mask = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    inputs = AdvantageInputs(torch.zeros_like(mask), mask, ["g"],
                             rollout_log_prob=torch.tensor([[s, -1.0]], dtype=torch.float64),
                             teacher_log_prob=torch.tensor([[t, -3.0]], dtype=torch.float64))
    advantages, returns = jsd_advantages(inputs, JSDArgs(kl_coef=2.0))
    first = jsd_per_token(torch.tensor([s]).double(), torch.tensor([t]).double(), 0.5).item()
    assert advantages[0].tolist() == pytest.approx([-2.0 * first, 0.0])
    assert torch.equal(returns, advantages)


@SETTINGS
@given(advantage_inputs(), LAMBDAS)
def test_keeps_the_advantage_contract(inputs: AdvantageInputs, lam: float) -> None:
    """Finite, no gradient, zero at masked positions, never positive; the rewards play
    no part."""
    gen = torch.Generator().manual_seed(inputs.response_mask.numel())
    shape = inputs.response_mask.shape
    inputs = dataclasses.replace(
        inputs, rollout_log_prob=-torch.rand(shape, generator=gen, dtype=torch.float64) * 3,
        teacher_log_prob=-torch.rand(shape, generator=gen, dtype=torch.float64) * 3)
    advantages, _ = check_advantage(jsd_advantages, JSDArgs(lambda_coef=lam), inputs,
                                    shift_invariant=True, scale_invariant=True)
    assert (advantages <= 1e-12).all()


def test_errors() -> None:
    mask = torch.ones(1, 1, dtype=torch.float64)
    inputs = AdvantageInputs(torch.zeros_like(mask), mask, ["g"], rollout_log_prob=-mask)
    with pytest.raises(MissingInputError, match="jsd needs teacher_log_prob"):
        jsd_advantages(inputs, JSDArgs())
    with pytest.raises(ValueError, match="lambda_coef"):
        JSDArgs(lambda_coef=1.5)


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind in ("algorithm", "advantage_fn"):
        assert registry.registration(kind, "jsd").distribution == "rft-plugin-jsd"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "jsd",
                                 "advantage_fn_args": {"lambda_coef": 0.25}}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("jsd", "ppo", "none", "none", "none", "default", 8)
    assert not plan.preset.advantage_in_explorer and not plan.preset.use_reference
    assert plan.loss.advantage.args == JSDArgs(lambda_coef=0.25)


def test_a_tiny_run_distils_with_jsd(rft_run, rft_tiny_model) -> None:
    """The teacher is the initial student: no divergence before the first update."""
    outcome = rft_run({
        "algorithm.algorithm_type": "jsd", "algorithm.repeat_times": 2,
        "algorithm.advantage_fn_args": {"lambda_coef": 0.5},
        "explorer.auxiliary_models": [{"name": "teacher", "model_path": str(rft_tiny_model),
                                       "engine_type": "hf", "dtype": "float32"}],
        "buffer.explorer_input.taskset.default_workflow_type": "on_policy_distill_workflow",
        "buffer.explorer_input.taskset.workflow_args": {"teacher": "teacher"},
    })
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
    assert abs(outcome.metrics[0]["critic/advantages/min"]) < 1e-3
