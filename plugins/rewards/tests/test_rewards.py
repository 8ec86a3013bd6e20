"""Reward functions, through the registry; GSM8K against veRL's own scorer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rft.plugins import PluginRegistry
from rft_plugin_rewards.gsm8k import GSM8KArgs, gsm8k_ground_truth

GSM8K = Path(__file__).resolve().parents[3] / "examples" / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def reward():
    registry = PluginRegistry.create()
    return lambda name: registry.get("reward_fn", name)


def test_all_names_registered_by_this_distribution():
    registry = PluginRegistry.create()
    for name in ("accuracy_reward", "format_reward", "math_reward", "math_boxed_reward",
                 "gsm8k_reward", "countdown_reward", "math_dapo_reward"):
        assert registry.registration("reward_fn", name).distribution == "rft-plugin-rewards"


def test_accuracy_uses_mathematical_equivalence(reward):
    accuracy = reward("accuracy_reward")
    assert accuracy("<answer>0.5</answer>", "1/2") == {"accuracy": 1.0}
    assert accuracy("so \\boxed{\\frac{1}{2}}", "0.5") == {"accuracy": 1.0}
    assert accuracy("42", "42") == {"accuracy": 1.0}
    assert accuracy("<answer>3</answer>", "4") == {"accuracy": 0.0}


def test_format_and_math_reward(reward):
    good = "<think>2+2 is 4</think> <answer>4</answer>"
    assert reward("format_reward")(good, "4") == {"format": 1.0}
    assert reward("format_reward")("4", "4") == {"format": 0.0}
    assert reward("math_reward")(good, "4") == {"accuracy": 1.0, "format_score": 0.1}
    assert reward("math_reward")("<answer>5</answer>", "4") == {"accuracy": 0.0,
                                                                "format_score": -0.1}


def test_boxed_reward(reward):
    boxed = reward("math_boxed_reward")
    assert boxed("x = \\boxed{\\sqrt{2}}", "\\boxed{\\sqrt{2}}") == {"accuracy": 1.0}
    assert boxed("x = \\boxed{{1}+{2}}", "3") == {"accuracy": 1.0}
    assert boxed("no box", "3") == {"accuracy": 0.0}
    args = boxed.Args(has_think=True)
    assert boxed("\\boxed{3}", "3", args) == {"accuracy": -1.0}
    assert boxed("<think>ok</think>\\boxed{3}", "3", args) == {"accuracy": 1.0}


def test_countdown(reward):
    countdown = reward("countdown_reward")
    truth = {"target": 24, "numbers": [4, 6, 1]}
    assert countdown("<answer>4 * 6 * 1</answer>", truth) == {"accuracy": 1.0}
    assert countdown("<answer>4 * 6</answer>", truth) == {"accuracy": 0.1}  # 1 unused
    assert countdown("<answer>4 * 6 / (1 - 1)</answer>", json.dumps(truth)) == {"accuracy": 0.1}
    assert countdown("<answer>__import__('os')</answer>", truth) == {"accuracy": 0.1}
    assert countdown("24", truth) == {"accuracy": 0.0}


def test_gsm8k_basic(reward):
    gsm8k = reward("gsm8k_reward")
    assert gsm8k("... so #### 1,234", "Janet ... #### 1,234") == {"accuracy": 1.0}
    assert gsm8k("... so #### 12", "72") == {"accuracy": 0.0}
    assert gsm8k("the answer is 72", "72") == {"accuracy": 0.0}
    assert gsm8k("the answer is 72", "72", GSM8KArgs(method="flexible")) == {"accuracy": 1.0}


from verl.utils.reward_score import gsm8k as verl_gsm8k  # noqa: E402  (installed by the test set-up)

TEXT = st.text(alphabet=st.sampled_from(list("0123456789.,-$# abc\n")), max_size=400)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(response=TEXT, truth=st.sampled_from(["72", "1234", "-5", "3.5", "0"]),
       method=st.sampled_from(["strict", "flexible"]),
       format_score=st.sampled_from([0.0, 0.1]))
def test_gsm8k_equals_verl_on_random_text(reward, response, truth, method, format_score):
    ours = reward("gsm8k_reward")(response, truth, GSM8KArgs(method=method,
                                                             format_score=format_score))
    theirs = verl_gsm8k.compute_score(response, truth, method=method, format_score=format_score)
    assert ours["accuracy"] == float(theirs)


def test_gsm8k_ground_truth_matches_verl_preprocessing_on_the_real_file():
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()]
    assert len(rows) > 1000
    for row in rows:
        expected = verl_gsm8k.extract_solution(row["answer"], "strict")
        assert gsm8k_ground_truth(row["answer"]) == expected
