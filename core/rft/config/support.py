"""Which config fields rft honours: a registry entry for every field of every schema class.

The configuration guide documents more fields than rft implements. Silence is the worst
answer, so every field of every dataclass in :mod:`rft.config.schema` has exactly one
entry in :data:`SUPPORT` (``tests/test_config_support.py`` fails, naming the field, when
one is missing), keyed ``"ClassName.field"`` (a subclass inherits its base class's
entries unless it has its own):

- :class:`Consumed`: the field has its documented effect; ``modules`` are the modules that
  read it (the test checks that each of them really reads an attribute of that name).
  Values it accepts without implementing them (``trainer_strategy: megatron``) are its
  ``unsupported`` part, reported like an unsupported field.
- :class:`Unsupported`: rft accepts the field but does not implement it. Validation
  (:func:`check_support`, the last of :data:`rft.config.validate.CHECKS`) reports a user
  who sets it (to anything but its default, or to what ``when`` matches) in one line
  ``dotted.key: <reason>``: a warning, or a problem where running without it would
  mislead (``severity="error"``, e.g. the Tinker service).
- :class:`Derived`: validation fills it in (``cluster.trainer_gpu_num``, ...).
- :class:`Structural`: a section or container whose own fields have their entries.

``trainer.trainer_config`` is a free-form veRL tree. The native ``torch`` trainer reads
the key paths in :data:`TRAINER_CONFIG_HONOURED` (see :mod:`rft.trainer.options`); with
``trainer_type: torch`` every other key path set there is a warning naming it.

``scripts/config_support_table.py`` renders the registry as the "support" tables of
``docs/configuration.md``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union

from rft.config import schema

# --------------------------------------------------------------------------------------
# Entry types
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Consumed:
    """The field has its documented effect."""

    modules: tuple[str, ...]
    """Modules that read the field (``rft.rollout.explorer``, ``rft_plugin_workflows...``)."""
    note: str = ""
    """Where / how it acts, when that is worth saying."""
    unsupported: Unsupported | None = None
    """Values the field accepts but rft does not implement (its ``when``), reported like
    an unsupported field; ``None``: every value works."""


@dataclass(frozen=True)
class Unsupported:
    """Accepted, but rft does not implement the field."""

    reason: str
    """The message after ``dotted.key: ``; one line."""
    severity: Literal["warning", "error"] = "warning"
    """``error``: running without the field would mislead (validation fails)."""
    when: Callable[[Any], bool] | None = None
    """Which values are reported; ``None``: any value but the default (an empty list /
    mapping, or a section equal to its defaults, counts as unset where the default is
    ``None``)."""
    example: Any = None
    """A value that is reported (tests); ``None``: one derived from the field's type."""


@dataclass(frozen=True)
class Derived:
    """Validation fills the value in; users leave it unset."""

    note: str


@dataclass(frozen=True)
class Structural:
    """A section or a container of sections; its own fields have their entries."""

    note: str = ""


Support = Consumed | Unsupported | Derived | Structural

# --------------------------------------------------------------------------------------
# Consumers (modules), named once
# --------------------------------------------------------------------------------------

VALIDATE = "rft.config.validate"
TRINITY_FORMS = "rft.config.trinity_forms"
BUILD_STAGES = "rft.config"
OPTIM = "rft.trainer.optim"
OPTIONS = "rft.trainer.options"
TORCH_TRAINER = "rft.trainer.torch_trainer"
ENGINE = "rft.engines.engine"
ENGINE_FACTORY = "rft.engines.engine_factory"
VLLM = "rft.engines.vllm_engine"
EXTERNAL_ENGINE = "rft.engines.external_engine"
EXTERNAL_CHECKS = "rft.config.external"
EXPLORER = "rft.rollout.explorer"
AUXILIARY = "rft.rollout.auxiliary"
REPLY_PARSING = "rft.engines.reply_parsing"
OPENAI_SERVER = "rft.endpoint.openai_server"
TASKSET = "rft.buffer.taskset"
SFT_DATA = "rft.buffer.sft_data"
BUFFER_FACTORY = "rft.buffer.factory"
BUILDERS = "rft.modes.builders"
STAGE = "rft.modes.stage"
BENCH = "rft.modes.bench"
EXPLORE = "rft.modes.explore"
TRAIN = "rft.modes.train"
COLOCATE = "rft.modes.colocate"
BOTH = "rft.modes.both.coordinator"
BOTH_ENTRY = "rft.modes.both"
BOTH_CHECKPOINTS = "rft.modes.both.checkpoints"
BOTH_ACTORS = "rft.distributed.both_actors"
WORKERS = "rft.distributed.workers"
CLUSTER = "rft.distributed.cluster"
EXPLORE_ENGINES = "rft.distributed.explore_engines"
SHARED_QUEUE = "rft.distributed.shared_queue"
PLAN = "rft.config.plan"
LOGS = "rft.logs"
CHAT_TEMPLATE = "rft.chat_template"
PREFERENCE_DATA = "rft.buffer.preference_data"
DATA_CHECKS = "rft.config.data_checks"
OFFLINE = "rft.buffer.offline"
LORA_CHECK = "rft.config.lora"
TRAINER_LORA = "rft.trainer.lora"
VERL_LORA = "rft_plugin_verl.lora"


def _c(*modules: str, note: str = "", unsupported: Unsupported | None = None) -> Consumed:
    return Consumed(tuple(modules), note, unsupported)


_RESOLVED = "resolved through the plugin registry into the run plan"
_NO_EFFECT = "not implemented by rft; it has no effect"
_TINKER = "the Tinker training service is not supported by rft; it has no effect"
_DATA_JUICER = "the Data-Juicer service is not supported by rft; it has no effect"
_TASK_PIPELINE = "task pipelines are not implemented by rft; tasks are used as read"
_TEMPLATE_ORDER = "precedence: docs/configuration.md, chat templates"
_RETRY_READ = ("a read that failed because the file is not there (yet) or the SQLite file is "
               "locked is tried again; then one line names it; unset: buffer's value")
_RETRY_SQL = ("sql: an operation that failed on a locked / busy database or a disk I/O error "
              "is tried again; file datasets: as a taskset's read; unset: buffer's value")
