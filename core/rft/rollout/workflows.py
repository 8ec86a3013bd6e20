"""Tasksets and the workflows made of their tasks.

:func:`open_taskset` reads a taskset with the workflow and reward validation resolved;
:class:`WorkflowMaker` is the runner's :data:`~rft.rollout.runner.WorkflowFactory`: it
builds each task's workflow with its own views of the models
(:meth:`~rft.rollout.model_wrapper.ModelWrapper.for_workflow`: own history, own session on
the OpenAI endpoint, the runner's call slot).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rft.buffer.taskset import TaskPlugins, load_tasks
from rft.config.plan import TasksetPlan
from rft.config.schema import TasksetConfig
from rft.engines.call_batching import CallSlot
from rft.rollout.model_wrapper import ModelWrapper
from rft.workflow import Task, Workflow


@dataclass
class Taskset:
    """A loaded taskset with its plugins."""

    config: TasksetConfig
    key: str
    tasks: list[Task]
    workflow_cls: type[Workflow]


def open_taskset(plan: TasksetPlan) -> Taskset:
    """Read a taskset and attach the workflow / reward resolved by validation."""
    workflow, reward = plan.workflow, plan.reward
    plugins = TaskPlugins(workflow.implementation, workflow.args,
                          reward.implementation if reward else None,
                          reward.args if reward else None,
                          row_workflows=plan.row_workflows, row_rewards=plan.row_rewards,
                          environment=plan.environment, action_parser=plan.action_parser)
    tasks = load_tasks(plan.config, plugins, is_eval=plan.is_eval)
    return Taskset(plan.config, plan.key, tasks, workflow.implementation)


class WorkflowMaker:
    """Builds the workflow of a task (see the module docstring).

    :param train_sets: the training tasksets (task names are unique per kind).
    :param eval_sets: the eval tasksets.
    :param model: the rollout model.
    :param enable_history: record each workflow's calls (``rollout_model.enable_history``).
    :param auxiliary_models: handed to workflows as ``auxiliary_models`` (when any).
    """

    def __init__(self, train_sets: Sequence[Taskset], eval_sets: Sequence[Taskset],
                 model: ModelWrapper, *, enable_history: bool,
                 auxiliary_models: Sequence[ModelWrapper]) -> None:
        self.train_sets = list(train_sets)
        self.eval_sets = list(eval_sets)
        self.model = model
        self.enable_history = enable_history
        self.auxiliary_models = list(auxiliary_models)

    def workflow_class(self, task: Task) -> type[Workflow]:
        """The task's own workflow (a row may name one), else its taskset's."""
        sets = self.eval_sets if task.is_eval else self.train_sets
        taskset = next(t for t in sets if t.config.name == task.taskset)
        return task.workflow or taskset.workflow_cls

    def __call__(self, task: Task, calls: CallSlot | None) -> Workflow:
        """The workflow of ``task``, its models calling the engines through ``calls``."""
        workflow_cls = self.workflow_class(task)
        model = self.model.for_workflow(enable_history=self.enable_history, tools=task.tools,
                                        calls=calls)
        if not self.auxiliary_models:
            return workflow_cls(task, model)
        return workflow_cls(task, model, auxiliary_models=[
            m.for_workflow(calls=calls) for m in self.auxiliary_models])
