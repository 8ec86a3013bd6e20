"""The ``buffer`` section's check: batch sizes, tasksets (names, paths, plugins), the
experience buffer and the storages' retry settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rft.algorithm import AlgorithmPreset
from rft.config.buffer_paths import queue_backup_kind
from rft.config.findings import Findings, build_args, data_path_here, training_tasksets
from rft.config.load import unset_env_variable
from rft.config.plan import Selected, TasksetPlan
from rft.config.schema import ExperienceBufferConfig, RftConfig, TasksetConfig
from rft.config.task_pipeline import pipeline_output
from rft.plugins import KINDS
from rft.plugin_kinds import (ACTION_PARSER, ENVIRONMENT, PRIORITY_FN, REWARD_FN, TASK_SELECTOR,
                              WORKFLOW)

if TYPE_CHECKING:  # the contracts of what the environment checks select
    from rft.environment import ActionParser, Environment


@dataclass(frozen=True)
class BufferChoice:
    """What :func:`check_buffer` resolved."""

    tasksets: tuple[TasksetPlan, ...] = ()
    """Training tasksets whose workflow and selector resolved."""
    eval_tasksets: tuple[TasksetPlan, ...] = ()
    """Eval tasksets likewise."""
    priority_fn: Selected[Any] | None = None
    """The replay buffer's priority function."""


def check_buffer(c: RftConfig, found: Findings, preset: AlgorithmPreset | None) -> BufferChoice:
    """Batch sizes, tasksets (defaults, names, paths, plugins) and the experience buffer."""
    b = c.buffer
    if b.batch_size <= 0:
        found.problem("buffer.batch_size", f"must be > 0, got {b.batch_size}")
    derived_size = b.batch_size * (c.algorithm.repeat_times or 1)  # what derivation gives
    if b.train_batch_size is not None and b.train_batch_size <= 0 \
            and not (b.batch_size <= 0 and b.train_batch_size == derived_size):
        found.problem("buffer.train_batch_size", f"must be > 0, got {b.train_batch_size}")
    if b.total_steps is not None and b.total_steps <= 0:
        found.problem("buffer.total_steps", f"must be > 0, got {b.total_steps}")
    if b.total_epochs <= 0:
        found.problem("buffer.total_epochs", f"must be > 0, got {b.total_epochs}")
    ei = c.buffer.explorer_input
    train_only = preset is not None and preset.train_only
    tasksets = training_tasksets(c)
    if not tasksets and c.mode in ("both", "explore", "colocate") and not train_only:
        found.problem("buffer.explorer_input.taskset",
                      f"mode {c.mode!r} explores tasks: set a taskset")
    seen: dict[tuple[bool, str], str] = {}  # a training and an eval taskset may share a name
    evals = [(f"buffer.explorer_input.eval_tasksets[{i}]", t, True)
             for i, t in enumerate(ei.eval_tasksets)]
    planned: list[TasksetPlan] = []
    for key, taskset, is_eval in [(k, t, False) for k, t in tasksets] + evals:
        if (is_eval, taskset.name) in seen:
            found.problem(f"{key}.name", f"{taskset.name!r} is already used by "
                          f"{seen[is_eval, taskset.name]}")
        seen[is_eval, taskset.name] = key
        if taskset.repeat_times is not None and taskset.repeat_times <= 0:
            found.problem(f"{key}.repeat_times", f"must be > 0, got {taskset.repeat_times}")
        plan = check_taskset(key, taskset, is_eval, found, produced=pipeline_output(c))
        if plan is not None:
            planned.append(plan)
    priority_fn = check_experience_buffer(c, found)
    check_retries(c, found)
    return BufferChoice(tuple(p for p in planned if not p.is_eval),
                        tuple(p for p in planned if p.is_eval), priority_fn)


def check_experience_buffer(c: RftConfig, found: Findings) -> Selected[Any] | None:
    """The experience buffer's replay buffer and path, auxiliary buffers' paths; returns
    the replay buffer's priority function."""
    ti = c.buffer.trainer_input
    storage = ti.experience_buffer
    priority_fn = None
    key = "buffer.trainer_input.experience_buffer"
    if storage is not None:
        replay = storage.replay_buffer
        if replay is not None and replay.enable:
            priority_fn = found.select(PRIORITY_FN, f"{key}.replay_buffer.priority_fn",
                                       replay.priority_fn, replay.priority_fn_args)
        if storage.storage_type == "queue":
            try:
                queue_backup_kind(storage.path)
            except ValueError as exc:
                found.problem(f"{key}.path", str(exc))
        if storage.storage_type == "file" and unset_env_variable(storage.path):
            data_path_here(found, f"{key}.path", storage.path)
    for name, aux in ti.auxiliary_buffers.items():
        aux_key = f"buffer.trainer_input.auxiliary_buffers.{name}"
        if aux.storage_type == "file":
            if not aux.path:
                found.problem(f"{aux_key}.path", "must be set for storage_type 'file'")
            data_path_here(found, f"{aux_key}.path", aux.path)
    return priority_fn


