"""A workflow's own metrics (``Experience.metrics``) reach the explorer's monitors as
``rollout/<metric>/mean|max|min`` (issue #28, item 14)."""

from __future__ import annotations

import json

import pytest
import torch

from fixtures_models import arithmetic_tasks
from rft.config import load_config
from rft.experience import Experience
from rft.rollout.explorer import experience_metric_stats
from rft.launcher import run
from rft.plugins import PluginRegistry
from test_embedded_run import write_config
from test_monitors import read_tensorboard


def experience(metrics: dict) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=0.0,
                      metrics=metrics)


def test_stats_over_the_experiences_that_carry_each_metric():
    stats = experience_metric_stats("rollout", [
        experience({"multi_turn/turns": 1.0, "custom/score": 2}),
        experience({"multi_turn/turns": 3.0, "flag": True, "note": "text"}),
    ])
    assert stats == {"rollout/custom/score/mean": 2.0, "rollout/custom/score/max": 2.0,
                     "rollout/custom/score/min": 2.0,
                     "rollout/multi_turn/turns/mean": 2.0, "rollout/multi_turn/turns/max": 3.0,
                     "rollout/multi_turn/turns/min": 1.0}


class MetricWorkflowPlugin:
    """``metric_workflow``: ``simple_workflow``'s chat call, each experience carrying a
    custom metric (its response length) and ``multi_turn/turns`` = 2."""

    from rft import hookimpl

    @hookimpl
    def register_workflows(self):
        from rft.workflow import Workflow

        class MetricWorkflow(Workflow):
            def run(self):
                experiences = self.model.chat(self.task.chat_messages(),
                                              n=self.task.repeat_times)
                for exp in experiences:
                    self.score(exp, exp.response_text or "")
                    exp.metrics["custom/response_tokens"] = float(exp.response_length)
                    exp.metrics["multi_turn/turns"] = 2.0
                return experiences

        return {"metric_workflow": MetricWorkflow}


@pytest.mark.slow
@pytest.mark.parametrize("monitor", ["jsonl", "tensorboard"])
def test_workflow_metrics_reach_the_explorer_monitor(tmp_path, tiny_model_dir, monitor):
    tasks = arithmetic_tasks(tmp_path, 4)
    path = write_config(tmp_path, tiny_model_dir, tasks, trainer__save_interval=0,
                        buffer__total_steps=1, monitor__monitor_type=monitor,
                        buffer__explorer_input__taskset__default_workflow_type="metric_workflow")
    loaded = load_config(path, registry=PluginRegistry.create(
        extra_plugins=[MetricWorkflowPlugin()]))
    assert run(loaded) == 0
    monitor_dir = tmp_path / "ck" / "e2e" / "run" / "monitor"
    if monitor == "jsonl":
        records = [json.loads(line) for line in
                   (monitor_dir / "explorer.jsonl").read_text().splitlines()]
        logged = {k: v for r in records if r["step"] == 1 for k, v in r["metrics"].items()}
    else:
        logged = {tag: values[-1][1] for tag, values in
                  read_tensorboard(monitor_dir / "tensorboard" / "explorer").items()}
    assert logged["rollout/multi_turn/turns/mean"] == 2.0
    assert logged["rollout/multi_turn/turns/max"] == 2.0
    assert 1.0 <= logged["rollout/custom/response_tokens/mean"] <= 8.0  # max_response_tokens
    assert (logged["rollout/custom/response_tokens/min"]
            <= logged["rollout/custom/response_tokens/mean"]
            <= logged["rollout/custom/response_tokens/max"])
    assert "rollout/reward/accuracy/mean" in logged  # the reward parts too
