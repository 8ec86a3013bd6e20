"""Trinity-RFT's task-selection options on rft: ``difficulty_based`` with its kwargs (Beta
interpolation estimator), the ``pass_rate_calculator`` operator that Trinity-RFT pairs with
it, and the replay buffer's ``decay_limit_randomization`` priority — by hand and in a
tiny run."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import torch

from rft.buffer.replay import ReplayItem, ReplayStorage
from rft.config.convert import to_dataclass
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft_plugin_selectors.difficulty import DifficultyArgs, DifficultyBasedSelector

ROWS = [{"a": 0.2, "b": 0.8}, {"a": 0.5, "b": 0.5}, {"a": 0.0, "b": 1.0}]
"""Two reference pass rates per task (Trinity-RFT's two feature keys)."""


def selector(args: DifficultyArgs, rows=ROWS, keys=("a", "b"), seed=7) -> DifficultyBasedSelector:
    return DifficultyBasedSelector(len(rows), seed, args, rows=rows, feature_keys=list(keys))


def build_args(kwargs: dict) -> tuple[DifficultyArgs, list[str]]:
    problems: list[str] = []
    built = to_dataclass(DifficultyArgs, kwargs, "task_selector.kwargs", problems)
    return built, problems


# ---- difficulty_based: arguments ----------------------------------------------------------

def test_trinitys_kwargs_are_accepted_as_a_config_writes_them():
    args, problems = build_args({"m": 16, "lamb": 0.2, "rho": 0.2, "target_reward": 0.9,
                                 "tau": 0.5, "do_sample": True, "adaptive_rho": False})
    assert problems == [] and args.target_reward == 0.9 and args.m == 16
    _, problems = build_args({"target_reward": 0.9, "temperature": 0.1})
    assert problems == ["task_selector.kwargs: difficulty_based: temperature (rft's estimator) "
                        "and target_reward (Trinity-RFT's) cannot be combined"]
    _, problems = build_args({"estimator": "prior_mean", "tau": 1.0})
    assert problems == ["task_selector.kwargs: difficulty_based: estimator prior_mean does not "
                        "take tau"]
    _, problems = build_args({"tau": -1})
    assert problems == ["task_selector.kwargs: tau must be >= 0, got -1.0"]


@pytest.mark.parametrize("args, keys, beta", [
    (DifficultyArgs(), ("a", "b"), True),                     # Trinity-RFT's two features
    (DifficultyArgs(), ("a",), False),                        # rft's difficulty feature
    (DifficultyArgs(), (), False),
    (DifficultyArgs(target_pass_rate=0.5), ("a", "b"), False),  # rft's args
    (DifficultyArgs(tau=0.0), ("a", "b"), True),              # Trinity-RFT's args
    (DifficultyArgs(estimator="prior_mean"), ("a", "b"), False),
])
def test_the_estimator_follows_the_arguments(args, keys, beta):
    assert selector(args, keys=keys).beta is beta


def test_trinitys_estimator_needs_two_feature_keys():
    with pytest.raises(ValueError, match="needs exactly 2 task_selector.feature_keys"):
        selector(DifficultyArgs(m=4), keys=("a",))


# ---- difficulty_based: Trinity-RFT's Beta interpolation by hand ---------------------------

def test_beta_update_by_hand():
    """m=4, lamb=0.5, rho=0.5; tasks 0 and 1 observed at 1.0 and 0.0. The anchors' mean is
    (0.35, 0.65), so the capability is (0.5 − 0.35) / 0.3 = 0.5 and every task's
    interpolated rate is 0.5; observed tasks take their observation. Then
    α = 0.5·1 + 0.5 + 0.5·4·r + 0.5·4·p̃ = [5, 1, 2] and β = [1, 5, 2]."""
    chosen = selector(DifficultyArgs(m=4, lamb=0.5, rho=0.5, tau=0.0, target_reward=0.5))
    assert [chosen.pass_rate(i) for i in range(3)] == [0.5, 0.5, 0.5]
    chosen.update([0, 1], [1.0, 0.0])
    assert chosen.cap_coef == pytest.approx(0.5, abs=1e-5)
    assert chosen.alphas.tolist() == pytest.approx([5, 1, 2], abs=1e-4)
    assert chosen.betas.tolist() == pytest.approx([1, 5, 2], abs=1e-4)
    assert [chosen.pass_rate(i) for i in range(3)] == pytest.approx([5 / 6, 1 / 6, 0.5], abs=1e-4)
    # tau 0: the closest to the target first, ties in index order; a second round after 3
    assert chosen.next_batch(3) == [2, 0, 1]
    assert chosen.next_batch(4) == [2, 0, 1, 2]
    # the capability estimate is smoothed: 0.9 · old + 0.1 · new
    chosen.update([2], [1.0])
    assert chosen.cap_coef == pytest.approx(0.9 * 0.5 + 0.1 * 1.0, abs=1e-5)


def test_adaptive_rho_halves_when_the_interpolation_is_off():
    args = DifficultyArgs(m=4, rho=0.2, adaptive_rho=True)
    chosen = selector(args)
    chosen.update([0, 1], [1.0, 0.0])  # interpolated 0.5 and 0.5: mean error 0.5 ≥ 0.25
    assert chosen.rho == pytest.approx(0.1)
    steady = selector(DifficultyArgs(m=4, rho=0.2))
    steady.update([0, 1], [1.0, 0.0])
    assert steady.rho == 0.2


def test_sampling_follows_the_softmax_of_closeness():
    """After the update the rates are (5/6, 1/6, 1/2); with target 0.5 and tau 0.1 the
    weights are ∝ (e^(−10/3), e^(−10/3), 1): task 2 ≈ 93 % of single draws."""
    chosen = selector(DifficultyArgs(m=4, lamb=0.5, rho=0.5, tau=0.1, target_reward=0.5))
    chosen.update([0, 1], [1.0, 0.0])
    counts = Counter(chosen.next_batch(1)[0] for _ in range(600))
    expected = 1 / (1 + 2 * torch.exp(torch.tensor(-10 / 3)).item())
    assert counts[2] / 600 == pytest.approx(expected, abs=0.04)
    assert sorted(chosen.next_batch(3)) == [0, 1, 2]  # distinct within a batch


@pytest.mark.parametrize("args", [DifficultyArgs(m=4, tau=0.5, do_sample=True),
                                  DifficultyArgs(target_pass_rate=0.5)])
def test_resume_gives_the_same_batches(args):
    rows = [{"a": i / 10, "b": 1 - i / 10} for i in range(10)]
    keys = ("a", "b")
    straight = selector(args, rows, keys)
    first = selector(args, rows, keys)
    for chooser in (straight, first):
        chooser.update([0, 3, 5], [1.0, 0.25, 0.0])
        chooser.next_batch(4)
    resumed = selector(args, rows, keys)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    resumed.update([1, 2], [0.5, 0.5])
    straight.update([1, 2], [0.5, 0.5])
    assert [resumed.next_batch(3) for _ in range(3)] == [straight.next_batch(3) for _ in range(3)]


# ---- pass_rate_calculator -----------------------------------------------------------------

def experience(taskset: str, batch: int, task: int, reward: float) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=reward,
                      eid=EID(batch=batch, task=task), info={"taskset": taskset})


