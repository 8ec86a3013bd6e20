"""rft-plugin-multi-step-grpo: the trainer-side function keeps the advantage contract and
equals veRL's GRPO (one-step episodes); the explorer operator over multi-step episodes by
hand, and equal to the trainer-side function on one-step episodes; the batch layout's
guard; the preset after validation; a tiny run with a two-step workflow."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs
from rft.errors import RftError
from rft.experience import Experience
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, minimal_config, validated
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_multi_step_grpo import (PRESET, StepWiseGRPO, StepWiseGRPOArgs,
                                        step_wise_grpo_advantages)
from rft_plugin_multi_step_grpo.testing import (TwoStepWorkflow, assert_operator_is_trainer_side,
                                                episode_step, workflow_plugin)

torch.set_num_threads(1)

LEVELS = st.sampled_from(["group", "batch", "none"])


@SETTINGS
@given(advantage_inputs(), LEVELS, st.sampled_from([None, 0.0, 0.5]))
def test_trainer_side_keeps_the_advantage_contract(inputs: AdvantageInputs, level: str,
                                                    threshold: float | None) -> None:
    """Finite, no gradient, zero at masked positions, invariant to a constant added to a
    group's rewards (the mean is the group's; ``batch``'s std is shift-invariant too)."""
    check_advantage(step_wise_grpo_advantages,
                    StepWiseGRPOArgs(std_cal_level=level, std_threshold=threshold), inputs,
                    shift_invariant=level != "batch")


@SETTINGS
@given(advantage_inputs(), st.sampled_from([(True, "group"), (False, "none")]))
def test_trainer_side_equals_verl_grpo(inputs: AdvantageInputs, case: tuple) -> None:
    """One-step episodes: ``group`` is veRL's GRPO advantage, ``none`` its Dr.GRPO
    (``norm_adv_by_std_in_grpo=False``), singletons included (μ = 0, σ = 1)."""
    norm, level = case
    assert_equals_verl(step_wise_grpo_advantages, StepWiseGRPOArgs(std_cal_level=level),
                       "compute_grpo_outcome_advantage", inputs, epsilon=1e-6,
                       norm_adv_by_std_in_grpo=norm)


def _step(task: int, episode: str, step: int, reward: float | None) -> Experience:
    return episode_step(task, episode, step, reward=reward, mask_last=True, batch=1)


def _episodes() -> list[Experience]:
    """Task 0: episodes a (2 steps, last reward 1), b (3 steps, last 0), c (1 step, 0.5),
    steps shuffled; task 1: one episode of 2 steps (last reward 2)."""
    return [_step(0, "b", 2, 0.0), _step(0, "a", 1, 1.0), _step(1, "z", 0, None),
            _step(0, "b", 0, 0.3), _step(0, "c", 0, 0.5), _step(0, "a", 0, 0.0),
            _step(0, "b", 1, 0.7), _step(1, "z", 1, 2.0)]


def _by_episode(experiences: list[Experience]) -> dict[tuple[int, str], list[float]]:
    return {(int(e.eid.task), e.info["episode"]): e.advantages[0].item()
            for e in experiences}


def test_operator_scores_each_episode_by_its_last_step() -> None:
    """Last steps found by ``eid.step``, not by order: r = (1, 0, 0.5) for a, b, c;
    μ = 0.5, σ = 0.5 (unbiased); task 1 is a group of one (μ = 0, σ = 1)."""
    experiences = _episodes()
    out, metrics = StepWiseGRPO(StepWiseGRPOArgs()).process(experiences)
    assert out == experiences
    eps = 1e-6
    expected = {(0, "a"): 0.5 / (0.5 + eps), (0, "b"): -0.5 / (0.5 + eps), (0, "c"): 0.0,
                (1, "z"): 2.0 / (1 + eps)}
    for exp in out:
        value = expected[(int(exp.eid.task), exp.info["episode"])]
        assert exp.advantages.tolist() == pytest.approx([value, value, 0.0])
        assert torch.equal(exp.returns, exp.advantages)
    assert metrics["episodes"] == 4 and metrics["groups"] == 2
    assert metrics["steps_per_episode"] == pytest.approx(8 / 4)


def test_operator_step_norm_batch_std_and_threshold() -> None:
    """``enable_step_norm`` divides by the episode's steps; ``batch`` divides by the std of
    all last-step rewards; ``std_threshold`` drops the group of one (task 1)."""
    out, _ = StepWiseGRPO(StepWiseGRPOArgs(enable_step_norm=True)).process(_episodes())
    got = _by_episode(out)
    assert got[(0, "b")] == pytest.approx(-0.5 / (0.5 + 1e-6) / 3)
    assert got[(0, "a")] == pytest.approx(0.5 / (0.5 + 1e-6) / 2)

    batch_std = torch.tensor([1.0, 0.0, 0.5, 2.0], dtype=torch.float64).std().item()
    out, _ = StepWiseGRPO(StepWiseGRPOArgs(std_cal_level="batch")).process(_episodes())
    got = _by_episode(out)
    assert got[(0, "a")] == pytest.approx(0.5 / (batch_std + 1e-6))
    assert got[(1, "z")] == pytest.approx(2.0 / (batch_std + 1e-6))

    out, metrics = StepWiseGRPO(StepWiseGRPOArgs(std_threshold=0.1)).process(_episodes())
    assert {int(e.eid.task) for e in out} == {0} and len(out) == 6
    assert metrics["filtered_count"] == 2 and metrics["skipped_group_ratio"] == 0.5


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.5, 1.0, -2.0])),
                min_size=1, max_size=12), LEVELS)