_RETRY_DEFAULT = ("the value of every taskset and experience buffer that sets none "
                  "(Trinity-RFT 0.2's buffer-level setting)")
_PROGRESS = "datasets' progress bars (sql: a tqdm bar) on stderr while loading"


def _positive(value: Any) -> bool:
    return value is not None and value > 0


# --------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------

SUPPORT: dict[str, Support] = {
    # ---- algorithm.optimizer ------------------------------------------------------------
    "OptimizerConfig.lr": _c(OPTIM, OPTIONS),
    "OptimizerConfig.lr_warmup_steps": _c(OPTIM),
    "OptimizerConfig.lr_warmup_steps_ratio": _c(OPTIM),
    "OptimizerConfig.min_lr_ratio": _c(OPTIM),
    "OptimizerConfig.warmup_style": _c(OPTIM),
    "OptimizerConfig.lr_scheduler_type": _c(OPTIM),
    "OptimizerConfig.optimizer_type": _c(OPTIM, note="adam / adamw only"),
    "OptimizerConfig.betas": _c(OPTIM),
    "OptimizerConfig.weight_decay": _c(OPTIM),
    "OptimizerConfig.clip_grad": _c(VALIDATE, "rft.config.schema", note="the trainer's gradient clip when "
                                    "trainer.grad_clip is unset; both set: must agree"),
    # ---- algorithm ----------------------------------------------------------------------
    "AlgorithmConfig.algorithm_type": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.repeat_times": _c(VALIDATE, TASKSET),
    "AlgorithmConfig.optimizer": Structural(),
    "AlgorithmConfig.sample_strategy": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.sample_strategy_args": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.add_strategy": Unsupported(
        "Trinity-RFT's older way to compute advantages in the explorer, not supported by rft "
        "(running without it would train on other advantages): for step-wise GRPO use "
        "algorithm_type: multi_step_grpo, or name the operator in "
        "data_processor.experience_pipeline.operators", severity="error"),
    "AlgorithmConfig.advantage_fn": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.advantage_fn_args": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.policy_loss_fn": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.policy_loss_fn_args": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.kl_penalty_fn": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.kl_penalty_fn_args": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.kl_loss_fn": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.kl_loss_fn_args": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.entropy_loss_fn": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.entropy_loss_fn_args": _c(VALIDATE, note=_RESOLVED),
    "AlgorithmConfig.loss_agg_mode": _c(VALIDATE, TORCH_TRAINER),
    # ---- model.lora_configs[i] (reported through model.lora_configs) ------------------
    "LoRAConfig.name": _c(TRAINER_LORA, note="the adapter's name in syncs and exports"),
    "LoRAConfig.path": _c(TRAINER_LORA, LORA_CHECK, VERL_LORA,
                          note="start from this peft adapter"),
    "LoRAConfig.base_model_name": _c(TRAINER_LORA, note="written to adapter_config.json"),
    "LoRAConfig.lora_rank": _c(TRAINER_LORA, LORA_CHECK, VLLM, VERL_LORA),
    "LoRAConfig.lora_alpha": _c(LORA_CHECK, VERL_LORA),
    "LoRAConfig.lora_dtype": _c(TRAINER_LORA, LORA_CHECK, VERL_LORA,
                                note="verl: auto only"),
    "LoRAConfig.target_modules": _c(LORA_CHECK, VERL_LORA, note="all-linear, names, or a regex"),
    "LoRAConfig.exclude_modules": _c(LORA_CHECK, VERL_LORA),
    # ---- model.tinker -------------------------------------------------------------------
    "TinkerConfig.enable": Unsupported(
        "the Tinker training service is not supported by rft (a remote service it cannot "
        "reach); rft would train model.model_path locally instead", "error"),
    "TinkerConfig.rank": Unsupported(_TINKER),
    "TinkerConfig.seed": Unsupported(_TINKER),
    "TinkerConfig.train_mlp": Unsupported(_TINKER),
    "TinkerConfig.train_attn": Unsupported(_TINKER),
    "TinkerConfig.train_unembed": Unsupported(_TINKER),
    "TinkerConfig.base_url": Unsupported(_TINKER),
    "TinkerConfig.base_model": Unsupported(_TINKER),
    # ---- model.external_model -----------------------------------------------------------
    "ExternalModelConfig.enable": _c(EXTERNAL_CHECKS,
                                     note="engine 'external': modes bench and explore"),
    "ExternalModelConfig.base_url_env": _c(EXTERNAL_CHECKS, EXTERNAL_ENGINE),
    "ExternalModelConfig.api_key_env": _c(EXTERNAL_CHECKS, EXTERNAL_ENGINE),
    "ExternalModelConfig.model_name": _c(EXTERNAL_ENGINE, note="unset: the server's one model"),
    # ---- model --------------------------------------------------------------------------
    "ModelConfig.model_path": _c(ENGINE_FACTORY, TORCH_TRAINER, BUILDERS),
    "ModelConfig.trust_remote_code": _c(ENGINE_FACTORY, VLLM, TORCH_TRAINER),
    "ModelConfig.critic_model_path": _c(TORCH_TRAINER, note="unset: model.model_path"),
    "ModelConfig.custom_chat_template": _c(CHAT_TEMPLATE, note=_TEMPLATE_ORDER),
    "ModelConfig.chat_template_path": _c(CHAT_TEMPLATE, note=_TEMPLATE_ORDER),
    "ModelConfig.temperature": _c(ENGINE_FACTORY, OPTIONS),
    "ModelConfig.top_p": _c(ENGINE_FACTORY),
    "ModelConfig.top_k": _c(ENGINE_FACTORY),
    "ModelConfig.logprobs": Unsupported(
        "top log-probabilities are not returned (rft returns the sampled token's "
        "log-probability only, as with 0); it has no effect", when=_positive),
    "ModelConfig.max_model_len": _c(ENGINE_FACTORY, VALIDATE),
    "ModelConfig.max_prompt_tokens": _c(ENGINE_FACTORY, TORCH_TRAINER),
    "ModelConfig.max_response_tokens": _c(ENGINE_FACTORY, OPTIONS),
    "ModelConfig.min_response_tokens": _c(ENGINE_FACTORY),
    "ModelConfig.enable_prompt_truncation": _c(ENGINE_FACTORY),
    "ModelConfig.repetition_penalty": _c(ENGINE_FACTORY),
    "ModelConfig.enable_thinking": _c(ENGINE_FACTORY, VLLM),
    "ModelConfig.lora_configs": _c(LORA_CHECK, VLLM, ENGINE_FACTORY,
                                   note="one adapter; docs/lora.md"),
    "ModelConfig.fully_sharded_loras": _c(VLLM, LORA_CHECK, note="vllm engine with LoRA"),
    "ModelConfig.max_cpu_loras": _c(VLLM, LORA_CHECK, note="vllm engine with LoRA"),
    "ModelConfig.rope_scaling": _c(TORCH_TRAINER, ENGINE_FACTORY, VLLM,
                                   note="merged into the checkpoint's RoPE config (rft.rope); "
                                        "vllm: hf_overrides"),
    "ModelConfig.rope_theta": _c(TORCH_TRAINER, ENGINE_FACTORY, VLLM,
                                 note="overrides the checkpoint's; vllm: hf_overrides"),
    "ModelConfig.tinker": Structural(),
    "ModelConfig.external_model": Structural(),
    # ---- cluster ------------------------------------------------------------------------
    "ClusterConfig.ray_address": _c(CLUSTER, SHARED_QUEUE),
    "ClusterConfig.node_num": _c(VALIDATE, note="GPU split check"),
    "ClusterConfig.gpu_per_node": _c(VALIDATE, "rft.distributed.placement",
                                     note="unset: detected from the Ray cluster's GPUs"),
    "ClusterConfig.explorer_gpu_num": Derived("engine_num × tensor_parallel_size"),
    "ClusterConfig.auxiliary_gpu_num": Derived("sum over the auxiliary models"),
    "ClusterConfig.trainer_gpu_num": Derived("the GPUs left for the trainer"),
    # ---- format (tasksets and buffers) --------------------------------------------------
    "FormatConfig.prompt_type": _c(TASKSET, SFT_DATA, PREFERENCE_DATA),
    "FormatConfig.prompt_key": _c(TASKSET, SFT_DATA, PREFERENCE_DATA),
    "FormatConfig.response_key": _c(TASKSET, SFT_DATA),
    "FormatConfig.system_prompt_key": _c(TASKSET, SFT_DATA),
    "FormatConfig.system_prompt": _c(TASKSET, SFT_DATA),
    "FormatConfig.messages_key": _c(TASKSET, SFT_DATA, PREFERENCE_DATA),
    "FormatConfig.tools_key": _c(
        TASKSET, SFT_DATA, note="tasks: the workflow's chat prompts; SFT / DPO: the prompt"),
    "FormatConfig.image_key": Unsupported(
        "multi-modal data is not supported by rft: the images would be dropped and the "
        "model trained on the text alone", "error"),
    "FormatConfig.video_key": Unsupported(
        "multi-modal data is not supported by rft: the videos would be dropped and the "
        "model trained on the text alone", "error"),
    "FormatConfig.reply_prefix": Unsupported(
        "not read by rft's workflows (the math workflows take workflow_args.reply_prefix); "
        "it has no effect"),
    "FormatConfig.workflow_key": _c(TASKSET, VALIDATE, note="a row names its workflow"),
    "FormatConfig.reward_fn_key": _c(TASKSET, VALIDATE, note="a row names its reward function"),
    "FormatConfig.chosen_key": _c(PREFERENCE_DATA, note="DPO datasets"),
    "FormatConfig.rejected_key": _c(PREFERENCE_DATA, note="DPO datasets"),
    "FormatConfig.enable_concatenated_multi_turn": _c(
        SFT_DATA, DATA_CHECKS, note="SFT datasets of messages rows"),
    "FormatConfig.chat_template": _c(CHAT_TEMPLATE, DATA_CHECKS,
                                     note="training datasets; wins over the model's"),
    # ---- rollout_args -------------------------------------------------------------------
    "RolloutArgsConfig.temperature": _c(ENGINE, note="the task's sampling overrides"),
    "RolloutArgsConfig.top_p": _c(ENGINE, note="the task's sampling overrides"),
    "RolloutArgsConfig.top_k": _c(ENGINE, note="the task's sampling overrides"),
    "RolloutArgsConfig.logprobs": _c(
        "rft.engines.call_batching", note="any number: the sampled token's log-prob",
        unsupported=Unsupported(
            "top log-probabilities are not returned (rft returns the sampled token's "
            "log-probability only, as with 0); it has no effect", when=_positive, example=5)),
    "RolloutArgsConfig.max_tokens": _c(ENGINE, note="the task's sampling overrides"),
    "RolloutArgsConfig.n": Unsupported(
        "do not set: the samples per task are the taskset's repeat_times (workflows pass "
        "n themselves)", "error", when=lambda value: value is not None),
    # ---- task_selector ------------------------------------------------------------------
    "TaskSelectorConfig.selector_type": _c(VALIDATE, note=_RESOLVED),
    "TaskSelectorConfig.seed": _c(EXPLORER),
    "TaskSelectorConfig.feature_keys": _c(EXPLORER),
    "TaskSelectorConfig.kwargs": _c(VALIDATE, note=_RESOLVED),
    # ---- tasksets -----------------------------------------------------------------------
    "TasksetConfig.name": _c(TASKSET, EXPLORER),
    "TasksetConfig.storage_type": _c(TASKSET),
    "TasksetConfig.path": _c(TASKSET),
    "TasksetConfig.subset_name": _c(TASKSET),
    "TasksetConfig.split": _c(TASKSET),
    "TasksetConfig.repeat_times": _c(TASKSET, note="unset: algorithm.repeat_times / 1 (eval)"),
    "TasksetConfig.format": Structural(),
    "TasksetConfig.rollout_args": Structural(),
    "TasksetConfig.default_workflow_type": _c(VALIDATE, note=_RESOLVED),
    "TasksetConfig.default_reward_fn_type": _c(VALIDATE, note=_RESOLVED),
    "TasksetConfig.workflow_args": _c(VALIDATE, note=_RESOLVED),
    "TasksetConfig.reward_fn_args": _c(VALIDATE, note=_RESOLVED),
    "TasksetConfig.task_selector": Structural(),
    "TasksetConfig.data_selector": _c(VALIDATE, note="Trinity's newer name of task_selector"),
    "TasksetConfig.max_retry_times": _c(TASKSET, OFFLINE, note=_RETRY_READ),
    "TasksetConfig.max_retry_interval": _c(TASKSET, OFFLINE, note=_RETRY_READ),
    "TasksetConfig.enable_progress_bar": _c(TASKSET, OFFLINE, note=_PROGRESS),
    # ---- buffer.explorer_input ----------------------------------------------------------
    "ExplorerInputConfig.taskset": Structural(),
    "ExplorerInputConfig.tasksets": Structural(),
    "ExplorerInputConfig.eval_tasksets": Structural(),
    "ExplorerInputConfig.default_workflow_type": _c(VALIDATE, note="fills the tasksets'"),
    "ExplorerInputConfig.default_eval_workflow_type": _c(VALIDATE,
                                                         note="fills the eval tasksets'"),
    "ExplorerInputConfig.default_reward_fn_type": _c(VALIDATE, note="fills the tasksets'"),
    # ---- replay_buffer ------------------------------------------------------------------
    "ReplayBufferConfig.enable": _c(BUFFER_FACTORY, VALIDATE),
    "ReplayBufferConfig.priority_fn": _c(VALIDATE, note=_RESOLVED),
    "ReplayBufferConfig.reuse_cooldown_time": _c(BUFFER_FACTORY),
    "ReplayBufferConfig.priority_fn_args": _c(VALIDATE, note=_RESOLVED),
    # ---- experience buffers -------------------------------------------------------------
    "ExperienceBufferConfig.name": _c(BUFFER_FACTORY, BUILDERS, SHARED_QUEUE),
    "ExperienceBufferConfig.storage_type": _c(BUFFER_FACTORY, BUILDERS, SHARED_QUEUE),
    "ExperienceBufferConfig.path": _c(
        BUFFER_FACTORY, BUILDERS, SHARED_QUEUE, VALIDATE, note="queue: optional backup of "
        "every write, SQLite (sqlite:///…, .db, .sqlite) or JSON lines (.jsonl, .json)"),
    "ExperienceBufferConfig.capacity": _c(
        BUFFER_FACTORY, note="bounds a replay buffer; a plain queue is unbounded"),
    "ExperienceBufferConfig.max_read_timeout": _c(BUILDERS),
    "ExperienceBufferConfig.replay_buffer": Structural(),
    "ExperienceBufferConfig.use_priority_queue": _c(
        TRINITY_FORMS, note="Trinity's older replay_buffer.enable"),
    "ExperienceBufferConfig.max_retry_times": _c(BUFFER_FACTORY, BUILDERS, OFFLINE,
                                                 note=_RETRY_SQL),
    "ExperienceBufferConfig.max_retry_interval": _c(BUFFER_FACTORY, BUILDERS, OFFLINE,
                                                    note=_RETRY_SQL),
    "ExperienceBufferConfig.split": _c(OFFLINE, note="file datasets (SFT / DPO / auxiliary)"),
    "ExperienceBufferConfig.subset_name": _c(OFFLINE,
                                             note="file datasets (SFT / DPO / auxiliary)"),
    "ExperienceBufferConfig.format": Structural("file datasets (SFT / DPO)"),
    "ExperienceBufferConfig.enable_progress_bar": _c(OFFLINE, note=_PROGRESS),
    "ExperienceBufferConfig.total_epochs": _c(BUILDERS, DATA_CHECKS,
                                              note="auxiliary datasets; unset: as needed"),
    "ExperienceBufferConfig.schema_type": _c(DATA_CHECKS, note="checked against what rft reads"),
    "ExperienceBufferConfig.algorithm_type": _c(
        TRINITY_FORMS, note="Trinity 0.2's schema_type: sft, dpo, else experience"),
    # ---- buffer.trainer_input -----------------------------------------------------------
    "TrainerInputConfig.experience_buffer": Structural("unset: a queue named experience_buffer"),
    "TrainerInputConfig.auxiliary_buffers": _c(
        BUILDERS, DATA_CHECKS, note="file: SFT rows (mix's expert data); sql: experiences"),
    "TrainerInputConfig.sft_warmup_dataset": _c(
        TRINITY_FORMS, note="Trinity 0.2's mix expert data: auxiliary_buffers.sft_dataset"),
    # ---- buffer -------------------------------------------------------------------------
    "BufferConfig.batch_size": _c(EXPLORER, BUILDERS),
    "BufferConfig.train_batch_size": _c(BUILDERS, PLAN,
                                        note="unset: batch_size × repeat_times"),
    "BufferConfig.total_epochs": _c(BUILDERS),
    "BufferConfig.total_steps": _c(BUILDERS),
    "BufferConfig.explorer_input": Structural(),
    "BufferConfig.trainer_input": Structural(),
    "BufferConfig.max_retry_times": _c(VALIDATE, note=_RETRY_DEFAULT),
    "BufferConfig.max_retry_interval": _c(VALIDATE, note=_RETRY_DEFAULT),
    # ---- explorer.rollout_model / auxiliary_models[i] (shared fields) ------------------
    "InferenceModelConfig.model_path": _c(ENGINE_FACTORY, VLLM, AUXILIARY),
    "InferenceModelConfig.engine_type": _c(VALIDATE, note=_RESOLVED),
    "InferenceModelConfig.engine_num": _c("rft.distributed.placement", WORKERS,
                                          EXPLORE_ENGINES, VALIDATE),
    "InferenceModelConfig.tensor_parallel_size": _c(VLLM, "rft.distributed.placement",
                                                    VALIDATE),
    "InferenceModelConfig.use_v1": Unsupported(
        "not applied: rft's vllm engine always runs vLLM's V1 engine; it has no effect"),
    "InferenceModelConfig.enforce_eager": _c(VLLM, note="vllm engine"),
    "InferenceModelConfig.enable_prefix_caching": _c(VLLM, note="vllm engine"),
    "InferenceModelConfig.enable_chunked_prefill": _c(VLLM, note="vllm engine"),
    "InferenceModelConfig.gpu_memory_utilization": _c(VLLM, VALIDATE, note=(
        "vllm engine, CUDA; unset: 0.9, 0.5 in mode colocate")),
    "InferenceModelConfig.dtype": _c(ENGINE_FACTORY, VLLM),
    "InferenceModelConfig.seed": _c(ENGINE_FACTORY, VLLM),
    "InferenceModelConfig.extra_engine_args": _c(VLLM, EXTERNAL_ENGINE,
                                                 note="vllm and external engines"),
    "InferenceModelConfig.max_model_len": _c(ENGINE_FACTORY, VLLM),
    "InferenceModelConfig.max_prompt_tokens": _c(ENGINE_FACTORY, VLLM),
    "InferenceModelConfig.max_response_tokens": _c(ENGINE_FACTORY, VLLM, AUXILIARY),
    "InferenceModelConfig.min_response_tokens": _c(ENGINE_FACTORY, AUXILIARY),
    "InferenceModelConfig.enable_prompt_truncation": _c(ENGINE_FACTORY, VLLM),
    "InferenceModelConfig.repetition_penalty": _c(ENGINE_FACTORY, AUXILIARY),
    "InferenceModelConfig.ignore_eos": _c(ENGINE_FACTORY, VLLM, AUXILIARY),
    "InferenceModelConfig.chat_template": _c(CHAT_TEMPLATE, note=_TEMPLATE_ORDER),
    "InferenceModelConfig.enable_thinking": _c(ENGINE_FACTORY, VLLM),
    "InferenceModelConfig.enable_history": _c(EXPLORER, AUXILIARY),
    "InferenceModelConfig.enable_openai_api": _c(EXPLORER, AUXILIARY),
    "InferenceModelConfig.openai_api_host": _c(EXPLORER, AUXILIARY),
    "InferenceModelConfig.openai_api_port": _c(EXPLORER, AUXILIARY),
    "InferenceModelConfig.enable_log_requests": _c(EXPLORER, AUXILIARY),
    "InferenceModelConfig.enable_auto_tool_choice": _c(EXPLORER, AUXILIARY),
    "InferenceModelConfig.openai_api_key_env": _c(OPENAI_SERVER),
    "InferenceModelConfig.openai_api_max_n": _c(OPENAI_SERVER),
    "InferenceModelConfig.openai_api_max_request_bytes": _c(OPENAI_SERVER),
    "InferenceModelConfig.tool_call_parser": _c(VALIDATE, REPLY_PARSING, note=_RESOLVED),
    "InferenceModelConfig.reasoning_parser": _c(VALIDATE, REPLY_PARSING, note=_RESOLVED),
    # ---- explorer.auxiliary_models[i] (own entries) -------------------------------------
    "AuxiliaryModelConfig.name": _c(AUXILIARY),
    "AuxiliaryModelConfig.external_model_config": Structural("engine_type: external"),
    "AuxiliaryModelConfig.engine_num": _c(
        AUXILIARY, EXPLORE_ENGINES, VALIDATE, note="modes both / explore: a pool of engine_num "
        "engine actors (tensor_parallel_size GPUs each), calls spread over them in turn; "
        "an error in modes colocate / bench (one process)"),
    # ---- explorer.over_rollout / dynamic_timeout ----------------------------------------
    "OverRolloutConfig.ratio": _c(VALIDATE, EXPLORER, note=(
        "a step goes on once (1 - ratio) of its tasks ended; the rest are abandoned and "
        "counted (rollout/over_rollout_dropped_tasks); training steps only, not eval")),
    "OverRolloutConfig.wait_after_min": _c(EXPLORER, note="seconds more for the stragglers"),
    "DynamicTimeoutConfig.enable": _c(VALIDATE, EXPLORER, note=(
        "each attempt's timeout: ratio x mean seconds of the tasks that succeeded so far")),
    "DynamicTimeoutConfig.ratio": _c(VALIDATE, EXPLORER, note="capped by max_timeout"),
    # ---- explorer -----------------------------------------------------------------------
    "ExplorerConfig.name": _c(BOTH_ACTORS, note="Ray actor name (mode both)"),
    "ExplorerConfig.runner_per_model": _c(EXPLORER),
    "ExplorerConfig.runner_num": _c(
        TRINITY_FORMS, note="deprecated in Trinity; ignored with a warning"),
    "ExplorerConfig.concurrent_mode": _c(EXPLORER),
    "ExplorerConfig.max_repeat_times_per_runner": _c(EXPLORER),
    "ExplorerConfig.max_timeout": _c(EXPLORER),
    "ExplorerConfig.max_retry_times": _c(EXPLORER),
    "ExplorerConfig.env_vars": _c("rft.launcher", "rft.distributed.actor_env"),
    "ExplorerConfig.rollout_model": Structural(),
    "ExplorerConfig.auxiliary_models": Structural(),
    "ExplorerConfig.eval_interval": _c(STAGE),
    "ExplorerConfig.eval_on_startup": _c(STAGE),
    "ExplorerConfig.bench_on_latest_checkpoint": _c(BENCH),
    "ExplorerConfig.over_rollout": Structural(),
    "ExplorerConfig.dynamic_timeout": Structural(),
    "ExplorerConfig.runner_state_report_interval": _c(
        EXPLORER, note="seconds between log lines of the runners' states (rft.rollout."
                       "runner_states); 0: off"),
    # ---- synchronizer -------------------------------------------------------------------
    "SynchronizerConfig.sync_method": _c(BOTH, VALIDATE, note="unset: the mode's default"),
    "SynchronizerConfig.sync_style": _c(BOTH, note="mode both"),
    "SynchronizerConfig.sync_interval": _c(BOTH, EXPLORE, TRAIN),
    "SynchronizerConfig.sync_offset": _c(BOTH, EXPLORE),
    "SynchronizerConfig.sync_timeout": _c(BOTH, EXPLORE),
    "SynchronizerConfig.wait_for_checkpoint": _c(EXPLORE),
    # ---- trainer ------------------------------------------------------------------------
    "TrainerConfig.name": _c(BOTH_ACTORS, note="Ray actor name (mode both)"),
    "TrainerConfig.trainer_type": _c(VALIDATE, note=_RESOLVED),
    "TrainerConfig.trainer_strategy": _c(
        "rft.trainer.ranks", "rft_plugin_verl.config",
        note="fsdp and fsdp2 run as FSDP2 (sharded trainers); verl: veRL's engines (megatron: "
             "GPU only, untested)",
        unsupported=Unsupported(
            "megatron is not supported by the torch trainer; it shards with FSDP2 instead",
            when=lambda value: value == "megatron", example="megatron")),
    "TrainerConfig.cpu_ranks": _c(VALIDATE, note="trainer ranks on a CPU-only cluster (torch: "
                                  "FSDP2 ranks, mode colocate: each with its rollout engine; "
                                  "verl: veRL worker-group ranks)"),
    "TrainerConfig.ranks": Derived("cluster.trainer_gpu_num on GPUs (mode colocate: every "
                                   "GPU), cpu_ranks on CPU"),
    "TrainerConfig.rank_timeout": Derived("synchronizer.sync_timeout"),
    "TrainerConfig.total_steps": _c(BUILDERS, TRAIN),
    "TrainerConfig.save_interval": _c(STAGE),
    "TrainerConfig.save_strategy": _c(
        "rft.trainer.ranks", note="sharded torch trainer: its ranks write a checkpoint all at "
        "once, rank after rank (single_process / single_thread) or node after node "
        "(single_node); one process is one writer"),
    "TrainerConfig.save_hf_checkpoint": _c(COLOCATE, TRAIN, BOTH_CHECKPOINTS),
    "TrainerConfig.save_hf_merged": _c(TORCH_TRAINER, LORA_CHECK, note="with LoRA: hf/merged/"),
    "TrainerConfig.max_checkpoints_to_keep": _c(BUILDERS, BOTH_ENTRY),
    "TrainerConfig.enable_preview": _c(
        TRAIN, COLOCATE, WORKERS, BOTH,
        note="table rollout_examples per train step (highest / lowest reward: prompt, "
             "response, reward): tensorboard text, wandb / mlflow table, jsonl "
             "<monitor dir>/rollout_examples/trainer.jsonl"),
    "TrainerConfig.grad_clip": _c("rft.config.schema", TORCH_TRAINER, VALIDATE,
                                  note="unset: algorithm.optimizer.clip_grad, else 1.0"),
    "TrainerConfig.use_dynamic_bsz": _c(OPTIONS),
    "TrainerConfig.max_token_len_per_gpu": _c(OPTIONS),
    "TrainerConfig.ppo_max_token_len_per_gpu": _c(
        TRINITY_FORMS, note="Trinity's older max_token_len_per_gpu"),
    "TrainerConfig.trainer_config_path": _c(
        TRINITY_FORMS, note="a veRL YAML file read into trainer_config"),
    "TrainerConfig.ulysses_sequence_parallel_size": _c(
        OPTIONS, note="divides the derived max_token_len_per_gpu",
        unsupported=Unsupported(
            "not implemented: the torch trainer has no sequence parallelism (the value only "
            "divides the derived max_token_len_per_gpu)", when=lambda value: value > 1,
            example=2)),
    "TrainerConfig.trainer_config": _c(
        OPTIONS, note="keys mirroring rft fields reconciled first as Trinity-RFT does "
                      "(rft.config.verl_keys); torch: the key paths listed below; any other "
                      "key is a warning; verl (rft-plugin-verl): veRL's config, each key "
                      "checked by the plugin"),
    # ---- monitor ------------------------------------------------------------------------
    "MonitorConfig.monitor_type": _c(VALIDATE, note=_RESOLVED),
    "MonitorConfig.monitor_args": _c(VALIDATE, note=_RESOLVED),
    "MonitorConfig.detailed_stats": _c(
        EXPLORER, note="eval/<taskset>/<metric>/mean|std|max|min over the tasks"),
    "MonitorConfig.enable_ray_timeline": _c(
        "rft.distributed.timeline", "rft.config.ray_timeline",
        note="<monitor dir>/timeline.json when the run leaves Ray; a warning in runs "
             "without Ray"),
    # ---- service ------------------------------------------------------------------------
    "DataJuicerServiceConfig.server_url": Unsupported(_DATA_JUICER),
    "DataJuicerServiceConfig.auto_start": Unsupported(_DATA_JUICER),
    "DataJuicerServiceConfig.port": Unsupported(_DATA_JUICER),
    "ServiceConfig.data_juicer": Unsupported(
        _DATA_JUICER, example=schema.DataJuicerServiceConfig(auto_start=True)),
    # ---- data_processor -----------------------------------------------------------------
    "OperatorConfig.name": _c(VALIDATE, note=_RESOLVED),
    "OperatorConfig.args": _c(VALIDATE, note=_RESOLVED),
    "TaskPipelineConfig.operators": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.num_process": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.config_path": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.inputs": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.output": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.target_fields": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.priority_weights": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.top_k": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.input_buffers": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.output_buffer": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.format": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.dj_process_desc": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.agent_model_name": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.agent_model_config": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.clean_strategy": Unsupported(_TASK_PIPELINE),
    "TaskPipelineConfig.dynamic": Unsupported(_TASK_PIPELINE),
    "ExperiencePipelineConfig.operators": Structural("each operator resolved by validation"),
    "ExperiencePipelineConfig.save_input": _c(
        EXPLORER, note="with operators: each explore step's experiences before them"),
    "ExperiencePipelineConfig.input_save_path": _c(
        EXPLORER, note="JSON lines (.db: SQLite); unset: <job dir>/buffer/"
                       "experience_pipeline_input.jsonl"),
    "ExperiencePipelineConfig.inputs": Unsupported(
        "not implemented: the pipeline reads the explorer's experiences only; it has no "
        "effect"),
    "ExperiencePipelineConfig.output": Unsupported(
        "not implemented: the pipeline writes to buffer.trainer_input.experience_buffer; "
        "it has no effect", example=schema.ExperienceBufferConfig(name="out")),
    "DataProcessorConfig.task_pipeline": Unsupported(
        _TASK_PIPELINE, example=schema.TaskPipelineConfig(num_process=2)),
    "DataProcessorConfig.experience_pipeline": Structural(),
    "DataProcessorConfig.data_processor_url": Unsupported(_DATA_JUICER),
    # ---- log ----------------------------------------------------------------------------
    "LogConfig.level": _c(LOGS),
    "LogConfig.group_by_node": _c(LOGS),
    # ---- stages[i] ----------------------------------------------------------------------
    "StageConfig.stage_name": _c(BUILD_STAGES),
    "StageConfig.mode": Structural("override of mode (merged by rft.config.build_stages)"),
    "StageConfig.algorithm": Structural("overrides merged onto algorithm, then checked"),
    "StageConfig.buffer": Structural("overrides merged onto buffer, then checked"),
    "StageConfig.data_processor": Structural("overrides merged onto data_processor"),
    "StageConfig.explorer": Structural("overrides merged onto explorer, then checked"),
    "StageConfig.trainer": Structural("overrides merged onto trainer, then checked"),
    "StageConfig.synchronizer": Structural("overrides merged onto synchronizer, then checked"),
    # ---- top level ----------------------------------------------------------------------
    "RftConfig.project": _c(VALIDATE, BUILDERS),
    "RftConfig.group": _c(VALIDATE, BUILD_STAGES,
                          note="job dir <checkpoint_root_dir>/<project>/<group>/<name>"),
    "RftConfig.name": _c(VALIDATE, BUILDERS),
    "RftConfig.mode": _c("rft.launcher", VALIDATE),
    "RftConfig.checkpoint_root_dir": _c(VALIDATE, BUILD_STAGES),
    "RftConfig.continue_from_checkpoint": _c(BUILDERS, EXPLORE),
    "RftConfig.ray_namespace": _c(CLUSTER, BOTH_ACTORS, SHARED_QUEUE, note="unset: <project>/<name>"),
    "RftConfig.ignore_validator_suggestions": _c(
        VALIDATE, note="skips the trainer-memory estimate per device and its suggestion "
        "warning (rft.config.memory_estimate)"),
    "RftConfig.checkpoint_job_dir": Derived("<checkpoint_root_dir>/<project>/<name>"),
    "RftConfig.algorithm": Structural(),
    "RftConfig.model": Structural(),
    "RftConfig.cluster": Structural(),
    "RftConfig.buffer": Structural(),
    "RftConfig.explorer": Structural(),
    "RftConfig.synchronizer": Structural(),
    "RftConfig.trainer": Structural(),
    "RftConfig.monitor": Structural(),
    "RftConfig.service": Structural(),
    "RftConfig.data_processor": Structural(),
    "RftConfig.log": Structural(),
    "RftConfig.stages": Structural("each stage expanded by rft.config.build_stages"),
}
"""Support of every schema field, keyed ``"ClassName.field"``."""

