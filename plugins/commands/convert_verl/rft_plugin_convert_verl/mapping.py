"""The veRL → rft rules, as data where possible.

Sources: the veRL alignment guide (parameter mapping tables, batch-size rules) and veRL's
own configs for the defaults: the config the launch names (``--config-name``,
``model_engine=megatron``) as shipped with the installed veRL
(``verl/trainer/config/_generated_*.yaml``), else veRL 0.9.1's ``ppo_trainer.yaml``
(:data:`VERL_DEFAULTS`). Four kinds of rules, tried in this order for each veRL key:

1. :data:`DERIVED` — values computed from several veRL keys (algorithm preset, policy
   loss, KL switches, batch sizes and sync interval, tasksets, workflow and reward,
   monitor, LoRA, GPUs and mode).
2. :data:`DIRECT` — one veRL key → one or more rft keys, with an optional transform. The
   keys of :data:`FILLED_DEFAULTS` are written with veRL's default when the launch leaves
   them out and rft's default differs.
3. :data:`NO_EQUIVALENT` — known veRL keys (or subtrees) that have no rft counterpart;
   they go to the report with the reason.
4. :data:`PASSTHROUGH` — subtrees kept under the same key in ``trainer.trainer_config``
   (read by a veRL trainer backend; rft's ``torch`` trainer reads a few of them, the
   report lists the others).

A key that no rule matches is reported as unknown. Nothing is dropped silently.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rft_plugin_convert_verl.parse import Override, VerlConvertError
from rft_plugin_convert_verl.report import Report
from rft_plugin_convert_verl.trainer_choice import TrainerNeeds

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
M = "actor_rollout_ref.model."

# ---------------------------------------------------------------------------------------
# veRL defaults (veRL 0.9.1, verl/trainer/config/_generated_ppo_trainer.yaml)
# ---------------------------------------------------------------------------------------

VERL_DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.use_kl_in_reward": False,
    "algorithm.kl_penalty": "kl",
    "algorithm.kl_ctrl.kl_coef": 0.001,
    A + "use_kl_loss": False,
    A + "kl_loss_type": "low_var_kl",
    A + "kl_loss_coef": 0.001,
    A + "ppo_mini_batch_size": 256,
    A + "use_dynamic_bsz": False,
    A + "ppo_max_token_len_per_gpu": 16384,
    A + "strategy": "fsdp",
    A + "clip_ratio": 0.2,
    A + "clip_ratio_low": 0.2,
    A + "clip_ratio_high": 0.2,
    A + "clip_ratio_c": 3.0,
    A + "entropy_coeff": 0,
    A + "policy_loss.loss_mode": "vanilla",
    A + "tau_pos": 1.0,
    A + "tau_neg": 1.05,
    M + "lora_rank": 0,
    M + "lora_alpha": 16,
    M + "target_modules": "all-linear",
    R + "n": 1,
    R + "gpu_memory_utilization": 0.5,
    R + "tensor_model_parallel_size": 2,
    R + "val_kwargs.do_sample": False,
    R + "val_kwargs.temperature": 0,
    "data.train_batch_size": 1024,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "data.shuffle": True,
    "data.prompt_key": "prompt",
    "data.train_files": "~/data/rlhf/gsm8k/train.parquet",
    "data.val_files": "~/data/rlhf/gsm8k/test.parquet",
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 8,
    "trainer.total_epochs": 30,
    "trainer.logger": ["console", "wandb"],
    "trainer.test_freq": -1,
}
"""veRL 0.9.1's defaults for the keys the rules need, used when veRL is not installed (a
test keeps them equal to the installed veRL's ``_generated_ppo_trainer.yaml``)."""

MEGATRON_DEFAULTS: dict[str, Any] = {A + "strategy": "megatron"}
"""How veRL's Megatron config (``ppo_megatron_trainer``, ``model_engine=megatron``)
differs from :data:`VERL_DEFAULTS` for those keys."""

GENERATED_CONFIGS: dict[str, str] = {
    "ppo_trainer": "_generated_ppo_trainer.yaml",
    "ppo_megatron_trainer": "_generated_ppo_megatron_trainer.yaml",
}
"""``--config-name`` → the fully composed config veRL ships for it."""

MODEL_ENGINES: dict[str, str] = {
    "dp": "_generated_ppo_trainer.yaml",
    "fsdp": "_generated_ppo_trainer.yaml",
    "megatron": "_generated_ppo_megatron_trainer.yaml",
    "torchtitan": "_generated_ppo_torchtitan_trainer.yaml",
    "veomni": "_generated_ppo_veomni_trainer.yaml",
}
"""``model_engine=NAME`` (the Hydra group override of ppo_trainer) → composed config."""

COLOCATE_MAX_GPUS = 4
"""veRL's hybrid engine time-shares every GPU between rollout and training. On up to this
many GPUs the conversion runs rft's ``colocate`` mode, which is the same layout: one trainer
rank per GPU (validation derives ``trainer.ranks`` = ``cluster.node_num × gpu_per_node``),
each with its own rollout engine on its device, explorer and trainer taking turns
(docs/distributed.md, "Colocated on N devices"); on more, rft's explorer gets its own GPUs
(:data:`EXPLORER_GPU_SHARE`)."""

EXPLORER_GPU_SHARE = 4
"""On more than :data:`COLOCATE_MAX_GPUS` GPUs the rollout engines get
``1/EXPLORER_GPU_SHARE`` of them and the trainer the rest (the guide's worked examples)."""


