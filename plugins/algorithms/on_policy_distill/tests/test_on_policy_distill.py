"""rft-plugin-on-policy-distill: the operator's advantages by hand and its one-line
errors, the batch layout's guard, the workflow with the tiny model as its own teacher,
the preset after validation, a tiny run with an auxiliary teacher. veRL 0.9.1 has no
distillation advantage, so there is no veRL comparison."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import RftError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, close, validated
from rft.workflow import Task
from rft_plugin_on_policy_distill import (PRESET, TEACHER_KEY, OnPolicyDistill,
                                          OnPolicyDistillArgs, OnPolicyDistillWorkflow,
                                          OnPolicyDistillWorkflowArgs)

torch.set_num_threads(1)


def _experience(student: list[float], teacher: list[float] | None, mask: list[bool] | None = None
                ) -> Experience:
    exp = Experience(tokens=torch.arange(2 + len(student)), prompt_length=2, reward=0.0,
                     logprobs=torch.tensor(student),
                     action_mask=None if mask is None else torch.tensor(mask),
                     eid=EID(batch=0, task=1, run=2))
    if teacher is not None:
        exp.info[TEACHER_KEY] = teacher
    return exp


def test_advantages_are_the_teacher_student_log_ratio() -> None:
    """``A_t = k (log π_T − log π_S)`` on the action mask; ``kl/mean`` is the mean over
    experiences of ``Σ_t (log π_S − log π_T)``."""
    first = _experience([-1.0, -2.0, -0.5], [-0.5, -2.5, -3.0], mask=[True, True, False])
    second = _experience([-1.0], [-1.25])
    out, metrics = OnPolicyDistill(OnPolicyDistillArgs(kl_coef=2.0)).process([first, second])
    assert out == [first, second]
    assert first.advantages.tolist() == pytest.approx([1.0, -1.0, 0.0])
    assert second.advantages.tolist() == pytest.approx([-0.5])
    assert torch.equal(first.returns, first.advantages)
    assert first.advantages.dtype == torch.float32
    assert metrics["kl/mean"] == pytest.approx(((-0.5 + 0.5) + 0.25) / 2)
    assert metrics["advantages/mean"] == pytest.approx((0.0 - 0.5) / 2)


@SETTINGS
@given(st.lists(st.floats(-20, 0), min_size=1, max_size=8), st.floats(0.0, 3.0))
def test_a_teacher_equal_to_the_student_gives_zero_advantages(logps: list[float], k: float
                                                              ) -> None:
    exp = _experience(logps, None)
    exp.info[TEACHER_KEY] = exp.logprobs.tolist()  # the same float32 values
    OnPolicyDistill(OnPolicyDistillArgs(kl_coef=k)).process([exp])
    close(exp.advantages, torch.zeros(len(logps)))


def test_missing_inputs_are_one_line_errors() -> None:
    operator = OnPolicyDistill(OnPolicyDistillArgs())
    with pytest.raises(RftError, match=r"0/1/2/: on_policy_distill needs the teacher's log-probs"):
        operator.process([_experience([-1.0], None)])
    with pytest.raises(RftError, match="has 2 log-probs, the response has 1 tokens"):
        operator.process([_experience([-1.0], [-1.0, -2.0])])
    no_logprobs = Experience(tokens=torch.arange(3), prompt_length=2, info={TEACHER_KEY: [-1.0]})
    with pytest.raises(RftError, match="sampling log-probs"):
        operator.process([no_logprobs])


def test_layout_refuses_experiences_without_advantages() -> None:
    exp = _experience([-1.0], [-2.0])
    with pytest.raises(RftError, match=r"experience 0 .*name: on_policy_distill"):
        PRESET.batch_layout.arrange([exp])
    OnPolicyDistill(OnPolicyDistillArgs()).process([exp])
    assert PRESET.batch_layout.arrange([exp]) == [exp]


def test_workflow_with_the_student_as_its_own_teacher(rft_model) -> None:
    """The teacher scores the student's tokens at the sampling temperature: with the same
    weights its log-probs are the sampling log-probs, and the advantages vanish."""
    task = Task(raw={}, index=0, taskset="t", prompt="3+1=", truth="4", repeat_times=2,
                sampling={"temperature": 1.0, "max_tokens": 6})
    workflow = OnPolicyDistillWorkflow(task, rft_model, auxiliary_models=[rft_model])
    workflow.args = OnPolicyDistillWorkflowArgs()
    experiences = workflow.run()
    assert len(experiences) == 2
    for exp in experiences:
        assert exp.reward == 0.0 and len(exp.info[TEACHER_KEY]) == exp.response_length
        torch.testing.assert_close(torch.tensor(exp.info[TEACHER_KEY], dtype=torch.float32),
                                   exp.logprobs, atol=1e-4, rtol=1e-4)
    OnPolicyDistill(OnPolicyDistillArgs()).process(experiences)
    assert all(exp.advantages.abs().max() < 1e-3 for exp in experiences)


def test_workflow_without_a_teacher_says_so(rft_model) -> None:
    task = Task(raw={}, index=0, taskset="t", prompt="3+1=", repeat_times=1)
    with pytest.raises(RftError, match="no auxiliary model '0'"):
        OnPolicyDistillWorkflow(task, rft_model).run()


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    for kind, name in (("algorithm", "on_policy_distill"),
                       ("experience_operator", "on_policy_distill"),
                       ("workflow", "on_policy_distill_workflow")):
        assert registry.registration(kind, name).distribution == "rft-plugin-on-policy-distill"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "on_policy_distill"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == (None, "ppo", "none", "none", "none", "default", 8)
    assert plan.preset.advantage_in_explorer and not plan.preset.use_reference
    assert plan.loss.advantage is None


def test_a_tiny_run_distils_from_an_auxiliary_teacher(rft_run, rft_tiny_model) -> None:
    outcome = rft_run({
        "algorithm.algorithm_type": "on_policy_distill", "algorithm.repeat_times": 2,
        "explorer.auxiliary_models": [{"name": "teacher", "model_path": str(rft_tiny_model),
                                       "engine_type": "hf", "dtype": "float32"}],
        "buffer.explorer_input.taskset.default_workflow_type": "on_policy_distill_workflow",
        "buffer.explorer_input.taskset.workflow_args": {"teacher": "teacher"},
        "data_processor.experience_pipeline.operators": [
            {"name": "on_policy_distill", "args": {"kl_coef": 1.0}}],
    })
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert "pipeline/on_policy_distill/kl/mean" in step and "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
    # the teacher is the initial student: no gap before the first update
    assert abs(outcome.metrics[0]["pipeline/on_policy_distill/kl/mean"]) < 1e-3
