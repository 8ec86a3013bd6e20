"""The taskset's ``environment`` / ``environment_args``: selected from the registry with
their args, the action parser resolved, one line per mistake; tasks carry them."""

from __future__ import annotations

import pytest

from rft.buffer.taskset import TaskPlugins, row_to_task
from rft.builtin.action_parsers import ACTION_PARSERS
from rft.config.check_buffer import check_taskset
from rft.config.findings import Findings
from rft.config.schema import TasksetConfig
from rft.plugins import PluginRegistry
from rft_plugin_frozen_lake import FrozenLakeEnvArgs, FrozenLakeEnvironment

KEY = "buffer.explorer_input.taskset"


@pytest.fixture(scope="module")
def registry():
    return PluginRegistry.create()


def check(registry, **fields):
    found = Findings(registry)
    plan = check_taskset(KEY, TasksetConfig(name="t", storage_type="queue", **fields), False,
                         found)
    return plan, found.problems


def test_the_environment_and_its_parser_are_selected(registry):
    plan, problems = check(registry, default_workflow_type="environment_workflow",
                           environment="frozen_lake", environment_args={"max_steps": 3})
    assert problems == []
    assert plan.environment.implementation is FrozenLakeEnvironment
    assert plan.environment.args == FrozenLakeEnvArgs(max_steps=3)
    assert plan.action_parser.implementation is ACTION_PARSERS["last_code_block"]
    plan, problems = check(registry, default_workflow_type="environment_workflow",
                           environment="frozen_lake", workflow_args={"action_parser": "last_line"})
    assert problems == [] and plan.action_parser.name == "last_line"


@pytest.mark.parametrize("fields, line", [
    ({"default_workflow_type": "environment_workflow", "environment": "frozen_lakes"},
     f"{KEY}.environment: unknown environment 'frozen_lakes'"),
    ({"default_workflow_type": "environment_workflow", "environment": "frozen_lake",
      "environment_args": {"size": 3}}, f"{KEY}.environment_args"),
    ({"default_workflow_type": "environment_workflow", "environment": "frozen_lake",
      "environment_args": {"max_steps": 0}}, "max_steps must be >= 1"),
    ({"default_workflow_type": "simple_workflow", "environment": "frozen_lake"},
     f"{KEY}.environment: workflow 'simple_workflow' does not play environments"),
    ({"default_workflow_type": "environment_workflow"},
     f"{KEY}.environment: workflow 'environment_workflow' plays an environment"),
    ({"default_workflow_type": "environment_workflow", "environment": "frozen_lake",
      "workflow_args": {"action_parser": "lastline"}},
     f"{KEY}.workflow_args.action_parser: unknown action parser 'lastline'"),
    ({"default_workflow_type": "simple_workflow", "environment_args": {"x": 1}},
     f"{KEY}.environment_args: set without an environment"),
])
def test_each_mistake_is_one_line(registry, fields, line):
    _, problems = check(registry, **fields)
    assert len(problems) == 1 and line in problems[0] and "\n" not in problems[0], problems


def test_tasks_carry_the_environment_and_need_no_prompt(registry):
    plan, _ = check(registry, default_workflow_type="environment_workflow",
                    environment="frozen_lake")
    plugins = TaskPlugins(plan.workflow.implementation, plan.workflow.args, None, None,
                          environment=plan.environment, action_parser=plan.action_parser)
    task = row_to_task(plan.config, {"seed": 3, "size": 3}, 0, plugins, is_eval=False)
    assert task.environment is FrozenLakeEnvironment and task.prompt is None
    assert task.environment_args == FrozenLakeEnvArgs()
    assert task.action_parser is ACTION_PARSERS["last_code_block"]


def test_rows_of_an_environment_need_no_answer_for_a_reward_function(registry):
    plan, _ = check(registry, default_workflow_type="environment_workflow",
                    environment="frozen_lake", default_reward_fn_type="accuracy_reward")
    plugins = TaskPlugins(plan.workflow.implementation, plan.workflow.args,
                          plan.reward.implementation, plan.reward.args,
                          environment=plan.environment, action_parser=plan.action_parser)
    task = row_to_task(plan.config, {"seed": 3}, 0, plugins, is_eval=False)
    assert task.truth is None and task.environment is FrozenLakeEnvironment