def _installed(distribution: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


def verl_config_dir() -> Path | None:
    """``verl/trainer/config`` of the installed veRL (found without importing veRL)."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    return folder if folder.is_dir() else None


def flatten(value: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Nested mappings as ``{"a.b.c": leaf}`` (lists are leaves)."""
    out = {} if out is None else out
    if isinstance(value, dict) and value:
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif prefix:
        out[prefix] = value
    return out


@functools.lru_cache(maxsize=8)
def _read_generated(path: str) -> dict[str, Any]:
    import yaml

    with open(path, encoding="utf-8") as handle:
        return flatten(yaml.safe_load(handle) or {})


_SELECT = re.compile(r"\$\{oc\.select:([\w.]+),(.*)\}")
_ABSOLUTE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


@dataclass
class VerlDefaults:
    """veRL's defaults for one launch, and where they come from."""

    values: dict[str, Any]
    origin: str
    """``veRL's <file>`` or ``built-in veRL 0.9.1 defaults``: for comments and notes."""
    unread: str | None = None
    """Why the launch's ``--config-name`` was not read (``None``: it was, or none)."""

    @classmethod
    def for_launch(cls, config_name: str | None, config_path: str | None,
                   model_engine: str | None) -> VerlDefaults:
        name = config_name.removesuffix(".yaml") if config_name else "ppo_trainer"
        unread = None
        megatron = False
        if name in GENERATED_CONFIGS:
            generated = GENERATED_CONFIGS[name]
            megatron = "megatron" in name
        else:
            megatron = "megatron" in name
            generated = GENERATED_CONFIGS["ppo_megatron_trainer" if megatron else "ppo_trainer"]
            where = f" in --config-path {config_path}" if config_path else ""
            unread = (f"the launch's own Hydra config {name!r}{where} is not shipped with "
                      f"veRL and was not read: veRL's {generated.removeprefix('_generated_')} "
                      "defaults are used for the settings the launch does not give; check "
                      "that config for settings to add")
        if model_engine is not None and model_engine in MODEL_ENGINES:
            generated = MODEL_ENGINES[model_engine]
            megatron = model_engine == "megatron"
        folder = verl_config_dir()
        if folder is not None and (folder / generated).is_file():
            return cls(dict(_read_generated(str(folder / generated))),
                       f"veRL's {generated}", unread)
        values = {**VERL_DEFAULTS, **(MEGATRON_DEFAULTS if megatron else {})}
        return cls(values, "built-in veRL 0.9.1 defaults (veRL is not installed)", unread)

    def get(self, key: str, lookup: Callable[[str], Any]) -> Any:
        """veRL's default for ``key``, with ``${oc.select:…}`` / ``${a.b}`` resolved through
        ``lookup`` (the launch's value, else the default)."""
        value = self.values.get(key, VERL_DEFAULTS.get(key))
        for _ in range(8):
            if not isinstance(value, str):
                return value
            match = _SELECT.fullmatch(value)
            if match:
                found = lookup(match.group(1))
                if found is not None:
                    return found
                import yaml

                return yaml.safe_load(match.group(2)) if match.group(2).strip() else None
            match = _ABSOLUTE.fullmatch(value)
            if not match:
                return value
            value = lookup(match.group(1))
        return value


class Skip(Exception):
    """Raised by a transform: the value is not converted, for the reason given."""


# ---------------------------------------------------------------------------------------
# rule types
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One veRL key (or subtree, ``prefix.*``) and where it goes in rft."""

    verl: str
    """Dotted veRL key; a trailing ``.*`` matches every key below the prefix."""
    rft: tuple[str, ...] = ()
    """rft keys written with the (transformed) value; ``()``: no equivalent."""
    transform: Callable[[Any], Any] | None = None
    """Value conversion; may raise :class:`Skip` to report the value instead."""
    note: str = ""
    """Shown in docs/verl.md; for a rule without target, the reason in the report."""

    def matches(self, key: str) -> bool:
        if self.verl.endswith(".*"):
            return key.startswith(self.verl[:-1])
        return key == self.verl


@dataclass(frozen=True)
class Derived:
    """A rule computed from several veRL keys (implemented in :class:`Converter`)."""

    reads: tuple[str, ...]
    """veRL keys it consumes."""
    writes: tuple[str, ...]
    """rft keys it may write."""
    rule: str
    """The rule in words (docs/verl.md)."""


def _resume_mode(value: Any) -> bool:
    if value == "auto":
        return True
    if value == "disable":
        return False
    if value == "resume_path":
        raise Skip("rft resumes only from the latest checkpoint of "
                   "<checkpoint_root_dir>/<project>/<name>/; copy the checkpoint there and "
                   "keep continue_from_checkpoint: true")
    raise Skip(f"unknown resume_mode {value!r} (veRL knows auto, disable, resume_path)")


def _save_freq(value: Any) -> Any:
    if value == -1:
        return 0  # veRL: no periodic save; rft 0: save at the end only
    return value


def _test_freq(value: Any) -> Any:
    if isinstance(value, int) and value <= 0:
        raise Skip("veRL's -1 disables periodic validation; rft evaluates its "
                   "eval_tasksets every explorer.eval_interval steps: drop the eval "
                   "tasksets or set a large eval_interval")
    return value


def _engine_type(value: Any) -> Any:
    if value in ("vllm", "hf"):
        return value
    raise Skip(f"rft has no {value!r} rollout engine; the explorer uses vLLM "
               "(explorer.rollout_model.engine_type: vllm)")


def _total_steps(value: Any) -> Any:
    if value is None:
        raise Skip("null: the length comes from trainer.total_epochs")
    return value


def _optimizer_type(value: Any) -> Any:
    if str(value).lower() in ("adamw", "adam"):
        return "adam"  # rft's "adam" is AdamW with decoupled weight decay
    raise Skip(f"rft's optimizer_type is adam (AdamW); {value!r} has no equivalent")


def _not_null(value: Any) -> Any:
    if value is None:
        raise Skip("null: rft keeps its default")
    return value


# ---------------------------------------------------------------------------------------
# the tables
# ---------------------------------------------------------------------------------------

DIRECT: tuple[Rule, ...] = (
    # data
    Rule("data.max_prompt_length", ("model.max_prompt_tokens",)),
    Rule("data.max_response_length", ("model.max_response_tokens",)),
    Rule("data.filter_overlong_prompts", ("model.enable_prompt_truncation",),
         note="overlong prompts are truncated and their experiences masked out of the loss"),
    # actor / model
    Rule(M + "path", ("model.model_path",)),
    Rule(M + "trust_remote_code", ("model.trust_remote_code",)),
    Rule(M + "custom_chat_template", ("model.custom_chat_template",), _not_null),
    Rule(A + "optim.lr", ("algorithm.optimizer.lr",)),
    Rule(A + "optim.lr_warmup_steps", ("algorithm.optimizer.lr_warmup_steps",)),
    Rule(A + "optim.lr_warmup_steps_ratio", ("algorithm.optimizer.lr_warmup_steps_ratio",)),
    Rule(A + "optim.min_lr_ratio", ("algorithm.optimizer.min_lr_ratio",)),
    Rule(A + "optim.warmup_style", ("algorithm.optimizer.warmup_style",), _not_null),
    Rule(A + "optim.lr_scheduler_type", ("algorithm.optimizer.lr_scheduler_type",)),
    Rule(A + "optim.weight_decay", ("algorithm.optimizer.weight_decay",)),
    Rule(A + "optim.betas", ("algorithm.optimizer.betas",)),
    Rule(A + "optim.clip_grad", ("algorithm.optimizer.clip_grad",)),
    Rule(A + "optim.optimizer", ("algorithm.optimizer.optimizer_type",), _optimizer_type,
         note="AdamW → adam"),
    Rule(A + "use_dynamic_bsz", ("trainer.use_dynamic_bsz",),
         note="veRL's default false is written (rft's default is true)"),
    Rule(A + "ppo_max_token_len_per_gpu", ("trainer.max_token_len_per_gpu",)),
    Rule(A + "ulysses_sequence_parallel_size", ("trainer.ulysses_sequence_parallel_size",)),
    Rule(A + "grad_clip", ("trainer.grad_clip",)),
    Rule(A + "loss_agg_mode", ("algorithm.loss_agg_mode",)),
    # rollout
    Rule(R + "name", ("explorer.rollout_model.engine_type",), _engine_type),
    Rule(R + "gpu_memory_utilization", ("explorer.rollout_model.gpu_memory_utilization",),
         note="veRL's default 0.5 is written (rft's is 0.9)"),
    Rule(R + "temperature", ("model.temperature",)),
    Rule(R + "top_p", ("model.top_p",)),
    Rule(R + "top_k", ("model.top_k",)),
    Rule(R + "enforce_eager", ("explorer.rollout_model.enforce_eager",)),
    Rule(R + "enable_chunked_prefill", ("explorer.rollout_model.enable_chunked_prefill",)),
    Rule(R + "enable_prefix_caching", ("explorer.rollout_model.enable_prefix_caching",)),
    Rule(R + "dtype", ("explorer.rollout_model.dtype",)),
    Rule(R + "seed", ("explorer.rollout_model.seed",)),
    Rule(R + "max_model_len", ("explorer.rollout_model.max_model_len",), _not_null),
    Rule(R + "ignore_eos", ("explorer.rollout_model.ignore_eos",)),
    Rule(R + "max_num_batched_tokens",
         ("explorer.rollout_model.extra_engine_args.max_num_batched_tokens",)),
    Rule(R + "max_num_seqs", ("explorer.rollout_model.extra_engine_args.max_num_seqs",)),
    # critic
    Rule("critic.model.path", ("model.critic_model_path",)),
    # trainer
    Rule("trainer.project_name", ("project",)),
    Rule("trainer.experiment_name", ("name",)),
    Rule("trainer.default_local_dir", ("checkpoint_root_dir",),
         note="checkpoints go to <checkpoint_root_dir>/<project>/<name>/"),
    Rule("trainer.n_gpus_per_node", ("cluster.gpu_per_node",)),
    Rule("trainer.nnodes", ("cluster.node_num",)),
    Rule("trainer.save_freq", ("trainer.save_interval",), _save_freq,
         note="-1 (no periodic save) → 0 (save at the end)"),
    Rule("trainer.test_freq", ("explorer.eval_interval",), _test_freq,
         note="-1 is reported: rft has no switch to disable periodic evaluation"),
    Rule("trainer.total_epochs", ("buffer.total_epochs",),
         note="veRL's default 30 is written unless total_training_steps is set"),
    Rule("trainer.total_training_steps", ("buffer.total_steps", "trainer.total_steps"),
         _total_steps, note="when set, total_epochs is ignored"),
    Rule("trainer.critic_warmup", ("trainer.trainer_config.trainer.critic_warmup",)),
    Rule("trainer.val_before_train", ("explorer.eval_on_startup",)),
    Rule("trainer.resume_mode", ("continue_from_checkpoint",), _resume_mode,
         note="auto → true, disable → false; resume_path is reported"),
    Rule("trainer.max_actor_ckpt_to_keep", ("trainer.max_checkpoints_to_keep",), _not_null),
)
"""One veRL key → rft key(s)."""

STEP_COUNTS: tuple[str, ...] = ("trainer.test_freq", "trainer.save_freq",
                               "trainer.total_training_steps", A + "optim.lr_warmup_steps")
"""veRL settings counted in veRL steps. A veRL step (``data.train_batch_size`` prompts, one
learning-rate scheduler step) is ``sync_interval`` rft steps (``ppo_mini_batch_size``
prompts each): their positive values are multiplied by ``synchronizer.sync_interval``."""

FILLED_DEFAULTS: tuple[str, ...] = (
    "data.max_prompt_length", "data.max_response_length", A + "use_dynamic_bsz",
    R + "gpu_memory_utilization", "trainer.total_epochs", "trainer.nnodes",
    "trainer.n_gpus_per_node",
)
"""DIRECT keys written with veRL's default when the launch does not set them: their rft
default differs from veRL's (or is unset). Every other DIRECT key has the same default on
both sides (a test checks it)."""

PASSTHROUGH: tuple[Rule, ...] = (
    Rule(M + "*", ("trainer.trainer_config.actor_rollout_ref.model.*",)),
    Rule(A + "*", ("trainer.trainer_config.actor_rollout_ref.actor.*",)),
    Rule("actor_rollout_ref.ref.*", ("trainer.trainer_config.actor_rollout_ref.ref.*",)),
    Rule(R + "log_prob_*", ("trainer.trainer_config.actor_rollout_ref.rollout.log_prob_*",),
         note="the actor / reference workers compute log-probs with these"),
    Rule("critic.*", ("trainer.trainer_config.critic.*",)),
)
"""Subtrees kept unchanged in ``trainer.trainer_config`` (veRL's worker settings)."""

REWARD_MODEL_NOTE = ("veRL's reward-model worker; rft does not score with a "
                     "(sequence-classification) reward model: the converted config scores "
                     "with the data_source's rule-based reward (see the notes)")

NO_EQUIVALENT: tuple[Rule, ...] = (
    Rule("data.truncation", note="rft cuts overlong prompts on the right (veRL's "
         "truncation=right) when model.enable_prompt_truncation is true"),
    Rule("data.val_batch_size", note="deprecated in veRL; rft evaluates buffer.batch_size "
         "tasks at a time"),
    Rule("data.return_raw_chat", note="rft workflows always receive the chat messages"),
    Rule("data.reward_fn_key", note="verl_workflow reads each row's data_source column"),
    Rule("data.tokenizer", note="the tokenizer is model.model_path's"),
    Rule("data.dataloader_num_workers", note="tasksets are read by the explorer"),
    Rule("custom_reward_function.*", note="verl_workflow takes the function's path, name "
         "and reward_kwargs only"),
    Rule("reward_model.reward_manager", note="veRL's reward manager; verl_workflow scores "
         "each response on its own, as veRL's naive manager does (batch scoring and the dapo "
         "manager's overlong penalty are not applied; rft-plugin-rewards' math_dapo_reward "
         "has one, as a taskset's default_reward_fn_type)"),
    Rule("reward_model.reward_kwargs.*", note="arguments of veRL's reward manager (e.g. "
         "DAPO's overlong buffer); not applied by verl_workflow"),
    Rule("reward_model.*", note=REWARD_MODEL_NOTE),
    Rule("reward.reward_model.*", note=REWARD_MODEL_NOTE),
    Rule("reward.reward_manager.*", note="verl_workflow scores each response on its own, "
         "as veRL's naive reward manager does"),
    Rule("reward.*", note="veRL reward-worker setting; verl_workflow scores in the "
         "explorer's workflow runners"),
    Rule("trainer.resume_from_path", note="rft resumes from the latest checkpoint in "
         "<checkpoint_root_dir>/<project>/<name>/; copy the checkpoint there"),
    Rule("trainer.device", note="rft uses the accelerators Ray reports"),
    Rule("trainer.val_only", note="use mode: bench to evaluate checkpoints"),
    Rule("trainer.default_hdfs_dir", note="no HDFS upload in rft"),
    Rule(R + "val_kwargs.*", note="see buffer.explorer_input.eval_tasksets"),
    Rule(R + "*", note="veRL rollout-worker setting without an explorer.rollout_model "
         "field (the guide: rollout settings in trainer_config have no effect)"),
    Rule("actor_rollout_ref.hybrid_engine", note="rft's colocate mode is the hybrid engine "
         "(a trainer rank and its rollout engine on each GPU, taking turns), or rft gives "
         "explorer and trainer their own GPUs"),
    Rule("algorithm.*", note="no rft algorithm setting corresponds"),
    Rule("data.*", note="no rft taskset setting corresponds"),
    Rule("trainer.*", note="veRL training-loop setting without an rft counterpart"),
    Rule("hydra.*", note="Hydra's own setting (output directories, logging)"),
    Rule("model_engine", note="veRL's model-engine config group: read for the defaults"),
)
"""Known veRL keys with no rft counterpart; the note is the reason in the report."""


# The derived rules. Their logic is in Converter; these records document and route them.
ADVANTAGES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "gae": ("ppo", "ppo", ("gamma", "lam")),
    "grpo": ("grpo", "grpo", ("norm_adv_by_std_in_grpo",)),
    "rloo": ("rloo", "rloo", ()),
    "reinforce_plus_plus": ("reinforceplusplus", "reinforceplusplus", ("gamma",)),
    "reinforce_plus_plus_baseline": ("reinforceplusplus_baseline",
                                     "reinforceplusplus_baseline", ()),
    "remax": ("remax", "remax", ()),
    "opo": ("grpo", "opo", ()),
}
"""veRL ``adv_estimator`` → (rft ``algorithm_type``, ``advantage_fn``, veRL
``algorithm.*`` arguments the function takes)."""

POLICY_LOSSES: dict[str, tuple[str, dict[str, str], str]] = {
    "vanilla": ("ppo", {"clip_ratio": "clip_range", "clip_ratio_low": "clip_range_low",
                        "clip_ratio_high": "clip_range_high", "clip_ratio_c": "clip_ratio_c"},
                "rft-framework"),
    "gspo": ("gspo", {"clip_ratio": "clip_range", "clip_ratio_low": "clip_range_low",
                      "clip_ratio_high": "clip_range_high"}, "rft-plugin-gspo"),
    "cispo": ("cispo", {"clip_ratio_low": "clip_range_low",
                        "clip_ratio_high": "clip_range_high"}, "rft-plugin-cispo"),
    "sapo": ("sapo", {"tau_pos": "tau_pos", "tau_neg": "tau_neg"}, "rft-plugin-sapo"),
}
"""veRL ``actor.policy_loss.loss_mode`` → (rft ``policy_loss_fn``, the veRL actor settings
it reads → its arguments, the distribution providing it). Other modes (geo_mean, gpg,
clip_cov, kl_cov, dro, dppo_*) have no rft policy loss and are reported."""

LOSS_SETTINGS = ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c",
                 "tau_pos", "tau_neg")