def test_pass_rate_calculator_by_hand():
    registry = PluginRegistry.create()
    cls = registry.get("experience_operator", "pass_rate_calculator")
    problems: list[str] = []
    args = to_dataclass(cls.Args, {"reward_shaping_configs": [{"stats_key": "x"}]}, "args",
                        problems)
    assert problems == []
    batch = [experience("a", 1, 0, 1.0), experience("a", 1, 0, 0.0), experience("a", 1, 1, 1.0),
             experience("b", 1, 0, 0.0), experience("b", 1, 0, 0.0)]  # same index, other set
    kept, metrics = cls(args).process(batch)
    assert kept is batch
    assert [e.info["pass_rate"] for e in kept] == [0.5, 0.5, 1.0, 0.0, 0.0]
    assert metrics == {"tasks": 3.0, "mean": 0.5, "all_solved": 1.0, "none_solved": 1.0}
    assert cls(cls.Args()).process([]) == ([], {"tasks": 0.0})


# ---- decay_limit_randomization ------------------------------------------------------------

def item(version: int, uses: int) -> ReplayItem:
    exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1, model_version=version)
    return ReplayItem(exp, use_count=uses)


def test_decay_limit_randomization_is_trinitys_priority():
    registry = PluginRegistry.create()
    fn = registry.get("priority_fn", "decay_limit_randomization")
    args = fn.Args(decay=1.5)
    assert (args.use_count_limit, args.sigma) == (3, 0.0)  # Trinity-RFT's defaults
    assert fn(item(4, 2), args, random.Random(0)) == 4 - 1.5 * 2
    noisy = fn.Args(decay=1.0, sigma=0.5)
    expected = 4 - 1.0 * 2 + random.Random(3).gauss(0.0, 0.5)  # Gaussian, not uniform
    assert fn(item(4, 2), noisy, random.Random(3)) == expected
    rng = random.Random(7)
    draws = [fn(item(0, 0), fn.Args(sigma=1.0), rng) for _ in range(2000)]
    assert min(draws) < -1.5 and max(draws) > 1.5  # both signs, unbounded
    assert abs(sum(draws) / len(draws)) < 0.1
    for limit in (0, -1, None):  # Trinity-RFT: 0 or less is no limit
        assert fn.Args(use_count_limit=limit).use_count_limit is None
    problems: list[str] = []
    to_dataclass(fn.Args, {"sigma": -1.0}, "priority_fn_args", problems)
    assert problems == ["priority_fn_args: sigma must be >= 0, got -1.0"]