# --------------------------------------------------------------------------------------
# trainer.trainer_config (veRL tree) keys the torch trainer honours
# --------------------------------------------------------------------------------------

TRAINER_CONFIG_HONOURED: dict[str, str] = {
    "actor_rollout_ref.actor.ppo_mini_batch_size":
        "prompts per optimizer step (× repeat_times rows); default: the whole batch",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu":
        "rows per forward/backward when trainer.use_dynamic_bsz is false",
    "actor_rollout_ref.actor.ppo_epochs": "passes over the batch per step; default 1",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking":
        "per-token entropies over chunks of torch.entropy_chunk_size positions",
    "actor_rollout_ref.actor.fsdp_config.param_offload":
        "actor parameters in host memory (sharded trainers)",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload":
        "actor optimizer state in host memory between steps",
    "actor_rollout_ref.ref.fsdp_config.param_offload":
        "reference-model parameters in host memory (sharded trainers)",
    "actor_rollout_ref.model.enable_gradient_checkpointing":
        "recompute the actor's activations in the backward pass",
    "critic.cliprange_value": "clip range of the value loss; default 0.5",
    "critic.optim.lr": "critic learning rate; default algorithm.optimizer.lr",
    "critic.model.enable_gradient_checkpointing":
        "recompute the critic's activations in the backward pass",
    "critic.model.fsdp_config.param_offload": "critic parameters in host memory (sharded trainers)",
    "critic.model.fsdp_config.optimizer_offload":
        "critic optimizer state in host memory between steps",
    "torch.device": "auto (CUDA when available), cpu, cuda, cuda:1, ...",
    "torch.dtype": "autocast dtype of forward passes: float32 / bfloat16 / float16",
    "torch.use_rollout_logprobs": "take old_log_prob from the rollout's log-probs",
    "torch.entropy_chunk_size": "positions per entropy chunk; default 2048",
}
"""Key paths of ``trainer.trainer_config`` the ``torch`` trainer reads
(:mod:`rft.trainer.options`), with what they do; extend it when the trainer reads more."""