def test_operator_on_one_step_episodes_is_the_trainer_side_function(rows: list, level: str
                                                                    ) -> None:
    args = StepWiseGRPOArgs(std_cal_level=level)
    assert_operator_is_trainer_side(StepWiseGRPO(args), step_wise_grpo_advantages, args, rows)


def test_layout_refuses_episode_steps_without_advantages() -> None:
    layout = PRESET.batch_layout
    plain = Experience(tokens=torch.arange(4), prompt_length=2, reward=1.0)
    assert layout.arrange([plain]) == [plain]
    steps = _episodes()
    with pytest.raises(RftError, match=r"experience 0 .*name: step_wise_grpo"):
        layout.arrange(steps)
    StepWiseGRPO(StepWiseGRPOArgs()).process(steps)
    assert layout.arrange(steps) == steps


def test_args_are_checked() -> None:
    with pytest.raises(ValueError, match="std_cal_level"):
        StepWiseGRPOArgs(std_cal_level="task")  # type: ignore[arg-type]


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind, name in (("algorithm", "multi_step_grpo"), ("advantage_fn", "step_wise_grpo"),
                       ("experience_operator", "step_wise_grpo")):
        assert registry.registration(kind, name).distribution == "rft-plugin-multi-step-grpo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "multi_step_grpo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("step_wise_grpo", "ppo", "k2", "none", "default",
                                        "default", 8)
    assert plan.loss.advantage.args == StepWiseGRPOArgs()
    assert plan.preset.use_reference and not plan.preset.advantage_in_explorer


def test_the_explorer_operator_is_added_once_with_the_advantage_args(tmp_path) -> None:
    """Trinity-RFT runs multi_step_grpo without listing its operator: derivation appends
    step_wise_grpo (with advantage_fn_args) unless the config names it already."""
    from rft.config import build_stages

    def operators(listed: list[dict]) -> list[tuple[str, dict]]:
        raw = minimal_config({"algorithm_type": "multi_step_grpo",
                              "advantage_fn_args": {"std_cal_level": "batch"}},
                             str(tmp_path), "train")
        raw["data_processor"] = {"experience_pipeline": {"operators": listed}}
        config = build_stages(raw, PluginRegistry.create()).stages[0].config
        return [(op.name, op.args) for op in config.data_processor.experience_pipeline.operators]

    assert operators([]) == [("step_wise_grpo", {"std_cal_level": "batch"})]
    assert operators([{"name": "step_wise_grpo", "args": {"epsilon": 0.1}}]) == [
        ("step_wise_grpo", {"epsilon": 0.1})]
    assert PRESET.explorer_operator == "step_wise_grpo"


class LastFirstWorkflow(TwoStepWorkflow):
    """Two-step episodes returned last step first; the first step's reward is −1, the
    last step's the task's (0 or 1)."""

    def run(self) -> list[Experience]:
        return super().run()[::-1]

    def finish(self, first: Experience, second: Experience) -> None:
        self.score(second, self.response_text(second))
        first.reward = -1.0


def test_a_tiny_run_with_two_step_episodes(rft_run) -> None:
    outcome = rft_run({
        "algorithm.algorithm_type": "multi_step_grpo", "algorithm.repeat_times": 2,
        "buffer.train_batch_size": 8,
        "buffer.explorer_input.taskset.default_workflow_type": "two_step_test_workflow",
        "data_processor.experience_pipeline.operators": [{"name": "step_wise_grpo"}],
    }, plugins=[workflow_plugin("two_step_test_workflow", TwoStepWorkflow)])
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["pipeline/step_wise_grpo/steps_per_episode"] == 2.0
        assert step["pipeline/step_wise_grpo/episodes"] == 4.0
        assert "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))


def test_the_explorer_keeps_the_workflows_step_numbers(rft_run) -> None:
    """Steps returned out of order reach the operator with their ``eid.step``: each
    episode is scored by its last step (reward 0 or 1), never by its first (−1)."""
    outcome = rft_run({
        "algorithm.algorithm_type": "multi_step_grpo", "algorithm.repeat_times": 2,
        "buffer.train_batch_size": 8,
        "buffer.explorer_input.taskset.default_workflow_type": "last_first_test_workflow",
        "data_processor.experience_pipeline.operators": [{"name": "step_wise_grpo"}],
    }, plugins=[workflow_plugin("last_first_test_workflow", LastFirstWorkflow)], steps=1)
    (step,) = outcome.metrics
    assert 0.0 <= step["pipeline/step_wise_grpo/reward_mean"] <= 1.0