def check_retries(c: RftConfig, found: Findings) -> None:
    """``buffer.max_retry_times`` / ``max_retry_interval`` and every storage's own (which
    derivation filled from them): negative values are problems."""
    b = c.buffer
    for field_name in ("max_retry_times", "max_retry_interval"):
        if getattr(b, field_name) < 0:
            found.problem(f"buffer.{field_name}", f"must be >= 0, got {getattr(b, field_name)}")
    ei, ti = b.explorer_input, b.trainer_input
    storages: list[tuple[str, TasksetConfig | ExperienceBufferConfig]] = list(
        training_tasksets(c))
    storages += [(f"buffer.explorer_input.eval_tasksets[{i}]", t)
                 for i, t in enumerate(ei.eval_tasksets)]
    if ti.experience_buffer is not None:
        storages.append(("buffer.trainer_input.experience_buffer", ti.experience_buffer))
    storages += [(f"buffer.trainer_input.auxiliary_buffers.{name}", aux)
                 for name, aux in ti.auxiliary_buffers.items()]
    for key, storage in storages:
        for field_name, inherited in (("max_retry_times", b.max_retry_times),
                                      ("max_retry_interval", b.max_retry_interval)):
            value = getattr(storage, field_name)
            if value is not None and value < 0 and value != inherited:
                found.problem(f"{key}.{field_name}", f"must be >= 0, got {value}")


def check_taskset(key: str, taskset: TasksetConfig, is_eval: bool,
                  found: Findings, produced: str | None = None) -> TasksetPlan | None:
    """One taskset: storage, path, workflow, reward and selector plugins; its plan when
    the workflow and selector resolve. ``produced``: the file the task pipeline writes
    (not there yet: no missing-path warning)."""
    if taskset.storage_type in ("file", "sql"):
        if not taskset.path:
            found.problem(f"{key}.path", f"must be set for storage_type {taskset.storage_type!r}")
        if taskset.path != produced:
            data_path_here(found, f"{key}.path", taskset.path)
    if taskset.default_workflow_type is None:
        found.problem(f"{key}.default_workflow_type",
                      "no workflow: set it here or buffer.explorer_input.default_workflow_type")
    workflow = found.select(WORKFLOW, f"{key}.default_workflow_type",
                            taskset.default_workflow_type, taskset.workflow_args,
                            f"{key}.workflow_args")
    reward = found.select(REWARD_FN, f"{key}.default_reward_fn_type",
                          taskset.default_reward_fn_type, taskset.reward_fn_args,
                          f"{key}.reward_fn_args")
    selector = taskset.task_selector
    chosen_selector = found.select(TASK_SELECTOR, f"{key}.task_selector.selector_type",
                                   selector.selector_type, selector.kwargs,
                                   f"{key}.task_selector.kwargs")
    environment, parser = check_environment(key, taskset, workflow, found)
    if workflow is None or chosen_selector is None:
        return None
    return TasksetPlan(key, taskset, is_eval, workflow, reward, chosen_selector,
                       environment=environment, action_parser=parser,
                       **row_plugins(key, taskset, found))


def check_environment(key: str, taskset: TasksetConfig, workflow: Selected[Any] | None,
                      found: Findings
                      ) -> tuple[Selected[type[Environment]] | None, Selected[ActionParser] | None]:
    """``environment`` / ``environment_args`` of a taskset: the environment class and its
    built args, and the action parser (the workflow's ``action_parser`` arg, else the
    environment's ``default_action_parser``); one line each for an unknown name, bad args,
    an environment with a workflow that plays none, or such a workflow without one."""
    plays = workflow is not None and bool(getattr(workflow.implementation,
                                                  "plays_environments", False))
    if taskset.environment is None:
        if taskset.environment_args:
            found.problem(f"{key}.environment_args", "set without an environment "
                          f"({key}.environment)")
        if plays:
            assert workflow is not None
            found.problem(f"{key}.environment", f"workflow {workflow.name!r} plays an "
                          "environment: name a registered one here")
        return None, None
    if workflow is not None and not plays:
        found.problem(f"{key}.environment", f"workflow {workflow.name!r} does not play "
                      "environments; use environment_workflow (default_workflow_type)")
    environment = found.select(ENVIRONMENT, f"{key}.environment", taskset.environment,
                               taskset.environment_args, f"{key}.environment_args")
    if environment is None:
        return None, None
    named = getattr(workflow.args, "action_parser", None) if workflow is not None else None
    parser_key = (f"{key}.workflow_args.action_parser" if named
                  else f"{key}.environment ({taskset.environment!r}'s default_action_parser)")
    parser_name = named or getattr(environment.implementation, "default_action_parser", "raw")
    parser = found.select(ACTION_PARSER, parser_key, str(parser_name))
    return environment, parser


def row_plugins(key: str, taskset: TasksetConfig, found: Findings) -> dict[str, Any]:
    """``format.workflow_key`` / ``reward_fn_key``: every registered workflow / reward
    function resolved by name (a row may name any), args from the taskset's
    ``workflow_args`` / ``reward_fn_args`` where its ``Args`` take them, else its defaults
    (said in a warning when those args are set). Keyword arguments of
    :class:`~rft.config.plan.TasksetPlan`."""
    resolved_by_field: dict[str, Any] = {}
    fmt = taskset.format
    for field_name, column, kind, args_name in (
            ("row_workflows", fmt.workflow_key, "workflow", "workflow_args"),
            ("row_rewards", fmt.reward_fn_key, "reward_fn", "reward_fn_args")):
        if not column:
            continue
        args = getattr(taskset, args_name) or {}
        if args:
            found.warnings.append(f"{key}.{args_name}: a row naming its own "
                                  f"{KINDS[kind].label} (format.{kind}_key {column!r}) runs "
                                  "it with these args where its Args take them, else with "
                                  "its defaults")
        resolved = {}
        for name in found.registry.names(kind):
            implementation = found.registry.get(kind, name)
            for candidate in (args, {}):
                trial: list[str] = []
                built = build_args(implementation, name, candidate, f"{key}.{args_name}", trial)
                if not trial:
                    resolved[name] = Selected(f"{key}.format.{kind}_key", name,
                                              implementation, built)
                    break
        resolved_by_field[field_name] = resolved
    return resolved_by_field


__all__ = ["BufferChoice", "check_buffer", "check_environment", "check_taskset", "row_plugins"]
