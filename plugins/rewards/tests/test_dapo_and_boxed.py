"""``math_dapo_reward`` (DAPO's ±1 outcome reward and overlong penalty, Trinity-RFT's args)
and ``math_boxed_reward``'s ``with_think`` format score, through rft's testing kit and by
hand."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.config.convert import to_dataclass
from rft.errors import RftError
from rft.plugins import PluginRegistry
from rft.testing.checks import check_reward
from rft.testing.strategies import reward_cases
from rft_plugin_rewards.dapo import DAPOArgs, math_dapo_reward, overlong_penalty
from rft_plugin_rewards.math import BoxedArgs, math_boxed_reward

PENALTY = DAPOArgs(enable_overlong_penalty=True, penalty_factor=1.0, max_response_length=20,
                   cache_length=4)


def test_registered_with_its_extra_inputs():
    registry = PluginRegistry.create()
    registration = registry.registration("reward_fn", "math_dapo_reward")
    assert registration.distribution == "rft-plugin-rewards"
    assert registry.get("reward_fn", "math_dapo_reward") is math_dapo_reward
    assert math_dapo_reward.extra_inputs == ("response_tokens",)
    assert math_boxed_reward.extra_inputs == ("with_think", "format_score_coef")


@pytest.mark.parametrize("response, truth, accuracy", [
    ("<think>2+2</think> so the answer is \\boxed{4}", "4", 1.0),
    ("\\boxed{5}", "4", -1.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("\\boxed{4}", "\\boxed{4}", 1.0),                     # a boxed ground truth
    ("4", "4", 1.0),                                        # a bare answer
    ("x = 4", "4", 1.0),                                    # a bare expression
    ("The answer is 4", "4", -1.0),                         # a sentence is not an answer
    ("<think>maybe \\boxed{4}</think> I give up", "4", -1.0),  # only after </think> counts
    ("<think>x</think><think>y</think>\\boxed{4}", "4", 1.0),  # the last </think>
    ("", "4", -1.0),
])
def test_accuracy_is_plus_or_minus_one(response, truth, accuracy):
    assert math_dapo_reward(response, truth) == {"accuracy": accuracy, "format_score": 0.0}


@pytest.mark.parametrize("length, penalty", [
    (0, 0.0), (16, 0.0),        # up to max_response_length − cache_length: none
    (17, -0.25), (18, -0.5), (20, -1.0),   # linear over the cache
    (21, -1.0), (500, -1.0),    # past the maximum: −penalty_factor
])
def test_overlong_penalty_by_hand(length, penalty):
    assert overlong_penalty(length, PENALTY) == pytest.approx(penalty)
    parts = math_dapo_reward("\\boxed{4}", "4", PENALTY, response_tokens=[7] * length)
    assert parts == {"accuracy": 1.0, "format_score": pytest.approx(penalty)}


@given(length=st.integers(0, 100), factor=st.floats(0.0, 5.0), maximum=st.integers(2, 60),
       cache=st.integers(1, 59))
def test_overlong_penalty_is_trinitys_piecewise_formula(length, factor, maximum, cache):
    if cache >= maximum:
        with pytest.raises(ValueError, match="must be greater than cache_length"):
            DAPOArgs(True, factor, maximum, cache)
        return
    args = DAPOArgs(True, factor, maximum, cache)
    expected = maximum - cache
    want = (0.0 if length <= expected else -factor if length > maximum
            else (expected - length) / cache * factor)
    assert overlong_penalty(length, args) == pytest.approx(want)
    assert -factor - 1e-9 <= overlong_penalty(length, args) <= 0.0


def test_args_are_checked_as_a_config_would_be():
    problems: list[str] = []
    to_dataclass(DAPOArgs, {"enable_overlong_penalty": True, "penalty_factor": 1.0},
                 "reward_fn_args", problems)
    assert problems == ["reward_fn_args: enable_overlong_penalty needs max_response_length, "
                        "cache_length"]
    problems.clear()
    built = to_dataclass(DAPOArgs, {"enable_overlong_penalty": True, "penalty_factor": 1.0,
                                    "max_response_length": 20480, "cache_length": 4096},
                         "reward_fn_args", problems)
    assert problems == [] and built.max_response_length == 20480
    assert to_dataclass(DAPOArgs, {}, "reward_fn_args", problems) == DAPOArgs()


def test_penalty_without_the_token_count_is_a_clear_error():
    with pytest.raises(RftError, match="enable_overlong_penalty needs the response's token ids"):
        math_dapo_reward("\\boxed{4}", "4", PENALTY)


@settings(max_examples=60, deadline=None)
@given(reward_cases())
def test_contract_without_penalty(case):
    (parts,) = check_reward(math_dapo_reward, DAPOArgs(), case)
    assert parts["accuracy"] in (1.0, -1.0) and parts["format_score"] == 0.0


@settings(max_examples=60, deadline=None)
@given(reward_cases(), st.integers(0, 40))
def test_contract_with_penalty(case, length):
    fn = functools.partial(math_dapo_reward, response_tokens=list(range(length)))
    fn.__name__ = "math_dapo_reward"  # type: ignore[attr-defined]
    (parts,) = check_reward(fn, PENALTY, case)
    assert parts["format_score"] == pytest.approx(overlong_penalty(length, PENALTY))


@pytest.mark.parametrize("response, coef, parts", [
    ("<think>2+2=4</think> \\boxed{4}", None, {"accuracy": 1.0, "format_score": 0.0}),
    ("\\boxed{4}", None, {"accuracy": 1.0, "format_score": -0.1}),
    ("\\boxed{4}", 0.5, {"accuracy": 1.0, "format_score": -0.5}),
    ("</think>x<think> \\boxed{4}", 0.5, {"accuracy": 1.0, "format_score": -0.5}),  # order
    ("<think>a</think><think>b</think> \\boxed{3}", 0.2, {"accuracy": 0.0, "format_score": -0.2}),
])
def test_boxed_reward_with_think_adds_trinitys_format_score(response, coef, parts):
    assert math_boxed_reward(response, "4", with_think=True, format_score_coef=coef) == parts
    # without with_think (rft's default, and every caller that does not pass it) unchanged
    assert math_boxed_reward(response, "4") == {"accuracy": parts["accuracy"]}
    assert math_boxed_reward(response, "4", BoxedArgs(), with_think=False) == {
        "accuracy": parts["accuracy"]}


@settings(max_examples=40, deadline=None)
@given(reward_cases(), st.booleans())
def test_boxed_reward_contract_with_think(case, with_think):
    fn = functools.partial(math_boxed_reward, with_think=with_think, format_score_coef=0.3)
    fn.__name__ = "math_boxed_reward"  # type: ignore[attr-defined]
    check_reward(fn, BoxedArgs(), case)