@pytest.mark.parametrize("limit, reads", [(2, 2), (0, 5)])
def test_replay_buffer_honours_the_use_count_limit(limit, reads):
    fn = PluginRegistry.create().get("priority_fn", "decay_limit_randomization")
    clock = [0.0]
    store = ReplayStorage("r", fn, fn.Args(use_count_limit=limit), reuse_cooldown_time=0.0,
                          clock=lambda: clock[0])
    store.write([Experience(tokens=torch.tensor([1, 2]), prompt_length=1)])
    taken = 0
    for _ in range(5):
        clock[0] += 1.0
        taken += len(store._take(1))
    assert taken == reads


# ---- in a run ----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_with_trinitys_selector_operator_and_priority(rft_run, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1),
                                         "ref_small": i / 10, "ref_large": 1 - i / 20}) + "\n"
                             for i in range(6)))
    outcome = rft_run({
        "buffer.explorer_input.taskset.path": str(tasks),
        "buffer.explorer_input.taskset.task_selector": {
            "selector_type": "difficulty_based", "feature_keys": ["ref_small", "ref_large"],
            "kwargs": {"m": 16, "lamb": 0.2, "rho": 0.2, "target_reward": 0.9, "tau": 0.5,
                       "do_sample": True}},
        "data_processor": {"experience_pipeline": {
            "operators": [{"name": "pass_rate_calculator"}]}},
        "buffer.trainer_input.experience_buffer.replay_buffer": {
            "enable": True, "priority_fn": "decay_limit_randomization", "reuse_cooldown_time": 0.0,
            "priority_fn_args": {"decay": 2.0, "use_count_limit": 2, "sigma": 0.1}},
    })
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["pipeline/pass_rate_calculator/tasks"] == 2.0
        assert 0.0 <= step["pipeline/pass_rate_calculator/mean"] <= 1.0
