"""Validation and derivation of a config.

:func:`validate` takes a converted :class:`~rft.config.schema.RftConfig`, fills in every
value the configuration guide derives, resolves **every** plugin name through the plugin
registry (checking its ``*_args`` against the implementation's ``Args`` dataclass), and
collects **all** problems, each one line starting with its dotted key. Checks are small
functions run in order; each reads what the ones before it derived.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from rft.algorithm import AlgorithmPreset
from rft.config.buffer_paths import queue_backup_kind
from rft.config.convert import INVALID, to_dataclass
from rft.config.data_checks import check_datasets
from rft.config.dotted import import_dotted, looks_dotted
from rft.config.external import check_external_engines, derive_external_model, is_remote
from rft.config.host_checks import check_host
from rft.config.load import unset_env_variable
from rft.config.lora import check_lora
from rft.config.plan import LossPlan, ModelPlan, RunPlan, Selected, TasksetPlan
from rft.config.ray_timeline import check_ray_timeline
from rft.config.schema import (
    DEFAULT_GRAD_CLIP,
    ExperienceBufferConfig,
    InferenceModelConfig,
    RftConfig,
    TaskSelectorConfig,
    TasksetConfig,
)
from rft.config.token_budget import derive_into as derive_token_budget
from rft.config.trinity_forms import check_trinity_forms
from rft.contracts import AdvantageFn, EntropyLossFn, KLFn, PolicyLossFn, needs_values
from rft.hosts import why_not_loopback
from rft.plugin_kinds import (
    ADVANTAGE_FN,
    ALGORITHM,
    ENGINE,
    ENTROPY_LOSS_FN,
    EXPERIENCE_OPERATOR,
    KL_FN,
    MONITOR,
    POLICY_LOSS_FN,
    PRIORITY_FN,
    REASONING_PARSER,
    REWARD_FN,
    SAMPLE_STRATEGY,
    TASK_SELECTOR,
    TOOL_CALL_PARSER,
    TRAINER,
    WORKFLOW,
    PluginKind,
    T,
)
from rft.plugins import KINDS, PluginRegistry, args_type_of
from rft.workflow import default_reward_fn

if TYPE_CHECKING:  # the plugin kinds' contracts (runtime modules above the config layer)
    from rft.buffer.operators import ExperienceOperator
    from rft.buffer.replay import PriorityFn
    from rft.buffer.sampling import SampleStrategy
    from rft.monitor.base import Monitor
    from rft.trainer.base import Trainer

GPU_MODES = ("both", "train", "explore", "bench")
"""Modes whose processes are placed on GPUs through the cluster section."""

SYNC_METHODS_BY_MODE: dict[str, tuple[Literal["nccl", "memory", "checkpoint"], ...]] = {
    "both": ("nccl", "memory", "checkpoint"),
    "colocate": ("memory", "nccl", "checkpoint"),
    "train": ("checkpoint",),
    "explore": ("checkpoint",),
    "bench": ("checkpoint",),
}
"""Weight synchronisation methods that can work in each mode; the first is the mode's
default when ``synchronizer.sync_method`` is unset."""


@dataclass
class Validation:
    """What the checks found so far: problems, warnings, and the plugins they resolved
    (typed slots, assembled into a :class:`~rft.config.plan.RunPlan` at the end)."""

    registry: PluginRegistry
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    preset: AlgorithmPreset | None = None
    advantage: Selected[AdvantageFn[Any]] | None = None
    policy_loss: Selected[PolicyLossFn[Any]] | None = None
    kl_loss: Selected[KLFn[Any]] | None = None
    kl_penalty: Selected[KLFn[Any]] | None = None
    entropy: Selected[EntropyLossFn[Any]] | None = None
    sample_strategy: Selected[type[SampleStrategy]] | None = None
    tasksets: list[TasksetPlan] = field(default_factory=list)
    eval_tasksets: list[TasksetPlan] = field(default_factory=list)
    priority_fn: Selected[PriorityFn] | None = None
    rollout_model: ModelPlan | None = None
    auxiliary_models: list[ModelPlan] = field(default_factory=list)
    trainer: Selected[type[Trainer]] | None = None
    monitor: Selected[type[Monitor]] | None = None
    operators: list[Selected[type[ExperienceOperator]]] = field(default_factory=list)

    def problem(self, key: str, message: str) -> None:
        self.problems.append(f"{key}: {message}")

    def select(self, kind: PluginKind[T], key: str, name: str | None,
               args: dict[str, Any] | None = None, args_key: str | None = None
               ) -> Selected[T] | None:
        """Resolve ``name`` of ``kind`` found at ``key``; build its args from ``args``."""
        if name is None:
            return None
        implementation: T
        if self.registry.has(kind, name):
            implementation = self.registry.get(kind, name)
        elif looks_dotted(name):  # Trinity-RFT's form: an import path
            try:
                implementation = import_dotted(name)
            except ImportError as exc:
                self.problem(key, f"cannot use {name!r} as a {kind.label}: {exc}")
                return None
        else:
            self.problems.append(self.registry.unknown_name_message(kind, name, key=key))
            return None
        built = build_args(implementation, name, args or {}, args_key or f"{key}_args",
                           self.problems)
        return Selected(key, name, implementation, built)

    def loss_plan(self, config: RftConfig) -> LossPlan | None:
        """The loss functions :func:`check_algorithm` resolved (``None``: none resolved)."""
        if self.policy_loss is None:
            return None
        return LossPlan(policy_loss=self.policy_loss, advantage=self.advantage,
                        kl_loss=self.kl_loss, kl_penalty=self.kl_penalty, entropy=self.entropy,
                        loss_agg_mode=config.algorithm.loss_agg_mode or "token-mean")

    def plan(self, config: RftConfig) -> RunPlan | None:
        """The run plan, or ``None`` when a problem was found."""
        if self.problems:
            return None
        assert (self.preset is not None and self.policy_loss is not None
                and self.sample_strategy is not None and self.trainer is not None
                and self.monitor is not None and self.rollout_model is not None
                and config.checkpoint_job_dir is not None
                and config.buffer.trainer_input.experience_buffer is not None)
        loss = self.loss_plan(config)
        assert loss is not None
        console = Selected("monitor.monitor_type", "console",
                           self.registry.get(MONITOR, "console"))
        return RunPlan(
            config=config, preset=self.preset, loss=loss,
            sample_strategy=self.sample_strategy, trainer=self.trainer, monitor=self.monitor,
            console=console, rollout_model=self.rollout_model,
            auxiliary_models=tuple(self.auxiliary_models), tasksets=tuple(self.tasksets),
            eval_tasksets=tuple(self.eval_tasksets), operators=tuple(self.operators),
            priority_fn=self.priority_fn,
            experience_buffer=config.buffer.trainer_input.experience_buffer,
            job_dir=config.checkpoint_job_dir)


class Validated(NamedTuple):
    """What :func:`validate` returns."""

    problems: list[str]
    """Every problem, one line each starting with its dotted key."""
    warnings: list[str]
    """Every warning, one line each."""
    plan: RunPlan | None
    """The run plan; ``None`` when there are problems."""


def build_args(implementation: Any, name: str, args: dict[str, Any], key: str,
               problems: list[str]) -> Any:
    """Instance of ``implementation.Args`` built from ``args`` (problems appended)."""
    args_type = args_type_of(implementation)
    if args_type is None:
        if args:
            problems.append(f"{key}: {name!r} takes no arguments, got {', '.join(args)}")
        return None
    built = to_dataclass(args_type, dict(args), key, problems)
    return None if built is INVALID else built


def local_looking(path: str) -> bool:
    """True for paths that must exist here (absolute, ``./``, ``../``, ``~``, an unset
    ``${oc.env:VAR}``), as opposed to hub ids such as ``Qwen/Qwen2.5-1.5B-Instruct``."""
    return (os.path.isabs(path) or path.startswith((".", "~"))
            or unset_env_variable(path) is not None)


def _require_local(v: Validation, key: str, path: str | None) -> None:
    if path and local_looking(path) and not os.path.exists(os.path.expanduser(path)):
        v.problem(key, f"path {path!r} does not exist")


MISSING_DATA_HERE = "does not exist here; `rft run` stops at start unless it exists where it runs"
"""The warning for a data path missing on the validating machine (a config written for a
cluster validates on a laptop; :func:`rft.modes.preflight.check_data_sources` makes it a
one-line error when a run starts)."""


def _data_path_here(v: Validation, key: str, path: str | None) -> None:
    variable = unset_env_variable(path)
    if variable is not None:
        v.warnings.append(f"{key}: environment variable {variable} is not set here (used in "
                          f"{path}); `rft run` stops at start unless it is set where it runs")
    elif path and local_looking(path) and not os.path.exists(os.path.expanduser(path)):
        v.warnings.append(f"{key}: path {path!r} {MISSING_DATA_HERE}")


# --------------------------------------------------------------------------------------
# Checks, run in order
# --------------------------------------------------------------------------------------


def check_global(c: RftConfig, v: Validation) -> None:
    """Names, checkpoint job dir ``<root>/<project>/<name>``, Ray namespace."""
    for key in ("project", "name"):
        value = getattr(c, key)
        if not value or "/" in value:
            v.problem(key, f"must be a non-empty name without '/', got {value!r}")
    if not c.checkpoint_root_dir:
        v.problem("checkpoint_root_dir", "must be set")
        return
    if c.checkpoint_job_dir is None:  # stages come with <root>/<project>[/<group>]/<name>/<stage>
        c.checkpoint_job_dir = os.path.join(c.checkpoint_root_dir, c.project, c.group, c.name)
    if c.ray_namespace is None:
        c.ray_namespace = f"{c.project}/{c.name}"


def check_algorithm(c: RftConfig, v: Validation) -> None:
    """Apply the preset, then resolve every algorithm function name with its args."""
    a = c.algorithm
    chosen = v.select(ALGORITHM, "algorithm.algorithm_type", a.algorithm_type)
    if chosen is None:
        return
    preset = chosen.implementation
    if not isinstance(preset, AlgorithmPreset):
        v.problem("algorithm.algorithm_type",
                  f"plugin for {a.algorithm_type!r} registered a {type(preset).__name__}, "
                  "expected an AlgorithmPreset")
        return
    v.preset = preset
    for name in ("advantage_fn", "policy_loss_fn", "kl_loss_fn", "kl_penalty_fn",
                 "entropy_loss_fn", "sample_strategy"):
        if getattr(a, name) is None:
            setattr(a, name, getattr(preset, name))
    for args_name, defaults in (preset.default_args or {}).items():
        merged = {**defaults, **(getattr(a, args_name) or {})}
        setattr(a, args_name, merged)
    if preset.fixed_repeat_times is not None:
        if a.repeat_times not in (None, preset.fixed_repeat_times):  # the guide: "set to 2"
            v.warnings.append(f"algorithm.repeat_times: {a.algorithm_type} uses repeat_times="
                              f"{preset.fixed_repeat_times}; {a.repeat_times} is replaced")
        a.repeat_times = preset.fixed_repeat_times
    if a.repeat_times is None:
        a.repeat_times = preset.repeat_times
    if a.repeat_times < preset.min_repeat_times:
        v.problem("algorithm.repeat_times",
                  f"{a.algorithm_type} needs repeat_times >= {preset.min_repeat_times}, "
                  f"got {a.repeat_times}")
    v.advantage = v.select(ADVANTAGE_FN, "algorithm.advantage_fn", a.advantage_fn,
                           a.advantage_fn_args)
    if v.advantage is not None and needs_values(v.advantage.implementation) \
            and not preset.use_critic:
        v.problem("algorithm.advantage_fn",
                  f"{a.advantage_fn!r} needs critic values, but {a.algorithm_type!r} trains no "
                  "critic; choose an advantage fn without a critic (e.g. the preset's "
                  f"{preset.advantage_fn!r}) or an algorithm with one (ppo)")
    v.policy_loss = v.select(POLICY_LOSS_FN, "algorithm.policy_loss_fn", a.policy_loss_fn,
                             a.policy_loss_fn_args)
    v.kl_loss = v.select(KL_FN, "algorithm.kl_loss_fn", a.kl_loss_fn, a.kl_loss_fn_args)
    v.kl_penalty = v.select(KL_FN, "algorithm.kl_penalty_fn", a.kl_penalty_fn,
                            a.kl_penalty_fn_args)
    v.entropy = v.select(ENTROPY_LOSS_FN, "algorithm.entropy_loss_fn", a.entropy_loss_fn,
                         a.entropy_loss_fn_args)
    v.sample_strategy = v.select(SAMPLE_STRATEGY, "algorithm.sample_strategy",
                                 a.sample_strategy, a.sample_strategy_args)
    opt = a.optimizer
    if opt.lr <= 0:
        v.problem("algorithm.optimizer.lr", f"must be > 0, got {opt.lr}")
    if not 0.0 <= opt.lr_warmup_steps_ratio <= 1.0:
        v.problem("algorithm.optimizer.lr_warmup_steps_ratio",
                  f"must be within [0, 1], got {opt.lr_warmup_steps_ratio}")


def check_model(c: RftConfig, v: Validation) -> None:
    """Model path, token limits and the ``max_model_len`` derivation."""
    m = c.model
    if not m.model_path and not (m.external_model.enable and c.mode in ("bench", "explore")):
        v.problem("model.model_path", "must be set")  # external rollout model: a tokenizer
    _require_local(v, "model.model_path", m.model_path)
    _require_local(v, "model.chat_template_path", m.chat_template_path)
    if m.critic_model_path is None:
        m.critic_model_path = m.model_path
    for key in ("max_model_len", "max_prompt_tokens", "max_response_tokens"):
        value = getattr(m, key)
        if value is not None and value <= 0:
            v.problem(f"model.{key}", f"must be > 0, got {value}")
    if m.max_model_len is None:
        if m.max_prompt_tokens is None or m.max_response_tokens is None:
            v.problem("model.max_model_len",
                      "cannot be derived: set it, or both model.max_prompt_tokens and "
                      "model.max_response_tokens")
            return
        m.max_model_len = m.max_prompt_tokens + m.max_response_tokens
    if m.max_response_tokens is None and m.max_prompt_tokens is not None:
        m.max_response_tokens = m.max_model_len - m.max_prompt_tokens
    if m.max_prompt_tokens is None and m.max_response_tokens is not None:
        m.max_prompt_tokens = m.max_model_len - m.max_response_tokens
    if m.max_prompt_tokens is not None and m.max_response_tokens is not None:
        if m.max_prompt_tokens <= 0 or m.max_response_tokens <= 0:
            v.problem("model.max_model_len",
                      f"{m.max_model_len} leaves no room: max_prompt_tokens="
                      f"{m.max_prompt_tokens}, max_response_tokens={m.max_response_tokens}")
        elif m.max_prompt_tokens + m.max_response_tokens > m.max_model_len:
            v.warnings.append(
                f"model.max_model_len: {m.max_model_len} is less than max_prompt_tokens + "
                f"max_response_tokens = {m.max_prompt_tokens} + {m.max_response_tokens}: a "
                "response is cut at max_model_len minus its prompt's length (as in Trinity-RFT "
                "up to 0.3.0; later versions refuse this)")
    if m.max_response_tokens is not None and m.min_response_tokens >= m.max_response_tokens:
        v.problem("model.min_response_tokens",
                  f"must be less than max_response_tokens ({m.max_response_tokens}), "
                  f"got {m.min_response_tokens}")


def _tasksets(c: RftConfig) -> list[tuple[str, TasksetConfig]]:
    ei = c.buffer.explorer_input
    found: list[tuple[str, TasksetConfig]] = []
    if ei.taskset is not None:
        found.append(("buffer.explorer_input.taskset", ei.taskset))
    found += [(f"buffer.explorer_input.tasksets[{i}]", t) for i, t in enumerate(ei.tasksets)]
    return found


def check_buffer(c: RftConfig, v: Validation) -> None:
    """Batch sizes, tasksets (defaults, names, paths, plugins) and the experience buffer."""
    b = c.buffer
    repeat_times = c.algorithm.repeat_times or 1
    if b.batch_size <= 0:
        v.problem("buffer.batch_size", f"must be > 0, got {b.batch_size}")
    if b.train_batch_size is None:
        b.train_batch_size = b.batch_size * repeat_times
    elif b.train_batch_size <= 0:
        v.problem("buffer.train_batch_size", f"must be > 0, got {b.train_batch_size}")
    if b.total_steps is not None and b.total_steps <= 0:
        v.problem("buffer.total_steps", f"must be > 0, got {b.total_steps}")
    if b.total_epochs <= 0:
        v.problem("buffer.total_epochs", f"must be > 0, got {b.total_epochs}")
    ei = c.buffer.explorer_input
    train_only = v.preset is not None and v.preset.train_only
    tasksets = _tasksets(c)
    if not tasksets and c.mode in ("both", "explore", "colocate") and not train_only:
        v.problem("buffer.explorer_input.taskset",
                  f"mode {c.mode!r} explores tasks: set a taskset")
    seen: dict[tuple[bool, str], str] = {}  # a training and an eval taskset may share a name
    evals = [(f"buffer.explorer_input.eval_tasksets[{i}]", t, True)
             for i, t in enumerate(ei.eval_tasksets)]
    for key, taskset, is_eval in [(k, t, False) for k, t in tasksets] + evals:
        if (is_eval, taskset.name) in seen:
            v.problem(f"{key}.name", f"{taskset.name!r} is already used by "
                      f"{seen[is_eval, taskset.name]}")
        seen[is_eval, taskset.name] = key
        if taskset.repeat_times is None:
            taskset.repeat_times = 1 if is_eval else repeat_times
        elif taskset.repeat_times <= 0:
            v.problem(f"{key}.repeat_times", f"must be > 0, got {taskset.repeat_times}")
        if taskset.default_workflow_type is None:
            taskset.default_workflow_type = (
                (ei.default_eval_workflow_type or ei.default_workflow_type) if is_eval
                else ei.default_workflow_type)
        if taskset.default_reward_fn_type is None:
            taskset.default_reward_fn_type = ei.default_reward_fn_type
        check_taskset(key, taskset, is_eval, v)
    if b.trainer_input.experience_buffer is None:
        b.trainer_input.experience_buffer = ExperienceBufferConfig(name="experience_buffer")
    storage = b.trainer_input.experience_buffer
    if not storage.name:
        storage.name = "experience_buffer"
    replay = storage.replay_buffer
    if replay is not None and replay.enable:
        check_replay_buffer("buffer.trainer_input.experience_buffer.replay_buffer",
                            replay.priority_fn, replay.priority_fn_args, v)
    if storage.storage_type == "queue":
        try:
            queue_backup_kind(storage.path)
        except ValueError as exc:
            v.problem("buffer.trainer_input.experience_buffer.path", str(exc))
    if storage.storage_type == "file" and unset_env_variable(storage.path):
        _data_path_here(v, "buffer.trainer_input.experience_buffer.path", storage.path)
    if storage.storage_type in ("sql", "file") and not storage.path and c.checkpoint_job_dir:
        suffix = ".db" if storage.storage_type == "sql" else ".jsonl"
        storage.path = os.path.join(c.checkpoint_job_dir, "buffer", storage.name + suffix)
    for name, aux in b.trainer_input.auxiliary_buffers.items():
        key = f"buffer.trainer_input.auxiliary_buffers.{name}"
        if aux.storage_type == "file":
            if not aux.path:
                v.problem(f"{key}.path", "must be set for storage_type 'file'")
            _data_path_here(v, f"{key}.path", aux.path)
    _storage_retries(c, v)


def _storage_retries(c: RftConfig, v: Validation) -> None:
    """``buffer.max_retry_times`` / ``max_retry_interval`` fill every taskset and experience
    buffer that sets none (Trinity-RFT 0.2's buffer-level setting, the default of its
    storages' own since); negative values are problems."""
    b = c.buffer
    for field_name in ("max_retry_times", "max_retry_interval"):
        if getattr(b, field_name) < 0:
            v.problem(f"buffer.{field_name}", f"must be >= 0, got {getattr(b, field_name)}")
    ei, ti = b.explorer_input, b.trainer_input
    storages: list[tuple[str, TasksetConfig | ExperienceBufferConfig]] = list(_tasksets(c))
    storages += [(f"buffer.explorer_input.eval_tasksets[{i}]", t)
                 for i, t in enumerate(ei.eval_tasksets)]
    if ti.experience_buffer is not None:
        storages.append(("buffer.trainer_input.experience_buffer", ti.experience_buffer))
    storages += [(f"buffer.trainer_input.auxiliary_buffers.{name}", aux)
                 for name, aux in ti.auxiliary_buffers.items()]
    for key, storage in storages:
        if storage.max_retry_times is None:
            storage.max_retry_times = b.max_retry_times
        elif storage.max_retry_times < 0:
            v.problem(f"{key}.max_retry_times", f"must be >= 0, got {storage.max_retry_times}")
        if storage.max_retry_interval is None:
            storage.max_retry_interval = b.max_retry_interval
        elif storage.max_retry_interval < 0:
            v.problem(f"{key}.max_retry_interval",
                      f"must be >= 0, got {storage.max_retry_interval}")


def check_replay_buffer(key: str, priority_fn: str, args: dict[str, Any],
                        v: Validation) -> None:
    """The replay buffer's priority function (a plugin) and its args."""
    v.priority_fn = v.select(PRIORITY_FN, f"{key}.priority_fn", priority_fn, args)


def check_taskset(key: str, taskset: TasksetConfig, is_eval: bool, v: Validation) -> None:
    """One taskset: storage, path, workflow, reward and selector plugins."""
    if taskset.data_selector is not None:
        if taskset.task_selector != TaskSelectorConfig():
            v.problem(f"{key}.data_selector", "set either data_selector or task_selector "
                      "(its older name), not both")
        taskset.task_selector = taskset.data_selector
    if taskset.storage_type in ("file", "sql"):
        if not taskset.path:
            v.problem(f"{key}.path", f"must be set for storage_type {taskset.storage_type!r}")
        _data_path_here(v, f"{key}.path", taskset.path)
    if taskset.default_workflow_type is None:
        v.problem(f"{key}.default_workflow_type",
                  "no workflow: set it here or buffer.explorer_input.default_workflow_type")
    workflow = v.select(WORKFLOW, f"{key}.default_workflow_type",
                        taskset.default_workflow_type, taskset.workflow_args,
                        f"{key}.workflow_args")
    fallback_reward(key, taskset, workflow, v)
    reward = v.select(REWARD_FN, f"{key}.default_reward_fn_type",
                      taskset.default_reward_fn_type, taskset.reward_fn_args,
                      f"{key}.reward_fn_args")
    selector = taskset.task_selector
    chosen_selector = v.select(TASK_SELECTOR, f"{key}.task_selector.selector_type",
                               selector.selector_type, selector.kwargs,
                               f"{key}.task_selector.kwargs")
    if workflow is not None and chosen_selector is not None:
        planned = TasksetPlan(key, taskset, is_eval, workflow, reward, chosen_selector,
                              **row_plugins(key, taskset, v))
        (v.eval_tasksets if is_eval else v.tasksets).append(planned)


def fallback_reward(key: str, taskset: TasksetConfig, workflow: Selected[Any] | None,
                    v: Validation) -> None:
    """A taskset naming no reward function whose workflow declares one to fall back to
    (:attr:`rft.workflow.Workflow.default_reward_fn`) gets it, said in one line."""
    name = default_reward_fn(workflow.implementation) if workflow is not None else None
    if taskset.default_reward_fn_type is not None or name is None:
        return
    taskset.default_reward_fn_type = name
    v.warnings.append(f"{key}.default_reward_fn_type: not set; workflow "
                      f"{taskset.default_workflow_type!r} scores with its default reward "
                      f"function {name!r} (as in Trinity-RFT)")


def row_plugins(key: str, taskset: TasksetConfig, v: Validation) -> dict[str, Any]:
    """``format.workflow_key`` / ``reward_fn_key``: every registered workflow / reward
    function resolved by name (a row may name any), args from the taskset's
    ``workflow_args`` / ``reward_fn_args`` where its ``Args`` take them, else its defaults
    (said in a warning when those args are set). Keyword arguments of
    :class:`~rft.config.plan.TasksetPlan`."""
    found: dict[str, Any] = {}
    fmt = taskset.format
    for field_name, column, kind, args_name in (
            ("row_workflows", fmt.workflow_key, "workflow", "workflow_args"),
            ("row_rewards", fmt.reward_fn_key, "reward_fn", "reward_fn_args")):
        if not column:
            continue
        args = getattr(taskset, args_name) or {}
        if args:
            v.warnings.append(f"{key}.{args_name}: a row naming its own {KINDS[kind].label} "
                              f"(format.{kind}_key {column!r}) runs it "
                              "with these args where its Args take them, else with its "
                              "defaults")
        resolved = {}
        for name in v.registry.names(kind):
            implementation = v.registry.get(kind, name)
            for candidate in (args, {}):
                trial: list[str] = []
                built = build_args(implementation, name, candidate, f"{key}.{args_name}", trial)
                if not trial:
                    resolved[name] = Selected(f"{key}.format.{kind}_key", name,
                                              implementation, built)
                    break
        found[field_name] = resolved
    return found


def check_explorer(c: RftConfig, v: Validation) -> None:
    """Engine plugin, runner limits, eval interval as a multiple of sync interval."""
    e = c.explorer
    rm = e.rollout_model
    for key, value in (("explorer.rollout_model.engine_num", rm.engine_num),
                       ("explorer.rollout_model.tensor_parallel_size", rm.tensor_parallel_size),
                       ("explorer.runner_per_model", e.runner_per_model),
                       ("explorer.eval_interval", e.eval_interval)):
        if value <= 0:
            v.problem(key, f"must be > 0, got {value}")
    if e.max_timeout <= 0:
        v.problem("explorer.max_timeout", f"must be > 0 seconds, got {e.max_timeout}")
    if e.max_retry_times < 0:
        v.problem("explorer.max_retry_times", f"must be >= 0, got {e.max_retry_times}")
    if e.max_repeat_times_per_runner is not None and e.max_repeat_times_per_runner <= 0:
        v.problem("explorer.max_repeat_times_per_runner",
                  f"must be > 0, got {e.max_repeat_times_per_runner}")
    interval = c.synchronizer.sync_interval
    if interval > 0 and e.eval_interval > 0 and e.eval_interval % interval:
        rounded = max(interval, round(e.eval_interval / interval) * interval)
        v.warnings.append(f"explorer.eval_interval: {e.eval_interval} is not a multiple of "
                          f"synchronizer.sync_interval ({interval}); using {rounded}")
        e.eval_interval = rounded
    if not 0.0 <= e.over_rollout.ratio < 1.0:
        v.problem("explorer.over_rollout.ratio", f"must be within [0, 1), got "
                  f"{e.over_rollout.ratio}")
    if e.over_rollout.ratio > 0 and c.synchronizer.sync_style == "fixed":
        v.problem("explorer.over_rollout.ratio", "needs a dynamic synchronizer.sync_style "
                  "(explorer_driven or trainer_driven), got fixed")
    if e.dynamic_timeout.enable and e.dynamic_timeout.ratio <= 0:
        v.problem("explorer.dynamic_timeout.ratio", f"must be > 0, got {e.dynamic_timeout.ratio}")
    check_auxiliary_models(c, v)


def check_auxiliary_models(c: RftConfig, v: Validation) -> None:
    """The rollout model's and each auxiliary model's engine and endpoint; auxiliary models
    need a model path and a unique name."""
    names: dict[str, int] = {}
    rm = c.explorer.rollout_model
    models: list[tuple[str, InferenceModelConfig]] = [("explorer.rollout_model", rm)]
    for i, aux in enumerate(c.explorer.auxiliary_models):
        key = f"explorer.auxiliary_models[{i}]"
        models.append((key, aux))
        if not aux.model_path and not is_remote(v, aux.engine_type):
            v.problem(f"{key}.model_path", "must be set (the model this engine serves)")
        _require_local(v, f"{key}.model_path", aux.model_path)
        name = aux.name if aux.name is not None else str(i)
        if name in names:
            v.problem(f"{key}.name", f"{name!r} is also the name of "
                      f"explorer.auxiliary_models[{names[name]}]")
        names.setdefault(name, i)
    for key, model in models:
        engine = v.select(ENGINE, f"{key}.engine_type", model.engine_type)
        _gpu_memory_utilization(c, key, model, v, reads_it=engine is not None and (
            "gpu_memory_utilization" in getattr(engine.implementation, "engine_options", ())))
        if engine is not None and args_type_of(engine.implementation) is not None:
            # an engine declaring Args takes its extra_engine_args checked against them
            engine = Selected(engine.key, engine.name, engine.implementation, build_args(
                engine.implementation, engine.name, model.extra_engine_args,
                f"{key}.extra_engine_args", v.problems))
        if not 0 <= model.openai_api_port <= 65535:
            v.problem(f"{key}.openai_api_port", f"must be 0 (any free port) or a port "
                      f"number, got {model.openai_api_port}")
        host = model.openai_api_host
        outside = (why_not_loopback(host) if model.enable_openai_api
                   and not model.openai_api_key_env else None)
        if outside is not None:
            v.problem(f"{key}.openai_api_key_env", f"must name the environment variable "
                      f"holding an API key: openai_api_host {host!r} serves the model beyond "
                      f"this machine ({outside}; or use openai_api_host: 127.0.0.1)")
        if model.enable_openai_api and model.openai_api_key_env \
                and not os.environ.get(model.openai_api_key_env):
            v.warnings.append(f"{key}.openai_api_key_env: environment variable "
                              f"{model.openai_api_key_env} is not set here; the process "
                              f"serving the OpenAI API needs it")
        for field_name in ("openai_api_max_n", "openai_api_max_request_bytes"):
            if getattr(model, field_name) < 1:
                v.problem(f"{key}.{field_name}", f"must be >= 1, got "
                          f"{getattr(model, field_name)}")
        tool_calls, reasoning = check_reply_parsers(key, model, v)
        if engine is None:
            continue
        planned = ModelPlan(key, engine, tool_calls, reasoning)
        if model is rm:
            v.rollout_model = planned
        else:
            v.auxiliary_models.append(planned)


GPU_MEMORY_UTILIZATION = 0.9
"""``gpu_memory_utilization`` of a vLLM engine with a GPU of its own (vLLM's default)."""
COLOCATE_GPU_MEMORY_UTILIZATION = 0.5
"""``gpu_memory_utilization`` of the rollout model in mode ``colocate`` (veRL's default):
the engine and the trainer share each GPU."""


def _gpu_memory_utilization(c: RftConfig, key: str, model: InferenceModelConfig,
                            v: Validation, reads_it: bool) -> None:
    """Resolve an unset ``gpu_memory_utilization`` for an engine that ``reads_it``
    (:data:`COLOCATE_GPU_MEMORY_UTILIZATION` for the rollout model in mode ``colocate``,
    else :data:`GPU_MEMORY_UTILIZATION`; an engine that does not read it keeps ``None``, so
    nothing warns about a value the user never set); check a set one is within (0, 1]."""
    value = model.gpu_memory_utilization
    if value is None:
        if not reads_it:
            return
        shares_gpu = c.mode == "colocate" and key == "explorer.rollout_model"
        model.gpu_memory_utilization = (COLOCATE_GPU_MEMORY_UTILIZATION if shares_gpu
                                        else GPU_MEMORY_UTILIZATION)
    elif not 0.0 < value <= 1.0:
        v.problem(f"{key}.gpu_memory_utilization", f"must be within (0, 1], got {value}")


def check_reply_parsers(key: str, model: InferenceModelConfig, v: Validation
                        ) -> tuple[Selected[Any] | None, Selected[Any] | None]:
    """The OpenAI endpoint's parsers: known names; auto tool choice needs a tool parser.
    Returns the resolved ``(tool_call_parser, reasoning_parser)``."""
    tool_calls = v.select(TOOL_CALL_PARSER, f"{key}.tool_call_parser", model.tool_call_parser)
    reasoning = v.select(REASONING_PARSER, f"{key}.reasoning_parser", model.reasoning_parser)
    if model.enable_auto_tool_choice and not model.tool_call_parser:
        v.problem(f"{key}.enable_auto_tool_choice", "needs tool_call_parser (the format the "
                  "model writes its tool calls in, e.g. hermes)")
    if not model.enable_openai_api:
        for field_name in ("enable_auto_tool_choice", "tool_call_parser", "reasoning_parser"):
            if getattr(model, field_name):
                v.warnings.append(f"{key}.{field_name}: has no effect without "
                                  "enable_openai_api (the parsers serve the OpenAI endpoint)")
    return tool_calls, reasoning


def check_cluster(c: RftConfig, v: Validation) -> None:
    """GPU split: explorer = engines × TP, auxiliary models, trainer = the rest."""
    cl = c.cluster
    if cl.node_num is not None and cl.node_num <= 0:
        v.problem("cluster.node_num", f"must be > 0, got {cl.node_num}")
    if cl.gpu_per_node is not None and cl.gpu_per_node < 0:
        v.problem("cluster.gpu_per_node", f"must be >= 0, got {cl.gpu_per_node}")
    rm = c.explorer.rollout_model
    # a remote engine (external) runs on its own server: no GPU of the run
    explorer_gpus = 0 if is_remote(v, rm.engine_type) else \
        rm.engine_num * rm.tensor_parallel_size
    auxiliary_gpus = sum(m.engine_num * m.tensor_parallel_size
                         for m in c.explorer.auxiliary_models if not is_remote(v, m.engine_type))
    known = cl.node_num is not None and cl.gpu_per_node is not None
    total = (cl.node_num or 0) * (cl.gpu_per_node or 0)  # None: detected from Ray at launch
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if aux.engine_num <= 1:
            continue
        if c.mode in ("colocate", "bench"):  # one process: the model's engine runs there
            v.problem(f"explorer.auxiliary_models[{i}].engine_num",
                      f"mode {c.mode!r} runs an auxiliary model as one engine in its "
                      f"process, got {aux.engine_num}: use 1")
        elif is_remote(v, aux.engine_type):
            v.warnings.append(f"explorer.auxiliary_models[{i}].engine_num: an external model "
                              "is served by its own server and rft opens one client to it; "
                              "it has no effect")
    if c.mode == "colocate":
        if rm.engine_num != 1 or rm.tensor_parallel_size != 1:
            v.problem("explorer.rollout_model.engine_num",
                      "mode 'colocate' runs one engine per device (per trainer rank) with "
                      f"tensor_parallel_size 1, got engine_num={rm.engine_num}, "
                      f"tensor_parallel_size={rm.tensor_parallel_size}")
        check_colocated_auxiliary_models(c, v)
        return
    if (gpus := cl.gpu_per_node or 0) > 0 and rm.tensor_parallel_size > gpus:
        v.problem("explorer.rollout_model.tensor_parallel_size",
                  f"{rm.tensor_parallel_size} is larger than a node "
                  f"(cluster.gpu_per_node = {cl.gpu_per_node}): a tensor-parallel group runs "
                  "on one node")
    if c.mode == "bench" and rm.engine_num > 1:
        v.problem("explorer.rollout_model.engine_num",
                  f"mode 'bench' runs one engine in its process; {rm.engine_num} engines "
                  "(Ray actors) need mode 'explore' or 'both'")
    if c.mode not in GPU_MODES or not known or total == 0:
        return
    explorer_side = explorer_gpus + auxiliary_gpus if c.mode != "train" else auxiliary_gpus
    trainer_gpus = total - explorer_side if c.mode in ("both", "train") else 0
    if c.mode in ("both", "explore", "bench") and explorer_side > total:
        v.problem("explorer.rollout_model.engine_num",
                  f"explorer needs {explorer_gpus} GPUs (+{auxiliary_gpus} auxiliary) but the "
                  f"cluster has {total}")
    elif c.mode in ("both", "train") and trainer_gpus <= 0:
        v.problem("cluster.gpu_per_node",
                  f"no GPU left for the trainer: cluster has {total}, explorer uses "
                  f"{explorer_gpus}, auxiliary models {auxiliary_gpus}")
    cl.explorer_gpu_num = explorer_gpus
    cl.auxiliary_gpu_num = auxiliary_gpus
    cl.trainer_gpu_num = max(trainer_gpus, 0)


def check_colocated_auxiliary_models(c: RftConfig, v: Validation) -> None:
    """``colocate`` shares one device: auxiliary models run there only on CPU machines
    (``cluster.gpu_per_node: 0``, or unset without a GPU), with an in-process engine."""
    local = [aux for aux in c.explorer.auxiliary_models if not is_remote(v, aux.engine_type)]
    if not local:  # none, or remote ones only (external: they use no device here)
        return
    gpus = c.cluster.gpu_per_node
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    if gpus:
        v.problem("explorer.auxiliary_models", f"mode 'colocate' on a GPU machine "
                  f"({gpus} GPU(s) per node) runs no auxiliary models (they need GPUs of "
                  "their own): use mode 'both', or run on CPU (cluster.gpu_per_node: 0)")
        return
    for i, aux in enumerate(c.explorer.auxiliary_models):
        if aux.engine_type not in COLOCATED_AUXILIARY_ENGINES \
                and not is_remote(v, aux.engine_type):
            v.problem(f"explorer.auxiliary_models[{i}].engine_type",
                      "mode 'colocate' runs auxiliary models in its own process: use "
                      + " or ".join(repr(e) for e in COLOCATED_AUXILIARY_ENGINES)
                      + f", got {aux.engine_type!r}")


COLOCATED_AUXILIARY_ENGINES = ("hf", "vllm")
"""Engines an auxiliary model may use in ``colocate`` mode (CPU machines)."""


def check_synchronizer(c: RftConfig, v: Validation) -> None:
    """Sync method against mode; positive intervals and timeout."""
    s = c.synchronizer
    allowed = SYNC_METHODS_BY_MODE.get(c.mode, ())
    if s.sync_method is None and allowed:
        s.sync_method = allowed[0]
    if s.sync_method not in allowed:
        v.problem("synchronizer.sync_method",
                  f"{s.sync_method!r} does not work in mode {c.mode!r}; use "
                  + " or ".join(repr(m) for m in allowed))
    if s.sync_interval <= 0:
        v.problem("synchronizer.sync_interval", f"must be > 0, got {s.sync_interval}")
    if s.sync_offset < 0:
        v.problem("synchronizer.sync_offset", f"must be >= 0, got {s.sync_offset}")
    if s.sync_timeout <= 0:
        v.problem("synchronizer.sync_timeout", f"must be > 0 seconds, got {s.sync_timeout}")
    if c.mode == "colocate" and s.sync_offset != 0:
        v.problem("synchronizer.sync_offset",
                  f"mode 'colocate' alternates explore and train: must be 0, got {s.sync_offset}")


def unhonoured_trainer_keys(tree: dict[str, Any] | None) -> list[str]:
    """Dotted keys set in ``trainer_config`` that the ``torch`` trainer does not read (the
    ones it reads: :data:`rft.config.support.TRAINER_CONFIG_HONOURED`)."""
    from rft.config.support import TRAINER_CONFIG_HONOURED

    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif prefix and prefix not in TRAINER_CONFIG_HONOURED:
            found.append(prefix)

    walk(tree or {}, "")
    return found


def trainer_ranks(c: RftConfig) -> int:
    """Processes of the trainer (see ``TrainerConfig.ranks``)."""
    t, cl = c.trainer, c.cluster
    if c.mode not in ("both", "train", "colocate") or t.trainer_strategy == "megatron":
        return 1
    if c.mode == "colocate" and t.trainer_type != "torch":
        return 1  # the ranks that hold the rollout engines are the torch trainer's
    gpus = cl.gpu_per_node
    if gpus is None:  # not given: this machine decides CPU or GPU
        import torch

        gpus = torch.cuda.device_count()
        if gpus:
            return 1  # the GPU split is unknown without cluster.node_num / gpu_per_node
    if gpus == 0:
        return max(1, t.cpu_ranks)
    if c.mode == "colocate":  # every device: a trainer rank and its rollout engine
        return max(1, (cl.node_num or 1) * gpus)
    return max(1, cl.trainer_gpu_num or 1)


def check_trainer(c: RftConfig, v: Validation) -> None:
    """Trainer plugin, total steps, checkpoint settings; the trainer's ranks (FSDP2) and,
    for the ``torch`` trainer, the ``trainer_config`` keys it does not honour; then the
    backend's own :meth:`~rft.trainer.base.Trainer.check_config`."""
    t = c.trainer
    v.trainer = v.select(TRAINER, "trainer.trainer_type", t.trainer_type)
    if t.total_steps is None:
        t.total_steps = c.buffer.total_steps
    if t.rank_timeout is None:
        t.rank_timeout = float(c.synchronizer.sync_timeout)
    if t.cpu_ranks <= 0:
        v.problem("trainer.cpu_ranks", f"must be > 0, got {t.cpu_ranks}")
    else:
        check_trainer_ranks(c, v)
    derive_token_budget(c)  # an unset max_token_len_per_gpu (rft.config.token_budget)
    if t.save_interval < 0:
        v.problem("trainer.save_interval", f"must be >= 0, got {t.save_interval}")
    if t.max_checkpoints_to_keep is not None and t.max_checkpoints_to_keep <= 0:
        v.problem("trainer.max_checkpoints_to_keep",
                  f"must be > 0 (or null to keep all), got {t.max_checkpoints_to_keep}")
    check_grad_clip(c, v)
    check = getattr(v.trainer.implementation, "check_config", None) if v.trainer else None
    if check is not None:  # the backend's own checks (Trainer.check_config)
        problems, warnings = check(c)
        v.problems.extend(problems)
        v.warnings.extend(warnings)


def check_grad_clip(c: RftConfig, v: Validation) -> None:
    """``trainer.grad_clip`` unset: ``algorithm.optimizer.clip_grad`` (Trinity-RFT's name,
    veRL's ``optim.clip_grad``), else ``DEFAULT_GRAD_CLIP``; both set must agree."""
    t, clip_grad = c.trainer, c.algorithm.optimizer.clip_grad
    if clip_grad is not None and clip_grad <= 0:
        v.problem("algorithm.optimizer.clip_grad", f"must be > 0, got {clip_grad}")
    if t.grad_clip is not None and t.grad_clip <= 0:
        v.problem("trainer.grad_clip", f"must be > 0, got {t.grad_clip}")
    if t.grad_clip is not None and clip_grad is not None and t.grad_clip != clip_grad:
        v.problem("trainer.grad_clip", f"{t.grad_clip} differs from algorithm.optimizer."
                  f"clip_grad {clip_grad} (the same gradient clip); set one of them")
    if t.grad_clip is None:
        t.grad_clip = clip_grad if clip_grad is not None else DEFAULT_GRAD_CLIP


def check_memory(c: RftConfig, v: Validation) -> None:
    """The trainer's memory per device against the device (:mod:`rft.config.memory_estimate`):
    a warning with suggestions when it does not fit, unless ``ignore_validator_suggestions``.
    Skipped for LoRA, and where the model's ``config.json`` or the device is not here."""
    from rft.config import memory_estimate as me

    if c.ignore_validator_suggestions or c.mode not in ("both", "train", "colocate") \
            or c.model.lora_configs or not c.model.model_path:
        return
    shape = me.read_shape(c.model.model_path)
    if shape is None:
        return
    t = c.trainer
    ranks = t.ranks or 1
    memory = me.trainer_memory(t.trainer_config, ranks, t.max_token_len_per_gpu)
    gpus = c.cluster.gpu_per_node
    import torch

    local_gpus = torch.cuda.device_count()  # NVML: CUDA stays uninitialised here
    if gpus == 0 or (gpus is None and not local_gpus):  # CPU ranks share the host's memory
        host = me.available_host_bytes()
        if host is None:
            return
        device_bytes, device = host, "host (available RAM)"
        sharing = -(-ranks // max(1, c.cluster.node_num or 1))
    else:
        gpu = me.gpu_total_bytes() if local_gpus else None
        if gpu is None:
            return  # GPUs elsewhere (none here): their memory is unknown here
        device_bytes, device, sharing = gpu, "GPU", 1
    line = me.suggestion(shape, memory, device_bytes, device, sharing)
    if line is not None:
        v.warnings.append(line)


def check_rollout_logprobs(c: RftConfig, v: Validation) -> None:
    """``trainer_config.torch.use_rollout_logprobs`` trains on the engine's log-probs as the
    old ones: refused where the engine keeps its processed log-probs (no full-vocabulary
    re-scoring, :attr:`~rft.engines.engine.InferenceEngine.keeps_processed_logprobs`) for
    this sampling: ``T ∉ {0, 1}`` with top-p < 1, top-k > 0 or a repetition penalty."""
    engine = v.rollout_model.engine if v.rollout_model is not None else None
    torch_tree = (c.trainer.trainer_config or {}).get("torch") or {}
    if engine is None or not getattr(engine.implementation, "keeps_processed_logprobs", False) \
            or not torch_tree.get("use_rollout_logprobs"):
        return
    m, rm = c.model, c.explorer.rollout_model
    penalty = rm.repetition_penalty if rm.repetition_penalty is not None else m.repetition_penalty
    processed = (m.top_p < 1.0 or m.top_k > 0 or penalty != 1.0)
    if m.temperature in (0.0, 1.0) or not processed \
            or (rm.extra_engine_args or {}).get("rescore_full_vocabulary"):
        return
    v.problem("trainer.trainer_config.torch.use_rollout_logprobs",
              f"engine {engine.name!r} keeps its processed log-probs at temperature "
              f"{m.temperature:g} with top_p / top_k / repetition_penalty (re-scoring needs "
              f"full-vocabulary prompt log-probs): leave it false (the trainer scores) or set "
              f"explorer.rollout_model.extra_engine_args.rescore_full_vocabulary: true")


def check_trainer_ranks(c: RftConfig, v: Validation) -> None:
    """``trainer.ranks`` and what the ``torch`` trainer needs of it."""
    t, cl = c.trainer, c.cluster
    torch_trainer = t.trainer_type == "torch"
    if torch_trainer and t.trainer_strategy == "megatron":
        if c.mode in ("both", "train") and (cl.trainer_gpu_num or 0) > 1:
            v.problem("trainer.trainer_strategy", "'megatron' is not supported by the torch "
                      "trainer: use fsdp2 (or trainer_type verl)")
        else:
            v.warnings.append("trainer.trainer_strategy: 'megatron' is not supported by the "
                              "torch trainer; it runs as one process")
    if t.ranks is None:
        t.ranks = trainer_ranks(c)
    if c.mode == "colocate" and t.cpu_ranks > 1 and t.ranks == 1:
        v.warnings.append(f"trainer.cpu_ranks: {t.cpu_ranks} ranks in mode 'colocate' need "
                          f"the torch trainer on a CPU cluster (cluster.gpu_per_node: 0); it "
                          "runs one trainer process")
    if cl.gpu_per_node == 0 and t.ranks > 1:
        import os

        cpus = (os.cpu_count() or 1) * (cl.node_num or 1)
        if t.ranks > cpus:
            v.problem("trainer.cpu_ranks", f"{t.ranks} trainer ranks need one CPU each but "
                      f"the cluster has {cpus} ({cl.node_num or 1} node(s) of "
                      f"{os.cpu_count()} CPUs)")
    if not torch_trainer:
        return
    if t.ulysses_sequence_parallel_size != 1:
        v.warnings.append(f"trainer.ulysses_sequence_parallel_size: "
                          f"{t.ulysses_sequence_parallel_size} is not honoured by the torch "
                          "trainer (no sequence parallelism); it runs with 1")
    from rft.config.support import TRAINER_CONFIG_REASON

    for key in unhonoured_trainer_keys(t.trainer_config):
        v.warnings.append(f"trainer.trainer_config.{key}: {TRAINER_CONFIG_REASON}")
    if t.ranks > 1 and v.preset is not None and c.buffer.train_batch_size:
        unit = v.preset.batch_layout.unit_size
        tree = t.trainer_config or {}
        mini = (tree.get("actor_rollout_ref") or {}).get("actor", {}) or {}
        mini_size = mini.get("ppo_mini_batch_size") if isinstance(mini, dict) else None
        rows = (int(mini_size) * (c.algorithm.repeat_times or 1) if mini_size
                else c.buffer.train_batch_size)
        rows = min(rows, c.buffer.train_batch_size)
        if rows // unit < t.ranks:
            v.problem("trainer.ranks", f"{t.ranks} trainer ranks need at least {t.ranks} "
                      f"{'rows' if unit == 1 else 'units of ' + str(unit) + ' rows'} per "
                      f"mini-batch (optimizer step), got {rows} rows "
                      "(buffer.train_batch_size, or actor_rollout_ref.actor."
                      "ppo_mini_batch_size × repeat_times)")


SPLIT_MODES = ("explore", "train", "bench")
"""Modes that run one side of a run alone; weights move through the job dir's checkpoints."""


def check_split_modes(c: RftConfig, v: Validation) -> None:
    """``explore`` / ``train`` / ``bench``: what a side running alone needs from the config
    (the other side is another process that shares the job dir and the experience buffer)."""
    if c.mode not in SPLIT_MODES:
        return
    train_only = v.preset is not None and v.preset.train_only
    buffer_key = "buffer.trainer_input.experience_buffer.storage_type"
    storage = c.buffer.trainer_input.experience_buffer
    assert storage is not None  # check_buffer filled it in
    if c.mode == "explore" and train_only:
        v.problem("mode", f"algorithm {c.algorithm.algorithm_type!r} is train-only: there is "
                  "nothing to explore; use mode 'train'")
    if storage.storage_type == "queue" and c.mode in ("explore", "train") and not train_only:
        check_shared_queue(c, storage, v)
    if c.mode == "train" and not train_only:
        if storage.storage_type not in ("sql", "queue"):
            v.problem(buffer_key, f"mode 'train' with algorithm {c.algorithm.algorithm_type!r} "
                      "reads what an 'explore' process writes: use 'sql' (or 'queue' on a "
                      f"shared Ray cluster), got {storage.storage_type!r}")
        if not c.trainer.total_steps and not _tasksets(c):
            v.problem("buffer.total_steps", "mode 'train' cannot tell how many steps to train: "
                      "set it (or trainer.total_steps), or give the explorer's taskset")
    if c.mode == "bench":
        if not c.buffer.explorer_input.eval_tasksets:
            v.problem("buffer.explorer_input.eval_tasksets",
                      "mode 'bench' evaluates checkpoints on eval tasksets: set at least one")
        hosted = is_remote(v, c.explorer.rollout_model.engine_type)  # needs no checkpoint
        if not c.continue_from_checkpoint and not hosted:
            v.problem("continue_from_checkpoint", "mode 'bench' evaluates the checkpoints of "
                      "an existing run: must be true (false starts a new, empty <name>_<time>)")
    elif not c.continue_from_checkpoint and not (c.mode == "train" and train_only):
        v.warnings.append(f"continue_from_checkpoint: false gives this {c.mode!r} run its own "
                          "<name>_<timestamp> job dir, which the other side's process will not "
                          "find; set true to share checkpoints")


def check_shared_queue(c: RftConfig, storage: ExperienceBufferConfig, v: Validation) -> None:
    """A ``queue`` between an ``explore`` and a ``train`` process is a Ray actor on a cluster
    both join (:mod:`rft.distributed.shared_queue`): not a private cluster, not a replay
    buffer."""
    if c.cluster.ray_address == "local":
        v.problem("cluster.ray_address", f"'local' starts a private Ray cluster, but "
                  f"storage_type 'queue' in mode {c.mode!r} lives on a Ray cluster that the "
                  "explore and train processes share: give its address, or auto")
    if storage.replay_buffer is not None and storage.replay_buffer.enable:
        v.problem("buffer.trainer_input.experience_buffer.replay_buffer.enable",
                  f"a replay buffer is not shared between processes (mode {c.mode!r}); "
                  "use it in mode 'both' or 'colocate'")


def check_monitor(c: RftConfig, v: Validation) -> None:
    """Monitor plugin and its args."""
    v.monitor = v.select(MONITOR, "monitor.monitor_type", c.monitor.monitor_type,
                         c.monitor.monitor_args)
    check_ray_timeline(c, v)


def check_data_processor(c: RftConfig, v: Validation) -> None:
    """Experience operators named in the experience pipeline."""
    pipeline = c.data_processor.experience_pipeline
    if pipeline is None:
        return
    for i, operator in enumerate(pipeline.operators):
        key = f"data_processor.experience_pipeline.operators[{i}]"
        chosen = v.select(EXPERIENCE_OPERATOR, f"{key}.name", operator.name, operator.args,
                          f"{key}.args")
        if chosen is not None:
            v.operators.append(chosen)


def check_support(c: RftConfig, v: Validation) -> None:
    """Fields rft accepts but does not implement (:mod:`rft.config.support`): one line each
    naming the key, a warning (a problem where running without it would mislead); and the
    ``trainer.trainer_config`` key paths the torch trainer does not read. A key an earlier
    check already reported is not reported again."""
    from rft.config.support import support_messages

    problems, warnings = support_messages(c)
    said = {line.split(": ", 1)[0] for line in v.problems + v.warnings}
    v.problems.extend(p for p in problems if p.split(": ", 1)[0] not in said)
    v.warnings.extend(w for w in warnings if w.split(": ", 1)[0] not in said)


CHECKS: tuple[Callable[[RftConfig, Validation], None], ...] = (
    check_trinity_forms,
    check_global, check_algorithm, derive_external_model, check_model, check_buffer,
    check_datasets, check_explorer, check_cluster, check_external_engines, check_synchronizer,
    check_trainer, check_memory, check_lora, check_rollout_logprobs, check_split_modes,
    check_monitor, check_data_processor, check_host, check_support,
)
"""Checks in the order they run; later checks read what earlier ones derived."""


def validate(config: RftConfig, registry: PluginRegistry) -> Validated:
    """Derive and check ``config`` in place; return ``(problems, warnings, plan)``."""
    found = Validation(registry)
    for check in CHECKS:
        check(config, found)
    return Validated(found.problems, found.warnings, found.plan(config))


def fields_as_dict(config: Any) -> dict[str, Any]:
    """Plain-data view of a (validated) config, for printing."""
    return dataclasses.asdict(config)