"""veRL actor settings read by some policy loss (reported when the chosen one does not)."""

KL_NAMES = {"kl": "kl", "k1": "k1", "abs": "abs", "mse": "mse", "k2": "k2",
            "low_var_kl": "low_var_kl", "k3": "k3"}
"""veRL KL estimators rft registers under the same name (plus the ``+`` variants)."""

MONITORS = {"wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow",
            "file": "jsonl", "console": "console"}
"""veRL ``trainer.logger`` entries → rft ``monitor.monitor_type``."""

SPLIT_FILES = {"train": "train", "test": "test", "validation": "validation",
               "valid": "validation", "val": "validation", "dev": "validation"}
"""File stems that name a split of a dataset folder (``load_dataset`` data-file names)."""

DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".arrow")

RFT_REWARDS: dict[str, tuple[re.Pattern[str], str]] = {
    "openai/gsm8k": (re.compile(r"gsm8k", re.IGNORECASE), "gsm8k_reward"),
}
"""data_source → (how its files are recognised by path, the rft reward function that
ports veRL's scorer exactly). Other data sources are scored by veRL's own
``default_compute_score`` inside ``verl_workflow``."""

WORKFLOW = "verl_workflow"
"""The workflow every converted taskset runs (registered by this plugin)."""

TORCH_TRAINER_FALLBACK = frozenset({
    A + "ppo_mini_batch_size", A + "ppo_micro_batch_size_per_gpu", A + "ppo_epochs",
    "critic.cliprange_value", "critic.optim.lr",
})