TRAINER_CONFIG_TRAINERS = ("torch",)
"""``trainer.trainer_type`` values whose ``trainer_config`` keys are checked against
:data:`TRAINER_CONFIG_HONOURED`."""

TRAINER_CONFIG_REASON = "not honoured by the torch trainer; it has no effect"
"""The warning after ``trainer.trainer_config.<key path>: ``."""

# --------------------------------------------------------------------------------------
# Lookup and the validation check
# --------------------------------------------------------------------------------------


def schema_classes() -> list[type]:
    """Every dataclass defined in :mod:`rft.config.schema`, in definition order."""
    return [obj for obj in vars(schema).values()
            if isinstance(obj, type) and dataclasses.is_dataclass(obj)
            and obj.__module__ == schema.__name__]


def support_of(cls: type, name: str) -> Support | None:
    """The entry of field ``name`` of ``cls`` (its own, else its nearest base class's)."""
    for klass in cls.__mro__:
        entry = SUPPORT.get(f"{klass.__name__}.{name}")
        if entry is not None:
            return entry
    return None


def field_default(f: dataclasses.Field[Any]) -> Any:
    """The default value of a dataclass field (``default_factory`` called)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def is_set(value: Any, default: Any) -> bool:
    """Whether ``value`` differs from ``default``; where the default is ``None``, an empty
    list / mapping or a section equal to its own defaults counts as unset."""
    if value == default:
        return False
    if default is None:
        if isinstance(value, (list, dict)) and not value:
            return False
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return value != type(value)()
    return True


def reported(entry: Unsupported, value: Any, default: Any) -> bool:
    """Whether an unsupported field's ``value`` is reported."""
    if entry.when is not None:
        return bool(entry.when(value))
    return is_set(value, default)


