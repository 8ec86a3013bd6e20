"""The two tables the config generator cannot read from the schema itself.

- :data:`PLUGIN_FIELDS`: which schema fields name a plugin, of which kind, and which
  sibling field holds that plugin's arguments (the schema keeps plugin names as plain
  strings; validation resolves them in :mod:`rft.config.check_*`). A test checks that each
  entry is a real field and that every ``X`` with an ``X_args`` sibling is listed.
- :data:`BEGINNER`: the beginner mode's settings, split as Trinity-RFT's Config
  Generator splits them ("Essential" and "Important"); the configuration guide names the
  two groups but does not mark its fields, so they are listed here once, as dotted schema
  paths without list indices (``stages.stage_name`` is a stage's field; a path without
  ``stages.`` also matches inside a stage's overrides). A test checks each is a real field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rft.config import schema
from rft.plugin_kinds import (
    ADVANTAGE_FN, ALGORITHM, ENGINE, ENTROPY_LOSS_FN, ENVIRONMENT, EXPERIENCE_OPERATOR, KL_FN,
    MONITOR, POLICY_LOSS_FN, PRIORITY_FN, REASONING_PARSER, REWARD_FN, SAMPLE_STRATEGY,
    TASK_SELECTOR, TOOL_CALL_PARSER, TRAINER, WORKFLOW, PluginKind)


@dataclass(frozen=True)
class PluginField:
    """A schema field whose value is a plugin name."""

    section: type
    """The schema dataclass declaring the field."""
    name: str
    """The field's name."""
    kind: PluginKind[Any]
    """The kind of plugin it names."""
    args: str | None
    """The sibling field holding the plugin's arguments (built from its ``Args``)."""


PLUGIN_FIELDS: tuple[PluginField, ...] = (
    PluginField(schema.AlgorithmConfig, "algorithm_type", ALGORITHM, None),
    PluginField(schema.AlgorithmConfig, "advantage_fn", ADVANTAGE_FN, "advantage_fn_args"),
    PluginField(schema.AlgorithmConfig, "policy_loss_fn", POLICY_LOSS_FN, "policy_loss_fn_args"),
    PluginField(schema.AlgorithmConfig, "kl_penalty_fn", KL_FN, "kl_penalty_fn_args"),
    PluginField(schema.AlgorithmConfig, "kl_loss_fn", KL_FN, "kl_loss_fn_args"),
    PluginField(schema.AlgorithmConfig, "entropy_loss_fn", ENTROPY_LOSS_FN,
                "entropy_loss_fn_args"),
    PluginField(schema.AlgorithmConfig, "sample_strategy", SAMPLE_STRATEGY,
                "sample_strategy_args"),
    PluginField(schema.AlgorithmConfig, "add_strategy", EXPERIENCE_OPERATOR, None),
    PluginField(schema.TasksetConfig, "default_workflow_type", WORKFLOW, "workflow_args"),
    PluginField(schema.TasksetConfig, "default_reward_fn_type", REWARD_FN, "reward_fn_args"),
    PluginField(schema.TasksetConfig, "environment", ENVIRONMENT, "environment_args"),
    PluginField(schema.ExplorerInputConfig, "default_workflow_type", WORKFLOW, None),
    PluginField(schema.ExplorerInputConfig, "default_reward_fn_type", REWARD_FN, None),
    PluginField(schema.TaskSelectorConfig, "selector_type", TASK_SELECTOR, "kwargs"),
    PluginField(schema.ReplayBufferConfig, "priority_fn", PRIORITY_FN, "priority_fn_args"),
    PluginField(schema.InferenceModelConfig, "engine_type", ENGINE, None),
    PluginField(schema.InferenceModelConfig, "tool_call_parser", TOOL_CALL_PARSER, None),
    PluginField(schema.InferenceModelConfig, "reasoning_parser", REASONING_PARSER, None),
    PluginField(schema.TrainerConfig, "trainer_type", TRAINER, None),
    PluginField(schema.MonitorConfig, "monitor_type", MONITOR, "monitor_args"),
    PluginField(schema.OperatorConfig, "name", EXPERIENCE_OPERATOR, "args"),
)
"""Every schema field naming a plugin (subclasses of a listed section inherit its entry)."""


def plugin_field(section: type, name: str) -> PluginField | None:
    """The :data:`PLUGIN_FIELDS` entry of field ``name`` of ``section`` (or a base)."""
    for entry in PLUGIN_FIELDS:
        if entry.name == name and issubclass(section, entry.section):
            return entry
    return None


def args_field_of(section: type, name: str) -> PluginField | None:
    """The entry whose arguments field ``name`` of ``section`` is, if any."""
    for entry in PLUGIN_FIELDS:
        if entry.args == name and issubclass(section, entry.section):
            return entry
    return None


Group = Literal["essential", "important"]


@dataclass(frozen=True)
class BeginnerSetting:
    """One setting of the beginner mode."""

    group: Group
    path: str
    """Dotted schema path without list indices, e.g.
    ``buffer.explorer_input.taskset.path``."""


_TASKSET = ("name", "path", "format.prompt_key", "format.response_key",
            "default_workflow_type", "default_reward_fn_type")

BEGINNER: tuple[BeginnerSetting, ...] = (
    *(BeginnerSetting("essential", p) for p in (
        "project", "name", "checkpoint_root_dir", "mode", "model.model_path",
        "cluster.node_num", "cluster.gpu_per_node", "algorithm.algorithm_type",
        "buffer.batch_size", "buffer.total_epochs", "buffer.total_steps",
        *(f"buffer.explorer_input.taskset.{p}" for p in _TASKSET),
        *(f"buffer.explorer_input.eval_tasksets.{p}" for p in _TASKSET),
        *(f"buffer.trainer_input.experience_buffer.{p}" for p in (
            "name", "storage_type", "path", "format.prompt_key", "format.response_key")),
        "stages", "stages.stage_name", "stages.mode")),
    *(BeginnerSetting("important", p) for p in (
        "continue_from_checkpoint", "model.max_prompt_tokens", "model.max_response_tokens",
        "model.temperature", "algorithm.repeat_times", "algorithm.optimizer.lr",
        "buffer.explorer_input.taskset.task_selector.selector_type",
        "buffer.explorer_input.eval_tasksets.rollout_args.temperature",
        "explorer.eval_interval", "explorer.rollout_model.engine_type",
        "explorer.rollout_model.engine_num", "explorer.rollout_model.tensor_parallel_size",
        "explorer.rollout_model.dtype", "explorer.rollout_model.seed",
        "synchronizer.sync_method", "synchronizer.sync_interval", "trainer.trainer_type",
        "trainer.save_interval", "monitor.monitor_type")),
)
"""The beginner mode's settings (Trinity-RFT's "Essential Configs" and "Important
Configs"); every other field is in expert mode only."""