@functools.lru_cache(maxsize=1)
def torch_trainer_keys() -> frozenset[str]:
    """``trainer_config`` keys rft's torch trainer reads: rft's own list where it has one
    (``rft.config.support.TRAINER_CONFIG_HONOURED``), else found in its options module's
    source (without importing torch)."""
    try:
        from rft.config.support import TRAINER_CONFIG_HONOURED

        return frozenset(TRAINER_CONFIG_HONOURED)
    except (ImportError, AttributeError):
        pass
    try:
        spec = importlib.util.find_spec("rft.trainer.options")
        text = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
    except (ImportError, OSError, ValueError):
        text = ""
    constants = dict(re.findall(r"^(\w+)\s*=\s*\"([\w.]+)\"", text, re.MULTILINE))
    found = {constants.get(prefix, "") + key if prefix else key
             for prefix, key in re.findall(
                 r"lookup\(\s*tree\s*,\s*(?:(\w+)\s*\+\s*)?\"([\w.]+)\"", text)}
    return frozenset(found) if found else TORCH_TRAINER_FALLBACK


DERIVED: dict[str, Derived] = {
    "algorithm": Derived(
        ("algorithm.adv_estimator",),
        ("algorithm.algorithm_type", "algorithm.advantage_fn"),
        "`adv_estimator` picks the preset and advantage function: "
        + ", ".join(f"{k} → {v[0]}/{v[1]}" for k, v in ADVANTAGES.items())
        + " (veRL default gae); others are reported"),
    "advantage_args": Derived(
        ("algorithm.gamma", "algorithm.lam", "algorithm.norm_adv_by_std_in_grpo"),
        ("algorithm.advantage_fn_args.gamma", "algorithm.advantage_fn_args.lam",
         "algorithm.advantage_fn_args.norm_adv_by_std_in_grpo"),
        "copied into `advantage_fn_args` when the estimator takes them (gamma: gae, "
        "reinforce_plus_plus; lam: gae; norm_adv_by_std_in_grpo: grpo); else reported"),
    "policy_loss": Derived(
        (A + "policy_loss.loss_mode", *(A + name for name in LOSS_SETTINGS),
         A + "entropy_coeff"),
        ("algorithm.policy_loss_fn", "algorithm.policy_loss_fn_args",
         "algorithm.entropy_loss_fn_args.entropy_coef"),
        "`policy_loss.loss_mode` picks `policy_loss_fn` and the actor settings it reads "
        "become its arguments: " + "; ".join(
            f"{mode} → {loss} (" + ", ".join(f"`{k}` → `{v}`" for k, v in args.items()) + ")"
            for mode, (loss, args, _) in POLICY_LOSSES.items())
        + ". Other modes (geo_mean, gpg, clip_cov, kl_cov, dro, ...) have no rft loss and "
        "are reported (the preset's clipped surrogate is used); so are the settings the "
        "chosen loss does not read and other `policy_loss.*` settings. Unset arguments get "
        "veRL's defaults (clip ratios 0.2, `clip_ratio_c` 3.0, `tau_pos` 1.0, `tau_neg` "
        "1.05); `entropy_coeff` (veRL default 0) → `entropy_coef`"),
    "kl_penalty": Derived(
        ("algorithm.use_kl_in_reward", "algorithm.kl_penalty", "algorithm.kl_ctrl.kl_coef"),
        ("algorithm.kl_penalty_fn", "algorithm.kl_penalty_fn_args.kl_coef"),
        "`use_kl_in_reward=False` (veRL default) → `kl_penalty_fn: none`; true → the "
        "`kl_penalty` estimator (veRL default kl) and `kl_ctrl.kl_coef` (veRL default "
        "0.001) → `kl_coef`"),
    "kl_loss": Derived(
        (A + "use_kl_loss", A + "kl_loss_type", A + "kl_loss_coef"),
        ("algorithm.kl_loss_fn", "algorithm.kl_loss_fn_args.kl_coef"),
        "`use_kl_loss=False` (veRL default) → `kl_loss_fn: none` (a coefficient is "
        "reported as inactive); true → the `kl_loss_type` estimator (veRL default "
        "low_var_kl) with `kl_loss_coef` (veRL default 0.001)"),
    "repeat_times": Derived(
        (R + "n",), ("algorithm.repeat_times",),
        "`rollout.n` (veRL default 1)"),
    "batch": Derived(
        (A + "ppo_mini_batch_size", "data.train_batch_size"),
        ("buffer.batch_size", "buffer.train_batch_size", "synchronizer.sync_interval",
         "synchronizer.sync_style", "synchronizer.sync_offset"),
        "`batch_size = ppo_mini_batch_size`; `train_batch_size = rollout.n × "
        "ppo_mini_batch_size`; `sync_interval = data.train_batch_size / "
        "ppo_mini_batch_size` (must divide); `sync_style: fixed`, `sync_offset: 0` "
        "(veRL defaults: train_batch_size 1024, ppo_mini_batch_size 256). A veRL step is "
        "then `sync_interval` rft steps: the step counts `test_freq`, `save_freq`, "
        "`total_training_steps` and `optim.lr_warmup_steps` are multiplied by it"),
    "tasksets": Derived(
        ("data.train_files", "data.val_files", "data.prompt_key", "data.response_key",
         "data.shuffle", "data.seed", R + "val_kwargs.temperature", R + "val_kwargs.top_p",
         R + "val_kwargs.top_k", R + "val_kwargs.n", R + "val_kwargs.do_sample"),
        ("buffer.explorer_input.tasksets", "buffer.explorer_input.eval_tasksets"),
        "one taskset per file (a list or one path; veRL's default files when unset); "
        "`<dir>/train.parquet` → `path: <dir>`, `split: train` (same for test / "
        "validation files), named after the folder (`_eval` for evaluation); veRL's "
        "dataset layout → `format`: chat messages in `messages_key` (`data.prompt_key`, "
        "veRL default prompt), `response_key: reward_model` (the column holding "
        "`ground_truth`); `shuffle` (veRL default true) → `task_selector.selector_type` "
        "shuffle / sequential, `seed` → its seed; `val_kwargs` → each eval taskset's "
        "`rollout_args` (veRL's default `do_sample=False` → temperature 0) and `n` → "
        "`repeat_times`"),
    "reward": Derived(
        ("custom_reward_function.path", "custom_reward_function.name",
         "custom_reward_function.reward_kwargs", "reward.custom_reward_function.path",
         "reward.custom_reward_function.name", "reward_model.enable",
         "reward.reward_model.enable"),
        ("buffer.explorer_input.default_workflow_type",
         "buffer.explorer_input.tasksets[i].default_reward_fn_type",
         "buffer.explorer_input.tasksets[i].workflow_args"),
        f"`default_workflow_type: {WORKFLOW}` (this plugin's workflow: the row's chat "
        "messages, scored by the row's `data_source` as veRL's default reward manager "
        "does); a taskset whose files are "
        + ", ".join(f"{source}'s (`{pattern.pattern}` in the path) get `{reward}`"
                    for source, (pattern, reward) in RFT_REWARDS.items())
        + " (rft's exact port), others veRL's `default_compute_score`; "
        "`custom_reward_function.path` / `name` / `reward_kwargs` → each taskset's "
        "`workflow_args` (`custom_reward_path`, `custom_reward_name`, `reward_kwargs`), "
        "called as veRL calls it; an enabled reward model is reported (rft does not score "
        "with one)"),
    "monitor": Derived(
        ("trainer.logger",), ("monitor.monitor_type",),
        "the first logger other than console (" + ", ".join(
            f"{k} → {v}" for k, v in MONITORS.items() if k != "console")
        + "; veRL default [console, wandb]); `console` when it is the only one (rft "
        "always logs to the console)"),
    "lora": Derived(
        (M + "lora_rank", M + "lora_alpha", M + "target_modules", M + "exclude_modules",
         M + "lora_adapter_path"),
        ("model.lora_configs",),
        "`lora_rank` > 0 → `model.lora_configs[0]` with `lora_rank`, `lora_alpha` (veRL "
        "default 16), `target_modules` (a string; a list of names joined by commas), "
        "`exclude_modules`, "
        "`path` (`lora_adapter_path`); with `lora_rank` 0 (veRL default) the others are "
        "reported as inactive"),
    "gpus": Derived(
        ("trainer.nnodes", "trainer.n_gpus_per_node", R + "tensor_model_parallel_size"),
        ("mode", "explorer.rollout_model.engine_num",
         "explorer.rollout_model.tensor_parallel_size", "synchronizer.sync_method"),
        f"veRL's hybrid engine time-shares its GPUs; on up to {COLOCATE_MAX_GPUS} GPUs "
        "(`nnodes × n_gpus_per_node`, veRL default 1 × 8) → `mode: colocate`, the same "
        "layout: one trainer rank per GPU (`trainer.ranks` = GPUs), each with one rollout "
        "engine of tensor_parallel_size 1 on its GPU, taking turns (`engine_num: 1` per "
        "device, `sync_method: memory`); on more GPUs rft splits them: `engine_num = max(1, "
        "GPUs / "
        f"{EXPLORER_GPU_SHARE} / tensor_parallel_size)` (veRL default TP 2), the trainer "
        "gets the rest"),
    "strategy": Derived(
        (A + "strategy",), ("trainer.trainer_strategy",),
        "fsdp / fsdp2 as they are; megatron (set, or the default of "
        "`--config-name=ppo_megatron_trainer` / `model_engine=megatron`) is reported: rft's "
        "torch trainer has no Megatron backend and trains with fsdp (its `megatron.*` "
        "settings stay in `trainer_config`)"),
    "trainer_type": Derived(
        (), ("trainer.trainer_type",),
        "`verl` (rft-plugin-verl, veRL's workers) when the launch needs what only veRL's "
        "workers provide (ulysses sequence parallel > 1, Megatron, worker settings the "
        "torch trainer does not read), the plugin is installed and usable, and its config "
        "check accepts the converted config (one GPU, no LoRA); else `torch` (rft's native "
        "trainer). `--trainer torch|verl` forces it; the report says which and why"),
}
"""Rules computed from several keys, by name."""