def unsupported_settings(obj: Any, prefix: str = "") -> Iterator[tuple[str, Unsupported]]:
    """``(dotted key, entry)`` of every unsupported field set in the dataclass ``obj`` and
    the sections below it; nothing below a reported field (its message covers them)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        entry = support_of(type(obj), f.name)
        if isinstance(entry, Unsupported):
            if reported(entry, value, field_default(f)):
                yield key, entry
            continue
        if (isinstance(entry, Consumed) and entry.unsupported is not None
                and reported(entry.unsupported, value, field_default(f))):
            yield key, entry.unsupported
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from unsupported_settings(value, key + ".")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item) and not isinstance(item, type):
                    yield from unsupported_settings(item, f"{key}[{i}].")
        elif isinstance(value, dict):
            for name, item in value.items():
                if dataclasses.is_dataclass(item) and not isinstance(item, type):
                    yield from unsupported_settings(item, f"{key}.{name}.")


def leaf_paths(tree: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the leaves of a nested mapping (``None`` leaves and empty mappings
    count as unset)."""
    if not isinstance(tree, dict):
        return
    for name, value in tree.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict):
            yield from leaf_paths(value, path + ".")  # an empty mapping sets nothing
        elif value is not None:
            yield path


def unhonoured_trainer_config_keys(trainer: schema.TrainerConfig) -> list[str]:
    """Key paths set in ``trainer.trainer_config`` that the trainer does not read."""
    if trainer.trainer_type not in TRAINER_CONFIG_TRAINERS:
        return []
    return [path for path in leaf_paths(trainer.trainer_config or {})
            if path not in TRAINER_CONFIG_HONOURED]


