"""Trinity-RFT's workflow names selected by name in tiny colocate GRPO runs (``rft_run``):
the math workflows with their args and rewards, the step-wise workflow, and the judged
workflows with the tiny model as the auxiliary model built from
``explorer.auxiliary_models``."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

TASKSET = "buffer.explorer_input.taskset"
LONG_PROMPTS = {"model.max_prompt_tokens": 512}
"""The math system prompts are longer than the tiny run's 128 prompt tokens."""


def judge(rft_tiny_model) -> dict:
    return {"explorer.auxiliary_models": [{
        "name": "judge", "model_path": str(rft_tiny_model), "engine_type": "hf",
        "dtype": "float32", "max_prompt_tokens": 1024, "max_response_tokens": 8}]}


@pytest.mark.parametrize("workflow, reward, workflow_args, reward_args, low, high", [
    ("async_math_workflow", "math_reward", {}, {}, -0.1, 1.1),
    ("math_boxed_workflow", "math_dapo_reward", {"use_base": True, "with_think": True},
     {"enable_overlong_penalty": True, "penalty_factor": 1.0, "max_response_length": 6,
      "cache_length": 4}, -2.0, 1.0),
    ("step_wise_math_workflow", "accuracy_reward", {"max_steps": 2}, {}, 0.0, 1.0),
])
def test_math_workflows_train_by_name(rft_run, workflow, reward, workflow_args, reward_args,
                                      low, high):
    outcome = rft_run({f"{TASKSET}.default_workflow_type": workflow,
                       f"{TASKSET}.default_reward_fn_type": reward,
                       f"{TASKSET}.workflow_args": workflow_args,
                       f"{TASKSET}.reward_fn_args": reward_args, **LONG_PROMPTS})
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert low <= step["rollout/reward/min"] <= step["rollout/reward/max"] <= high
        assert step["rollout/failed_tasks"] == 0.0 and "actor/pg_loss" in step
    if workflow == "step_wise_math_workflow":  # one experience per answer: 4 to 8 a step
        assert all(4 <= s["rollout/experiences"] <= 8 for s in outcome.metrics)


@pytest.mark.parametrize("workflow, workflow_args", [
    ("math_rm_workflow", {"reward_model": "judge"}),
    ("math_ruler_workflow", {"judge": "judge", "judge_max_tokens": 6}),
    ("rubric_judge_workflow", {"judge": "0"}),
])
def test_judged_workflows_train_with_an_auxiliary_model(rft_run, rft_tiny_model, workflow,
                                                        workflow_args):
    outcome = rft_run({f"{TASKSET}.default_workflow_type": workflow,
                       f"{TASKSET}.workflow_args": workflow_args,
                       **judge(rft_tiny_model), **LONG_PROMPTS})
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["rollout/experiences"] == 4.0 and step["rollout/failed_tasks"] == 0.0
        assert 0.0 <= step["rollout/reward/min"] <= step["rollout/reward/max"] <= 1.0
        if workflow == "math_rm_workflow":  # a verdict probability, never exactly 0
            assert step["rollout/reward/min"] > 0.0


def test_trainable_ruler_trains_answers_and_judging_replies(rft_run):
    outcome = rft_run({f"{TASKSET}.default_workflow_type": "math_trainable_ruler_workflow",
                       f"{TASKSET}.workflow_args": {"gold_probability": 1.0},
                       "model.max_prompt_tokens": 1024})
    # 2 tasks × (2 answers + 2 judging replies)
    assert [s["rollout/experiences"] for s in outcome.metrics] == [8.0, 8.0]