# ---------------------------------------------------------------------------------------
# the converter
# ---------------------------------------------------------------------------------------

_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(path: str) -> list[str | int]:
    """``a.b[0].c`` → ``["a", "b", 0, "c"]``."""
    return [int(m.group(2)) if m.group(2) is not None else m.group(1)
            for m in _PATH_PART.finditer(path)]


@dataclass
class Conversion:
    """The result of converting a veRL launch."""

    config: dict[str, Any]
    """The rft config as plain data (nested dicts / lists)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Dotted rft path → comment naming its veRL source(s)."""
    report: Report = field(default_factory=Report)
    defaults: VerlDefaults | None = None
    """The veRL defaults the conversion used."""
    needs: TrainerNeeds = field(default_factory=TrainerNeeds)
    """What bears on the trainer choice (:mod:`~rft_plugin_convert_verl.trainer_choice`)."""


class Converter:
    """Applies the rules to a list of overrides (one use per conversion)."""

    def __init__(self, overrides: list[Override], config_name: str | None = None,
                 config_path: str | None = None) -> None:
        self.settings: dict[str, Override] = {}
        self.report = Report()
        for override in overrides:
            self._add(override)
        engine = self.settings.get("model_engine")
        self.defaults = VerlDefaults.for_launch(
            config_name, config_path, str(engine.value) if engine is not None else None)
        self.config_name = config_name
        self.consumed: set[str] = {"model_engine"} if engine is not None and str(
            engine.value) in MODEL_ENGINES else set()
        self.config: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.passed_through: list[str] = []
        self.sync_interval = 1
        """rft steps per veRL step (set by the batch rule)."""
        self.needs = TrainerNeeds()

    # -- input ----------------------------------------------------------------------------

    def _add(self, override: Override) -> None:
        if override.op == "~":
            self.report.add(override.text, None, "deletes a veRL default (~key); rft has no "
                            "such key to delete", override.line)
            return
        if isinstance(override.value, dict) and override.value:
            for sub, value in override.value.items():  # key={a: 1} → key.a=1
                self._add(Override(f"{override.key}.{sub}", value,
                                   f"{override.key}.{sub}={value}", override.line))
            return
        if override.key in self.settings:
            self.report.note(f"{override.key} is set twice (lines "
                             f"{self.settings[override.key].line} and {override.line}); "
                             "the last value is used, as in Hydra")
        self.settings[override.key] = override

    def has(self, key: str) -> bool:
        return key in self.settings

    def peek(self, key: str) -> Any:
        """The launch's value, else veRL's default, without consuming the key."""
        if key in self.settings:
            return self.settings[key].value
        return self.defaults.get(key, self.peek)

    def get(self, key: str) -> Any:
        """The launch's value, else veRL's default (the key is then marked consumed)."""
        self.consumed.add(key)
        return self.peek(key)

    def source(self, key: str) -> str:
        """``key`` when the launch sets it, else ``key (veRL default value)``."""
        if key in self.settings:
            return key
        return f"{key} (veRL default {self.peek(key)})"

    def source_value(self, key: str) -> str:
        """``key=value`` as written, else ``key (veRL default value)``."""
        if key in self.settings:
            return self.settings[key].text
        return self.source(key)

    def number(self, key: str, consume: bool = True) -> Any:
        """Like :meth:`get` (:meth:`peek` without ``consume``) for a value a derived rule
        computes with: one the script reads from an environment variable (unset during
        conversion, ``${oc.env:NAME}``) cannot be computed with, so veRL's default is
        used — written to the key's rft targets, and reported."""
        value = self.get(key) if consume else self.peek(key)
        if not (isinstance(value, str) and "${oc.env:" in value):
            return value
        self.consumed.add(key)
        default = self.defaults.get(key, self.peek_default)
        setting = self.settings[key]
        self.report.add(key, setting.value_text, "the script reads it from an environment "
                        f"variable, unset during conversion: veRL's default {default} is used "
                        "in the computed sizes (set the variable in the script to convert "
                        "it)", setting.line)
        rule = next((r for r in DIRECT if r.matches(key)), None)
        for target in rule.rft if rule else ():
            self.put(target, default, f"{key} (veRL default {default}: the launch's value "
                     "reads an unset environment variable)")
        return default

    def peek_default(self, key: str) -> Any:
        """veRL's default for ``key`` (ignoring the launch)."""
        return self.defaults.get(key, self.peek_default)

    def skip(self, key: str, reason: str) -> None:
        """Report ``key`` (when the launch sets it) as not converted."""
        self.consumed.add(key)
        if key in self.settings:
            setting = self.settings[key]
            self.report.add(key, setting.value_text, reason, setting.line)

    def under(self, prefix: str) -> list[str]:
        """Keys of the launch below ``prefix``."""
        return [key for key in self.settings if key.startswith(prefix)]

    # -- output ---------------------------------------------------------------------------

    def put(self, path: str, value: Any, comment: str) -> None:
        parts = split_path(path)
        node: Any = self.config
        for depth, (part, nxt) in enumerate(itertools.pairwise(parts)):
            if isinstance(part, int):
                while len(node) <= part:
                    node.append({})
                node = node[part]
            else:
                node = node.setdefault(part, [] if isinstance(nxt, int) else {})
            if not isinstance(node, (dict, list)):
                parent = ".".join(str(p) for p in parts[:depth + 1])
                raise VerlConvertError(f"{comment.split(' ', 1)[0]}: sets a key below "
                                       f"{parent}, which the launch sets to {node!r}")
        last = parts[-1]
        if isinstance(last, int):
            while len(node) <= last:
                node.append(None)
        elif last in node and node[last] != value:
            self.report.note(f"{path} is written twice ({node[last]!r}, then {value!r}); "
                             "the second is kept")
        node[last] = value
        self.sources[path] = comment

    # -- rules ----------------------------------------------------------------------------

    def run(self) -> Conversion:
        if self.defaults.unread:
            self.report.note(self.defaults.unread)
        self._trainer_type()
        self._algorithm()
        self._policy_loss()
        self._kl()
        self._batch()
        self._tasksets()
        self._reward()
        self._monitor()
        self._lora()
        self._strategy()
        self._gpus()
        self._fill_defaults()
        for key, setting in self.settings.items():
            if key in self.consumed:
                continue
            self._apply_table(key, setting)
        self._trainer_needs()
        return Conversion(self.config, self.sources, self.report, self.defaults, self.needs)

    def _apply_table(self, key: str, setting: Override) -> None:
        rule = next((r for r in DIRECT if r.matches(key)), None)
        if rule is not None:
            self._apply_direct(rule, setting.value, key, setting)
            return
        exact = next((r for r in NO_EQUIVALENT if r.verl == key), None)
        if exact is not None:
            self.report.add(key, setting.value_text, exact.note, setting.line)
            return
        rule = next((r for r in PASSTHROUGH if _prefix_match(r.verl, key)), None)
        if rule is not None:
            self.put("trainer.trainer_config." + key, setting.value, key)
            self.passed_through.append(key)
            return
        rule = next((r for r in NO_EQUIVALENT if r.matches(key)), None)
        if rule is not None:
            self.report.add(key, setting.value_text, rule.note, setting.line)
            return
        self.report.add(key, setting.value_text, "unknown veRL key: no conversion rule",
                        setting.line)

    def _apply_direct(self, rule: Rule, value: Any, comment: str,
                      setting: Override | None) -> None:
        try:
            converted = rule.transform(value) if rule.transform else value
            if (rule.verl in STEP_COUNTS and isinstance(converted, int)
                    and not isinstance(converted, bool) and converted > 0
                    and self.sync_interval > 1):
                comment = (f"{comment} × sync_interval = {converted}×{self.sync_interval} "
                           "(a veRL step is sync_interval rft steps)")
                converted *= self.sync_interval
        except Skip as reason:
            if setting is not None:
                self.report.add(rule.verl, setting.value_text, str(reason), setting.line)
            else:
                self.report.add(rule.verl, f"{value} ({self.defaults.origin})", str(reason))
            return
        for target in rule.rft:
            self.put(target, converted, comment)
            if target.startswith("trainer.trainer_config."):
                self.passed_through.append(rule.verl)

    def _fill_defaults(self) -> None:
        """veRL's default for the :data:`FILLED_DEFAULTS` keys the launch leaves out."""
        for key in FILLED_DEFAULTS:
            if self.has(key) or key in self.consumed:
                continue
            if key == "trainer.total_epochs" and self.peek("trainer.total_training_steps"):
                continue
            value = self.peek(key)
            if value is None:
                continue
            rule = next(r for r in DIRECT if r.matches(key))
            self._apply_direct(rule, value, self.source(key), None)

    def _trainer_needs(self) -> None:
        """What only veRL's workers provide, and what the verl trainer cannot run (the
        choice itself is :func:`~rft_plugin_convert_verl.trainer_choice.apply`'s)."""
        read = torch_trainer_keys()
        unread = [key for key in self.passed_through if key not in read]
        self.needs.unread = unread
        if unread:
            shown = ", ".join(unread[:3]) + (f", … ({len(unread)} in all)"
                                             if len(unread) > 3 else "")
            self.needs.verl_only.append(f"veRL worker settings the torch trainer does not "
                                        f"read: {shown}")
        sp = self.config.get("trainer", {}).get("ulysses_sequence_parallel_size", 1)
        if isinstance(sp, int) and not isinstance(sp, bool) and sp > 1:
            self.needs.verl_only.append(f"ulysses sequence parallel {sp}")
            self.needs.blockers.append(f"ulysses sequence parallel {sp} needs {sp} ranks and "
                                       "the verl trainer runs one")
        if self.get(M + "lora_rank") not in (0, None):
            self.needs.blockers.append("LoRA is not implemented by the verl trainer")

    def _trainer_type(self) -> None:
        self.put("trainer.trainer_type", "torch", "rft's native trainer")

    def _algorithm(self) -> None:
        estimator = self.get("algorithm.adv_estimator")
        src = self.source_value("algorithm.adv_estimator")
        known = ADVANTAGES.get(str(estimator))
        if known is None:
            self.skip("algorithm.adv_estimator",
                      f"rft has no advantage function for {estimator!r}; set "
                      "algorithm.algorithm_type / advantage_fn by hand")
            accepted: tuple[str, ...] = ()
        else:
            algorithm_type, advantage_fn, accepted = known
            self.put("algorithm.algorithm_type", algorithm_type, src)
            self.put("algorithm.advantage_fn", advantage_fn, src)
        n = self.number(R + "n")
        self.put("algorithm.repeat_times", n, self.source(R + "n"))  # validated in _batch
        for arg in DERIVED["advantage_args"].reads:
            name = arg.split(".")[-1]
            if not self.has(arg):
                continue
            if name in accepted:
                self.put(f"algorithm.advantage_fn_args.{name}", self.get(arg), arg)
            else:
                self.skip(arg, f"not used by adv_estimator={estimator}")

    def _policy_loss(self) -> None:
        mode_key = A + "policy_loss.loss_mode"
        mode = self.get(mode_key)
        known = POLICY_LOSSES.get(str(mode))
        supported = known is not None
        if known is None:
            self.skip(mode_key, f"rft has no policy loss for loss_mode {mode!r} (it has "
                      + ", ".join(f"{v[0]} for {k}" for k, v in POLICY_LOSSES.items())
                      + "): the preset's clipped surrogate (ppo) is used")
            known = POLICY_LOSSES["vanilla"]
        loss, arguments, distribution = known
        if supported and (loss != "ppo" or self.has(mode_key)):
            self.put("algorithm.policy_loss_fn", loss, self.source_value(mode_key))
            if not _installed(distribution):
                self.report.note(f"algorithm.policy_loss_fn {loss!r} comes from "
                                 f"{distribution}: pip install {distribution}")
        for verl_name, rft_name in arguments.items():
            self.put(f"algorithm.policy_loss_fn_args.{rft_name}", self.get(A + verl_name),
                     self.source(A + verl_name))
        for verl_name in LOSS_SETTINGS:
            if verl_name not in arguments:
                self.skip(A + verl_name, f"not used by loss_mode={mode} (rft's {loss} loss "
                          "has no such parameter)")
        for key in self.under(A + "policy_loss."):
            if key != mode_key:
                self.skip(key, f"a parameter of other veRL policy losses; rft's {loss} loss "
                          f"has none (loss_mode={mode})")
        self.put("algorithm.entropy_loss_fn_args.entropy_coef", self.get(A + "entropy_coeff"),
                 self.source(A + "entropy_coeff"))

    def _kl(self) -> None:
        in_reward = self.get("algorithm.use_kl_in_reward")
        src = self.source_value("algorithm.use_kl_in_reward")
        if in_reward:
            name = self.get("algorithm.kl_penalty")
            if name in KL_NAMES or str(name).rstrip("+") in KL_NAMES:
                self.put("algorithm.kl_penalty_fn", name,
                         f"{src}, {self.source_value('algorithm.kl_penalty')}")
            else:
                self.skip("algorithm.kl_penalty", f"rft has no KL estimator {name!r}")
            self.put("algorithm.kl_penalty_fn_args.kl_coef",
                     self.get("algorithm.kl_ctrl.kl_coef"), self.source("algorithm.kl_ctrl.kl_coef"))
        else:
            self.put("algorithm.kl_penalty_fn", "none", src)
            self.skip("algorithm.kl_penalty", "inactive: algorithm.use_kl_in_reward is false")
            if self.has("algorithm.kl_ctrl.kl_coef"):  # harmless with kl_penalty_fn none
                self.put("algorithm.kl_penalty_fn_args.kl_coef",
                         self.get("algorithm.kl_ctrl.kl_coef"), "algorithm.kl_ctrl.kl_coef")
        kl_type = self.settings.get("algorithm.kl_ctrl.type")
        if kl_type is not None and kl_type.value == "adaptive":
            self.report.note("algorithm.kl_ctrl.type=adaptive: rft's KL penalty uses a fixed "
                             "coefficient (kl_penalty_fn_args.kl_coef)")
        use_loss = self.get(A + "use_kl_loss")
        src = self.source_value(A + "use_kl_loss")
        if use_loss:
            name = self.get(A + "kl_loss_type")
            if str(name).rstrip("+") in KL_NAMES:
                self.put("algorithm.kl_loss_fn", name,
                         f"{src}, {self.source_value(A + 'kl_loss_type')}")
            else:
                self.skip(A + "kl_loss_type", f"rft has no KL estimator {name!r}")
            self.put("algorithm.kl_loss_fn_args.kl_coef", self.get(A + "kl_loss_coef"),
                     self.source(A + "kl_loss_coef"))
        else:
            self.put("algorithm.kl_loss_fn", "none", src)
            for key in (A + "kl_loss_type", A + "kl_loss_coef"):
                self.skip(key, "inactive: actor_rollout_ref.actor.use_kl_loss is false")

    def _batch(self) -> None:
        mini_key, total_key, n_key = A + "ppo_mini_batch_size", "data.train_batch_size", R + "n"
        mini, total, n = self.number(mini_key), self.number(total_key), self.get(n_key)
        n = n if not isinstance(n, str) else self.peek_default(n_key)
        for key, value in ((mini_key, mini), (total_key, total), (n_key, n)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise VerlConvertError(f"{key}={value}: expected a positive integer")
        if total % mini:
            raise VerlConvertError(
                f"{total_key}={total} is not a multiple of {mini_key}={mini}; rft's "
                "synchronizer.sync_interval (their ratio) must be a whole number of steps")
        mini_src, total_src = self.source(mini_key), self.source(total_key)
        self.put("buffer.batch_size", mini, mini_src)
        self.put("buffer.train_batch_size", n * mini,
                 f"{self.source(n_key)} × {mini_src} = {n}×{mini}")
        self.put("synchronizer.sync_style", "fixed", "veRL's synchronous loop")
        self.put("synchronizer.sync_offset", 0, "veRL's synchronous loop: no explorer lead")
        self.put("synchronizer.sync_interval", total // mini,
                 f"{total_src} / {mini_src} = {total}/{mini}")
        self.sync_interval = total // mini

    def _taskset_entries(self, key: str) -> list[tuple[str, str, str]]:
        """``(name, path, split)`` per file of ``data.train_files`` / ``data.val_files``."""
        files = self.get(key)
        if files is None or files == "" or files == []:
            return []
        if not isinstance(files, list):
            files = [files]
        entries: list[tuple[str, str, str]] = []
        for item in files:
            path = str(item)
            folder, base = posixpath.split(path.rstrip("/"))
            stem, suffix = posixpath.splitext(base)
            if suffix in DATA_SUFFIXES and stem.lower() in SPLIT_FILES and folder:
                name, path, split = posixpath.basename(folder), folder, SPLIT_FILES[stem.lower()]
            else:
                name, split = (stem if suffix in DATA_SUFFIXES else base), "train"
            if not re.fullmatch(r"[\w.\-]+", name or ""):
                name = "taskset"
            entries.append((name, path, split))
        return entries

    def _format(self, prefix: str) -> None:
        prompt_key = self.get("data.prompt_key")
        self.put(f"{prefix}.format.prompt_type", "messages",
                 "veRL's dataset rows hold chat messages")
        self.put(f"{prefix}.format.messages_key", prompt_key, self.source("data.prompt_key"))
        if self.has("data.response_key"):
            self.put(f"{prefix}.format.response_key", self.get("data.response_key"),
                     "data.response_key")
        else:
            self.put(f"{prefix}.format.response_key", "reward_model",
                     "veRL's dataset column holding reward_model.ground_truth")

    def _tasksets(self) -> None:
        names: set[str] = set()
        self.tasksets: list[tuple[str, str]] = []  # (prefix, path)

        def unique(name: str) -> str:
            candidate, i = name, 2
            while candidate in names:
                candidate, i = f"{name}_{i}", i + 1
            names.add(candidate)
            return candidate

        train = self._taskset_entries("data.train_files")
        shuffle = self.get("data.shuffle")
        for i, (name, path, split) in enumerate(train):
            prefix = f"buffer.explorer_input.tasksets[{i}]"
            src = self.source("data.train_files")
            self.put(f"{prefix}.name", unique(name), src)
            self.put(f"{prefix}.storage_type", "file", src)
            self.put(f"{prefix}.path", path, src)
            self.put(f"{prefix}.split", split, src)
            self._format(prefix)
            self.put(f"{prefix}.task_selector.selector_type",
                     "shuffle" if shuffle else "sequential", self.source_value("data.shuffle"))
            if self.has("data.seed") and self.get("data.seed") is not None:
                self.put(f"{prefix}.task_selector.seed", self.get("data.seed"), "data.seed")
            self.tasksets.append((prefix, path))
        if train and shuffle:
            self.report.note("data.shuffle: rft shuffles the tasksets with its own sampler "
                             "and seed (task_selector.seed); the order differs from veRL's")
        if not train:
            self.skip("data.shuffle", "no data.train_files in the launch")
            self.report.note("no data.train_files: add buffer.explorer_input.tasksets by hand")
        val = self._taskset_entries("data.val_files")
        greedy = not self.get(R + "val_kwargs.do_sample")
        for i, (name, path, split) in enumerate(val):
            prefix = f"buffer.explorer_input.eval_tasksets[{i}]"
            src = self.source("data.val_files")
            self.put(f"{prefix}.name", unique(f"{name}_eval"), src)
            self.put(f"{prefix}.storage_type", "file", src)
            self.put(f"{prefix}.path", path, src)
            self.put(f"{prefix}.split", split, src)
            self._format(prefix)
            if greedy:
                self.put(f"{prefix}.rollout_args.temperature", 0.0,
                         self.source_value(R + "val_kwargs.do_sample") + " (greedy)")
            else:
                self.put(f"{prefix}.rollout_args.temperature",
                         self.get(R + "val_kwargs.temperature"),
                         self.source(R + "val_kwargs.temperature"))
            for sub in ("top_p", "top_k"):
                if self.has(R + "val_kwargs." + sub):
                    self.put(f"{prefix}.rollout_args.{sub}", self.get(R + "val_kwargs." + sub),
                             R + "val_kwargs." + sub)
            if self.has(R + "val_kwargs.n"):
                self.put(f"{prefix}.repeat_times", self.get(R + "val_kwargs.n"),
                         R + "val_kwargs.n")
            self.tasksets.append((prefix, path))
        if val and not self.has("trainer.test_freq"):
            self.report.note("trainer.test_freq is not set: veRL (default -1) validates only "
                             "before training; rft evaluates the eval tasksets every "
                             "explorer.eval_interval steps (default 100)")
        if train or val:
            self.report.note(
                "the tasksets are read in veRL's dataset layout (chat messages in the "
                "prompt column, the answer in reward_model.ground_truth, a data_source "
                "column); check the files have it")
        for key in DERIVED["tasksets"].reads:
            if self.has(key) and key not in self.consumed:
                self.skip(key, "unused: the launch has no "
                          + ("data.val_files" if "val_kwargs" in key else
                             "data.train_files / data.val_files"))

    def _reward(self) -> None:
        if not self.tasksets:
            for key in DERIVED["reward"].reads:
                self.skip(key, "unused: the launch has no tasksets")
            return
        self.put("buffer.explorer_input.default_workflow_type", WORKFLOW,
                 "veRL's reward manager: each row scored by its data_source")
        path_key = next((k for k in ("custom_reward_function.path",
                                     "reward.custom_reward_function.path")
                         if self.get(k) is not None), None)
        name_key = ("reward.custom_reward_function.name" if path_key and path_key.startswith(
            "reward.") else "custom_reward_function.name")
        kwargs = {key.rsplit(".", 1)[1]: self.settings[key].value
                  for key in self.under("custom_reward_function.reward_kwargs.")}
        for key in self.under("custom_reward_function.reward_kwargs"):
            self.consumed.add(key)
        for key in ("custom_reward_function.name", "reward.custom_reward_function.name"):
            self.consumed.add(key)
        used: list[str] = []
        for prefix, path in self.tasksets:
            if path_key is not None:
                self.put(f"{prefix}.workflow_args.custom_reward_path", self.get(path_key),
                         path_key)
                name = self.peek(name_key) or "compute_score"
                self.put(f"{prefix}.workflow_args.custom_reward_name", name,
                         self.source(name_key) if self.has(name_key) else
                         f"{name_key} (veRL default compute_score)")
                if kwargs:
                    self.put(f"{prefix}.workflow_args.reward_kwargs", dict(kwargs),
                             "custom_reward_function.reward_kwargs")
                continue
            for source, (pattern, reward) in RFT_REWARDS.items():
                if pattern.search(path):
                    self.put(f"{prefix}.default_reward_fn_type", reward,
                             f"data_source {source} (from the path): veRL's scorer, ported")
                    used.append(reward)
                    break
        if path_key is not None:
            self.report.note(f"reward: {WORKFLOW} calls the custom reward function "
                             f"{self.get(path_key)}:{self.peek(name_key) or 'compute_score'} "
                             "as veRL does (data_source, solution_str, ground_truth, "
                             "extra_info)")
        else:
            others = len(self.tasksets) - len(used)
            parts = []
            if used:
                parts.append(f"{len(used)} taskset(s) use {', '.join(sorted(set(used)))} "
                             "(rft's port of veRL's scorer for that data_source)")
            if others:
                parts.append(f"{others} taskset(s) are scored by veRL's own "
                             "verl.utils.reward_score.default_compute_score for each row's "
                             "data_source (veRL must be installed where rft runs)")
            self.report.note(f"reward: {WORKFLOW} scores like veRL's default reward manager: "
                             + "; ".join(parts))
        enabled = next((k for k in ("reward_model.enable", "reward.reward_model.enable")
                        if self.get(k)), None)
        if enabled is not None:
            setting = self.settings[enabled]
            self.report.add(enabled, setting.value_text, "veRL rewards with this reward "
                            "model's score; rft does not serve reward models for scoring, so "
                            "the converted config scores with the rule-based reward above "
                            "(a different reward)", setting.line)

    def _monitor(self) -> None:
        loggers = self.get("trainer.logger")
        src = self.source("trainer.logger")
        if loggers is None:
            return
        if not isinstance(loggers, list):
            loggers = [loggers]
        chosen = [str(name) for name in loggers if name != "console"]
        if not chosen:
            self.put("monitor.monitor_type", "console", src)
            return
        first = chosen[0]
        self.put("monitor.monitor_type", MONITORS.get(first, first),
                 f"{src} (console is always on)")
        if first not in MONITORS:
            self.report.note(f"trainer.logger {first!r}: rft has no monitor of that name "
                             "built in; a plugin must provide it")
        for other in chosen[1:]:
            self.report.add("trainer.logger", other,
                            "rft logs to one monitor besides the console; "
                            f"{MONITORS.get(first, first)} was kept")

    def _lora(self) -> None:
        rank = self.get(M + "lora_rank")
        keys = DERIVED["lora"].reads[1:]
        if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
            for key in keys:
                self.skip(key, f"inactive: {M}lora_rank is {rank!r}")
            return
        prefix = "model.lora_configs[0]"
        self.put(f"{prefix}.lora_rank", rank, M + "lora_rank")
        self.put(f"{prefix}.lora_alpha", self.get(M + "lora_alpha"), self.source(M + "lora_alpha"))
        modules = self.get(M + "target_modules")
        if isinstance(modules, str):
            self.put(f"{prefix}.target_modules", modules, self.source(M + "target_modules"))
        elif isinstance(modules, (list, tuple)) and modules and all(
                isinstance(m, str) and m.replace("_", "").replace(".", "").isalnum()
                for m in modules):  # rft's one string: comma-separated module names
            self.put(f"{prefix}.target_modules", ",".join(modules),
                     self.source(M + "target_modules"))
        else:
            self.skip(M + "target_modules", "rft's lora_configs[0].target_modules is one "
                      "string (all-linear, comma-separated names or a regex); this value "
                      "was not converted")
        if self.get(M + "exclude_modules") is not None:
            self.put(f"{prefix}.exclude_modules", self.get(M + "exclude_modules"),
                     M + "exclude_modules")
        if self.get(M + "lora_adapter_path") is not None:
            self.put(f"{prefix}.path", self.get(M + "lora_adapter_path"),
                     M + "lora_adapter_path")
        self.report.note(f"LoRA (rank {rank}) is written to model.lora_configs: rft trains "
                         "the adapter (base weights frozen) and syncs only the adapter; "
                         "docs/lora.md")

    def _strategy(self) -> None:
        key = A + "strategy"
        strategy = self.get(key)
        if strategy in ("fsdp", "fsdp2"):
            self.put("trainer.trainer_strategy", strategy, self.source(key))
            return
        self.needs.verl_only.append(f"the {strategy} strategy")
        self.needs.blockers.append(f"the verl trainer does not implement {strategy!r} (it "
                                   "drives veRL's FSDP engines)")
        self.put("trainer.trainer_strategy", "fsdp",
                 f"{self.source(key)}: rft's torch trainer has no {strategy!r} backend")
        value = (self.settings[key].value_text if self.has(key)
                 else f"{strategy} ({self.defaults.origin})")
        self.report.add(key, value, f"rft's torch trainer has no {strategy!r} backend: the "
                        "converted config trains with trainer_strategy fsdp (FSDP2); the "
                        f"{strategy} settings stay in trainer.trainer_config",
                        self.settings[key].line if self.has(key) else 0)

    def _gpus(self) -> None:
        nodes = self.number("trainer.nnodes", consume=False)
        per_node = self.number("trainer.n_gpus_per_node", consume=False)
        tp_key = R + "tensor_model_parallel_size"
        tp = self.number(tp_key)
        for key, value in (("trainer.nnodes", nodes), ("trainer.n_gpus_per_node", per_node),
                           (tp_key, tp)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise VerlConvertError(f"{key}={value}: expected a positive integer")
        total = nodes * per_node
        if total > 1:
            self.needs.blockers.append(f"it runs one trainer rank and the launch trains on "
                                       f"{total} GPUs")
        gpus = (f"{total} GPUs ({self.source('trainer.nnodes')} × "
                f"{self.source('trainer.n_gpus_per_node')})")
        engines = max(1, total // EXPLORER_GPU_SHARE // tp)
        if total > COLOCATE_MAX_GPUS and engines * tp < total:
            used = engines * tp
            self.put("explorer.rollout_model.engine_num", engines,
                     f"{gpus} / {EXPLORER_GPU_SHARE} / tensor_parallel_size {tp}")
            self.put("explorer.rollout_model.tensor_parallel_size", tp, self.source(tp_key))
            self.report.note(f"GPU split: explorer {used} of {total} GPUs, trainer "
                             f"{total - used} (veRL's hybrid engine time-shares all of them; "
                             "adjust explorer.rollout_model.engine_num to taste)")
            return
        why = f"veRL's hybrid engine on {gpus}"
        self.put("mode", "colocate", why)
        self.put("explorer.rollout_model.engine_num", 1,
                 f"{why}: colocate runs one engine per GPU (per trainer rank)")
        self.put("explorer.rollout_model.tensor_parallel_size", 1,
                 f"{why}: colocate runs one engine of tensor_parallel_size 1 per GPU")
        self.put("synchronizer.sync_method", "memory",
                 f"{why}: colocate hands the weights over in memory, within each rank")
        if self.has(tp_key) and tp > 1:
            self.skip(tp_key, "colocate mode runs one engine of tensor_parallel_size 1 per GPU")
        reason = ("" if total <= COLOCATE_MAX_GPUS else
                  f" (one rollout engine of tensor_parallel_size {tp} would take all of them)")
        ranks = f"{total} trainer rank{'s' if total > 1 else ''}"
        self.report.note(
            f"GPUs: veRL's hybrid engine time-shares {total} GPU(s) between rollout and "
            f"training{reason}; rft's colocate mode does the same: {ranks} (trainer.ranks, "
            "derived from cluster.node_num × gpu_per_node), each with one rollout engine on "
            "its GPU, explorer and trainer taking turns")


def _prefix_match(pattern: str, key: str) -> bool:
    """``a.b.*`` matches ``a.b.c…``; ``a.b.x_*`` matches ``a.b.x_y…``."""
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern


def convert_overrides(overrides: list[Override], config_name: str | None = None,
                      config_path: str | None = None) -> Conversion:
    """Apply every rule to the overrides of a veRL launch.

    :param config_name: the launch's ``--config-name`` (its defaults are veRL's shipped
        config of that name, when there is one).
    :raises VerlConvertError: the batch sizes break the alignment rules, or a required
        companion key is missing.
    """
    return Converter(overrides, config_name, config_path).run()


def table_rows() -> list[tuple[str, str, str]]:
    """``(veRL, rft, note)`` for every rule, in the order of docs/verl.md."""
    rows: list[tuple[str, str, str]] = []
    for rule in DERIVED.values():
        rows.append((", ".join(f"`{k}`" for k in rule.reads) or "—",
                     ", ".join(f"`{k}`" for k in rule.writes), rule.rule))
    for direct in DIRECT:
        rows.append((f"`{direct.verl}`", ", ".join(f"`{k}`" for k in direct.rft), direct.note))
    for kept in PASSTHROUGH:
        rows.append((f"`{kept.verl}`", ", ".join(f"`{k}`" for k in kept.rft),
                     kept.note or "kept for veRL's workers (the report lists those rft's "
                     "torch trainer does not read)"))
    for missing in NO_EQUIVALENT:
        rows.append((f"`{missing.verl}`", "— (reported)", missing.note))
    return rows


def markdown_table() -> str:
    """The rules as a Markdown table, embedded in docs/verl.md (a test keeps it current).

    Regenerate with ``python -c "from rft_plugin_convert_verl.mapping import markdown_table;
    print(markdown_table(), end='')"``.
    """
    lines = ["| veRL | rft | rule / note |", "|:--|:--|:--|"]
    for verl, rft, note in table_rows():
        escaped = note.replace("|", "\\|")
        lines.append(f"| {verl} | {rft} | {escaped} |")
    return "\n".join(lines) + "\n"