def support_messages(config: schema.RftConfig) -> tuple[list[str], list[str]]:
    """``(problems, warnings)`` about fields of ``config`` that rft does not honour, one
    line each starting with the dotted key."""
    problems: list[str] = []
    warnings: list[str] = []
    for key, entry in unsupported_settings(config):
        if key == "trainer.trainer_strategy" and \
                config.trainer.trainer_type not in TRAINER_CONFIG_TRAINERS:
            continue  # about the torch trainer; another backend's check_config speaks for it
        (problems if entry.severity == "error" else warnings).append(f"{key}: {entry.reason}")
    for path in unhonoured_trainer_config_keys(config.trainer):
        warnings.append(f"trainer.trainer_config.{path}: {TRAINER_CONFIG_REASON}")
    return problems, warnings


# --------------------------------------------------------------------------------------
# Where each class sits in a config (docs and tests)
# --------------------------------------------------------------------------------------


def field_kind(tp: Any) -> tuple[str, Any]:
    """``("one" | "list" | "dict", inner type)`` of a field annotation."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            tp = rest[0]
    origin = typing.get_origin(tp)
    if origin is list:
        return "list", typing.get_args(tp)[0]
    if origin is dict:
        return "dict", typing.get_args(tp)[1]
    return "one", tp


def class_sites(root: type = schema.RftConfig) -> list[tuple[str, type]]:
    """``(dotted path, class)`` of every place a schema class sits under ``root``, in
    field order (``[0]`` for list items, ``.<name>`` for mapping values)."""
    sites: list[tuple[str, type]] = [("", root)]

    def walk(cls: type, prefix: str, stack: tuple[type, ...]) -> None:
        for f in dataclasses.fields(cls):
            kind, inner = field_kind(f.type)
            if not (isinstance(inner, type) and dataclasses.is_dataclass(inner)):
                continue
            if inner in stack:
                continue
            path = f"{prefix}{f.name}" + {"one": "", "list": "[0]", "dict": ".<name>"}[kind]
            sites.append((path, inner))
            walk(inner, path + ".", stack + (inner,))

    walk(root, "", (root,))
    return sites


def below_unsupported(path: str, root: type = schema.RftConfig) -> bool:
    """Whether a :func:`class_sites` path passes through a field marked unsupported (its
    message then covers everything below it)."""
    cls = root
    for segment in path.split(".") if path else ():
        if segment == "<name>":
            continue
        name = segment.removesuffix("[0]")
        if isinstance(support_of(cls, name), Unsupported):
            return True
        cls = field_kind({f.name: f for f in dataclasses.fields(cls)}[name].type)[1]
    return False


def support_label(entry: Support) -> str:
    """The docs' "support" column: ``yes`` / ``partly (warning|error)`` / ``no (warning)`` /
    ``no (error)`` / ``derived``."""
    if isinstance(entry, Unsupported):
        return f"no ({entry.severity})"
    if isinstance(entry, Consumed) and entry.unsupported is not None:
        return f"partly ({entry.unsupported.severity})"
    if isinstance(entry, Derived):
        return "derived"
    return "yes"


def support_note(entry: Support) -> str:
    """The docs' note for an entry."""
    if isinstance(entry, Unsupported):
        return entry.reason
    if isinstance(entry, Consumed) and entry.unsupported is not None:
        return "; ".join(filter(None, [entry.note, "but " + entry.unsupported.reason]))
    if isinstance(entry, Structural):
        return entry.note or "section: see its fields"
    return entry.note


__all__ = [
    "SUPPORT",
    "TRAINER_CONFIG_HONOURED",
    "TRAINER_CONFIG_REASON",
    "TRAINER_CONFIG_TRAINERS",
    "Consumed",
    "Derived",
    "Structural",
    "Support",
    "Unsupported",
    "below_unsupported",
    "class_sites",
    "field_default",
    "field_kind",
    "is_set",
    "leaf_paths",
    "schema_classes",
    "support_label",
    "support_messages",
    "support_note",
    "support_of",
    "unhonoured_trainer_config_keys",
    "unsupported_settings",
]
