"""``environment_workflow`` over FrozenLake trains with the tiny model (2 steps each):
GRPO on the episode form, multi-step GRPO and GiGPO on the step form."""

from __future__ import annotations

import math

import pytest

TASKSET = "buffer.explorer_input.taskset"
FROZEN_LAKE = {f"{TASKSET}.default_workflow_type": "environment_workflow",
               f"{TASKSET}.environment": "frozen_lake",
               f"{TASKSET}.environment_args": {"max_steps": 2},
               "model.max_prompt_tokens": 1024}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, form, operator, experiences", [
    ("grpo", "episode", None, 4.0),
    ("multi_step_grpo", "step", "step_wise_grpo", 8.0),
    ("gigpo", "step", "gigpo", 8.0),
])
def test_frozen_lake_trains(rft_run, algorithm, form, operator, experiences):
    overrides = {**FROZEN_LAKE, "algorithm.algorithm_type": algorithm,
                 f"{TASKSET}.workflow_args": {"max_steps": 2, "experience_form": form}}
    if operator is not None:
        overrides.update({"buffer.train_batch_size": 8,
                          "data_processor.experience_pipeline.operators": [{"name": operator}]})
    outcome = rft_run(overrides)
    assert len(outcome.metrics) == 2
    for step in outcome.metrics:
        assert step["rollout/experiences"] == experiences
        assert step["rollout/failed_tasks"] == 0.0
        assert step["rollout/env/steps/mean"] == 2.0  # the tiny model never finishes
        assert "actor/pg_loss" in step
        assert all(math.isfinite(v) for v in step.values() if isinstance(v, float))
    if operator == "gigpo":  # the same map in every task: first steps share one state
        assert outcome.metrics[0]["pipeline/gigpo/anchor_groups_size_gt1"] >= 1.0
