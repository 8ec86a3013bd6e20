"""The veRL → rft rules, as data where possible.

Sources: the veRL alignment guide (parameter mapping tables, batch-size rules, GPU
allocation) and veRL 0.9.1's ``ppo_trainer.yaml`` for the defaults the derived rules fall
back on. Four kinds of rules, tried in this order for each veRL key:

1. :data:`DERIVED` — values computed from several veRL keys (algorithm preset, KL
   switches, batch sizes and sync interval, tasksets from ``data.*_files``, monitor, GPU
   split, reward model).
2. :data:`DIRECT` — one veRL key → one or more rft keys, with an optional transform.
3. :data:`NO_EQUIVALENT` — known veRL keys (or subtrees) that have no rft counterpart;
   they go to the report with the reason.
4. :data:`PASSTHROUGH` — subtrees that the veRL trainer backend reads from
   ``trainer.trainer_config`` under the same key.

A key that no rule matches is reported as unknown. Nothing is dropped silently.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rft_plugin_convert_verl.parse import Override, VerlConvertError
from rft_plugin_convert_verl.report import Report

# ---------------------------------------------------------------------------------------
# veRL defaults the derived rules need (veRL 0.9.1, verl/trainer/config/ppo_trainer.yaml)
# ---------------------------------------------------------------------------------------

VERL_DEFAULTS: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.use_kl_in_reward": False,
    "algorithm.kl_penalty": "kl",
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.rollout.n": 1,
    "data.train_batch_size": 1024,
    "data.shuffle": True,
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 8,
}
"""Values veRL uses when a launch does not set them, where a derived rule needs one."""

EXPLORER_GPU_SHARE = 4
"""veRL's hybrid engine time-shares every GPU between rollout and training; rft gives the
rollout engines (and each reward model) ``1/EXPLORER_GPU_SHARE`` of the GPUs and the
trainer the rest. A quarter reproduces both worked examples of the alignment guide."""


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


def _strategy(value: Any) -> Any:
    if value in ("fsdp", "fsdp2", "megatron"):
        return value
    raise Skip(f"rft's trainer_strategy is fsdp, fsdp2 or megatron, not {value!r}")


def _total_steps(value: Any) -> Any:
    if value is None:
        raise Skip("null: the length comes from trainer.total_epochs")
    return value


def _optimizer_type(value: Any) -> Any:
    if str(value).lower() in ("adamw", "adam"):
        return "adam"  # rft's "adam" is AdamW with decoupled weight decay
    raise Skip(f"rft's optimizer_type is adam (AdamW); {value!r} has no equivalent")


# ---------------------------------------------------------------------------------------
# the tables
# ---------------------------------------------------------------------------------------

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."

DIRECT: tuple[Rule, ...] = (
    # algorithm: the advantage-function arguments are in DERIVED (they depend on the
    # estimator)
    # data
    Rule("data.max_prompt_length", ("model.max_prompt_tokens",)),
    Rule("data.max_response_length", ("model.max_response_tokens",)),
    Rule("data.filter_overlong_prompts", ("model.enable_prompt_truncation",),
         note="overlong prompts are truncated and their experiences masked out of the loss"),
    # actor / model
    Rule("actor_rollout_ref.model.path", ("model.model_path",)),
    Rule("actor_rollout_ref.model.trust_remote_code", ("model.trust_remote_code",)),
    Rule("actor_rollout_ref.model.custom_chat_template", ("model.custom_chat_template",)),
    Rule(A + "optim.lr", ("algorithm.optimizer.lr",)),
    Rule(A + "optim.lr_warmup_steps", ("algorithm.optimizer.lr_warmup_steps",)),
    Rule(A + "optim.lr_warmup_steps_ratio", ("algorithm.optimizer.lr_warmup_steps_ratio",)),
    Rule(A + "optim.min_lr_ratio", ("algorithm.optimizer.min_lr_ratio",)),
    Rule(A + "optim.warmup_style", ("algorithm.optimizer.warmup_style",)),
    Rule(A + "optim.lr_scheduler_type", ("algorithm.optimizer.lr_scheduler_type",)),
    Rule(A + "optim.weight_decay", ("algorithm.optimizer.weight_decay",)),
    Rule(A + "optim.betas", ("algorithm.optimizer.betas",)),
    Rule(A + "optim.clip_grad", ("algorithm.optimizer.clip_grad",)),
    Rule(A + "optim.optimizer", ("algorithm.optimizer.optimizer_type",), _optimizer_type,
         note="AdamW → adam"),
    Rule(A + "use_dynamic_bsz", ("trainer.use_dynamic_bsz",)),
    Rule(A + "ppo_max_token_len_per_gpu", ("trainer.max_token_len_per_gpu",)),
    Rule(A + "ulysses_sequence_parallel_size", ("trainer.ulysses_sequence_parallel_size",)),
    Rule(A + "grad_clip", ("trainer.grad_clip",)),
    Rule(A + "strategy", ("trainer.trainer_strategy",), _strategy),
    Rule(A + "kl_loss_coef", ("algorithm.kl_loss_fn_args.kl_coef",)),
    Rule(A + "entropy_coeff", ("algorithm.entropy_loss_fn_args.entropy_coef",)),
    Rule(A + "clip_ratio", ("algorithm.policy_loss_fn_args.clip_range",)),
    Rule(A + "clip_ratio_low", ("algorithm.policy_loss_fn_args.clip_range_low",)),
    Rule(A + "clip_ratio_high", ("algorithm.policy_loss_fn_args.clip_range_high",)),
    Rule(A + "clip_ratio_c", ("algorithm.policy_loss_fn_args.clip_ratio_c",)),
    Rule(A + "loss_agg_mode", ("algorithm.loss_agg_mode",)),
    # rollout
    Rule(R + "name", ("explorer.rollout_model.engine_type",), _engine_type),
    Rule(R + "gpu_memory_utilization", ("explorer.rollout_model.gpu_memory_utilization",)),
    Rule(R + "tensor_model_parallel_size", ("explorer.rollout_model.tensor_parallel_size",)),
    Rule(R + "temperature", ("model.temperature",)),
    Rule(R + "top_p", ("model.top_p",)),
    Rule(R + "top_k", ("model.top_k",)),
    Rule(R + "enforce_eager", ("explorer.rollout_model.enforce_eager",)),
    Rule(R + "enable_chunked_prefill", ("explorer.rollout_model.enable_chunked_prefill",)),
    Rule(R + "enable_prefix_caching", ("explorer.rollout_model.enable_prefix_caching",)),
    Rule(R + "dtype", ("explorer.rollout_model.dtype",)),
    Rule(R + "seed", ("explorer.rollout_model.seed",)),
    Rule(R + "max_model_len", ("explorer.rollout_model.max_model_len",)),
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
    Rule("trainer.total_epochs", ("buffer.total_epochs",)),
    Rule("trainer.total_training_steps", ("buffer.total_steps", "trainer.total_steps"),
         _total_steps, note="when set, total_epochs is ignored"),
    Rule("trainer.critic_warmup", ("trainer.trainer_config.trainer.critic_warmup",)),
    Rule("trainer.val_before_train", ("explorer.eval_on_startup",)),
    Rule("trainer.resume_mode", ("continue_from_checkpoint",), _resume_mode,
         note="auto → true, disable → false; resume_path is reported"),
    Rule("trainer.max_actor_ckpt_to_keep", ("trainer.max_checkpoints_to_keep",)),
)
"""One veRL key → rft key(s)."""

PASSTHROUGH: tuple[Rule, ...] = (
    Rule("actor_rollout_ref.model.*", ("trainer.trainer_config.actor_rollout_ref.model.*",)),
    Rule(A + "*", ("trainer.trainer_config.actor_rollout_ref.actor.*",)),
    Rule("actor_rollout_ref.ref.*", ("trainer.trainer_config.actor_rollout_ref.ref.*",)),
    Rule(R + "log_prob_*", ("trainer.trainer_config.actor_rollout_ref.rollout.log_prob_*",),
         note="the actor / reference workers compute log-probs with these"),
    Rule("critic.*", ("trainer.trainer_config.critic.*",)),
)
"""Subtrees passed unchanged to veRL's workers through ``trainer.trainer_config``."""

NO_EQUIVALENT: tuple[Rule, ...] = (
    Rule("data.truncation", note="rft cuts overlong prompts on the right (veRL's "
         "truncation=right) when model.enable_prompt_truncation is true"),
    Rule("data.val_batch_size", note="deprecated in veRL; rft evaluates buffer.batch_size "
         "tasks at a time"),
    Rule("data.return_raw_chat", note="rft workflows always receive the chat messages"),
    Rule("data.reward_fn_key", note="per-sample reward functions: the taskset's "
         "format.reward_fn_key column"),
    Rule("data.tokenizer", note="the tokenizer is model.model_path's"),
    Rule("data.dataloader_num_workers", note="tasksets are read by the explorer"),
    Rule("custom_reward_function.*", note="write a reward function plugin "
         "(register_reward_fns) and set buffer.explorer_input.default_reward_fn_type"),
    Rule("reward_model.*", note="FSDP reward-model worker setting; rft serves a reward "
         "model with vLLM as explorer.auxiliary_models[0]"),
    Rule("trainer.resume_from_path", note="rft resumes from the latest checkpoint in "
         "<checkpoint_root_dir>/<project>/<name>/; copy the checkpoint there"),
    Rule("trainer.device", note="rft uses the accelerators Ray reports"),
    Rule("trainer.val_only", note="use mode: bench to evaluate checkpoints"),
    Rule("trainer.default_hdfs_dir", note="no HDFS upload in rft"),
    Rule(R + "val_kwargs.*", note="see buffer.explorer_input.eval_tasksets"),
    Rule(R + "*", note="veRL rollout-worker setting without an explorer.rollout_model "
         "field (the guide: rollout settings in trainer_config have no effect)"),
    Rule("actor_rollout_ref.hybrid_engine", note="rft always separates explorer and "
         "trainer (or alternates them in colocate mode)"),
    Rule("algorithm.*", note="no rft algorithm setting corresponds"),
    Rule("data.*", note="no rft taskset setting corresponds"),
    Rule("trainer.*", note="veRL training-loop setting without an rft counterpart"),
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

DERIVED: dict[str, Derived] = {
    "algorithm": Derived(
        ("algorithm.adv_estimator",),
        ("algorithm.algorithm_type", "algorithm.advantage_fn"),
        "`adv_estimator` picks the preset and advantage function: "
        + ", ".join(f"{k} → {v[0]}/{v[1]}" for k, v in ADVANTAGES.items())
        + " (veRL default gae)"),
    "advantage_args": Derived(
        ("algorithm.gamma", "algorithm.lam", "algorithm.norm_adv_by_std_in_grpo"),
        ("algorithm.advantage_fn_args.gamma", "algorithm.advantage_fn_args.lam",
         "algorithm.advantage_fn_args.norm_adv_by_std_in_grpo"),
        "copied into `advantage_fn_args` when the estimator takes them (gamma: gae, "
        "reinforce_plus_plus; lam: gae; norm_adv_by_std_in_grpo: grpo); else reported"),
    "kl_penalty": Derived(
        ("algorithm.use_kl_in_reward", "algorithm.kl_penalty", "algorithm.kl_ctrl.kl_coef"),
        ("algorithm.kl_penalty_fn", "algorithm.kl_penalty_fn_args.kl_coef"),
        "`use_kl_in_reward=False` (veRL default) → `kl_penalty_fn: none`; true → the "
        "`kl_penalty` estimator (veRL default kl); `kl_ctrl.kl_coef` → `kl_coef`"),
    "kl_loss": Derived(
        (A + "use_kl_loss", A + "kl_loss_type"),
        ("algorithm.kl_loss_fn",),
        "`use_kl_loss=False` (veRL default) → `kl_loss_fn: none`; true → the "
        "`kl_loss_type` estimator (veRL default low_var_kl)"),
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
        "(veRL defaults: train_batch_size 1024, ppo_mini_batch_size 256)"),
    "tasksets": Derived(
        ("data.train_files", "data.val_files", "data.prompt_key", "data.response_key",
         "data.shuffle", "data.seed", R + "val_kwargs.temperature", R + "val_kwargs.top_p",
         R + "val_kwargs.top_k", R + "val_kwargs.n", R + "val_kwargs.do_sample"),
        ("buffer.explorer_input.tasksets", "buffer.explorer_input.eval_tasksets"),
        "one taskset per file (a list or one path); `<dir>/train.parquet` → `path: <dir>`, "
        "`split: train` (same for test / validation files), named after the folder "
        "(`_eval` for evaluation); `prompt_key` / `response_key` → each taskset's "
        "`format`; `shuffle` → `task_selector.selector_type` shuffle / sequential, "
        "`seed` → its seed; `val_kwargs` → each eval taskset's `rollout_args` "
        "(`do_sample=False` → temperature 0) and `n` → `repeat_times`"),
    "monitor": Derived(
        ("trainer.logger",), ("monitor.monitor_type",),
        "the first logger other than console (" + ", ".join(
            f"{k} → {v}" for k, v in MONITORS.items() if k != "console")
        + "); `console` when it is the only one (rft always logs to the console)"),
    "gpus": Derived(
        ("trainer.nnodes", "trainer.n_gpus_per_node", R + "tensor_model_parallel_size"),
        ("explorer.rollout_model.engine_num",),
        f"veRL time-shares all GPUs; rft splits them: `engine_num = max(1, nnodes × "
        f"n_gpus_per_node / {EXPLORER_GPU_SHARE} / tensor_parallel_size)`, the same for "
        "a reward model, the trainer gets the rest"),
    "reward_model": Derived(
        ("reward_model.enable", "reward_model.model.path",
         "reward_model.rollout.tensor_model_parallel_size"),
        ("explorer.auxiliary_models",),
        "with `enable=True`: `explorer.auxiliary_models[0]` with the model path, "
        "`engine_num` as for the rollout model, `tensor_parallel_size` (default 1); "
        "the workflow must call it"),
    "trainer_type": Derived(
        (), ("trainer.trainer_type",),
        "always `verl`: the veRL trainer backend reads `trainer.trainer_config`"),
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


class Converter:
    """Applies the rules to a list of overrides (one use per conversion)."""

    def __init__(self, overrides: list[Override]) -> None:
        self.settings: dict[str, Override] = {}
        self.report = Report()
        for override in overrides:
            self._add(override)
        self.consumed: set[str] = set()
        self.config: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

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

    def get(self, key: str) -> Any:
        """The launch's value, else veRL's default (the key is then marked consumed)."""
        self.consumed.add(key)
        if key in self.settings:
            return self.settings[key].value
        return VERL_DEFAULTS.get(key)

    def peek(self, key: str) -> Any:
        """Like :meth:`get`, without consuming the key (another rule converts it)."""
        if key in self.settings:
            return self.settings[key].value
        return VERL_DEFAULTS.get(key)

    def source(self, key: str) -> str:
        """``key`` when the launch sets it, else ``key (veRL default: value)``."""
        if key in self.settings:
            return key
        return f"{key} (veRL default {VERL_DEFAULTS.get(key)})"

    def source_value(self, key: str) -> str:
        """``key=value`` as written, else ``key (veRL default: value)``."""
        if key in self.settings:
            return self.settings[key].text
        return self.source(key)

    def skip(self, key: str, reason: str) -> None:
        self.consumed.add(key)
        if key in self.settings:
            setting = self.settings[key]
            self.report.add(key, setting.value_text, reason, setting.line)

    # -- output ---------------------------------------------------------------------------

    def put(self, path: str, value: Any, comment: str) -> None:
        parts = split_path(path)
        node: Any = self.config
        for part, nxt in zip(parts, parts[1:]):
            if isinstance(part, int):
                while len(node) <= part:
                    node.append({})
                node = node[part]
            else:
                node = node.setdefault(part, [] if isinstance(nxt, int) else {})
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
        self._trainer_type()
        self._algorithm()
        self._kl()
        self._batch()
        self._tasksets()
        self._monitor()
        self._gpus_and_reward_model()
        for key, setting in self.settings.items():
            if key in self.consumed:
                continue
            self._apply_table(key, setting)
        return Conversion(self.config, self.sources, self.report)

    def _apply_table(self, key: str, setting: Override) -> None:
        rule = next((r for r in DIRECT if r.matches(key)), None)
        if rule is not None:
            try:
                value = rule.transform(setting.value) if rule.transform else setting.value
            except Skip as reason:
                self.report.add(key, setting.value_text, str(reason), setting.line)
                return
            for target in rule.rft:
                self.put(target, value, key)
            return
        exact = next((r for r in NO_EQUIVALENT if r.verl == key), None)
        if exact is not None:
            self.report.add(key, setting.value_text, exact.note, setting.line)
            return
        rule = next((r for r in PASSTHROUGH if _prefix_match(r.verl, key)), None)
        if rule is not None:
            self.put("trainer.trainer_config." + key, setting.value, key)
            return
        rule = next((r for r in NO_EQUIVALENT if r.matches(key)), None)
        if rule is not None:
            self.report.add(key, setting.value_text, rule.note, setting.line)
            return
        self.report.add(key, setting.value_text, "unknown veRL key: no conversion rule",
                        setting.line)

    def _trainer_type(self) -> None:
        self.put("trainer.trainer_type", "verl",
                 "veRL trainer backend (reads trainer_config); 'torch' ignores "
                 "trainer_config")

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
        n = self.get(R + "n")
        self.put("algorithm.repeat_times", n, self.source(R + "n"))  # validated in _batch
        for arg in DERIVED["advantage_args"].reads:
            name = arg.split(".")[-1]
            if not self.has(arg):
                continue
            if name in accepted:
                self.put(f"algorithm.advantage_fn_args.{name}", self.get(arg), arg)
            else:
                self.skip(arg, f"not used by adv_estimator={estimator}")

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
        else:
            self.put("algorithm.kl_penalty_fn", "none", src)
            self.skip("algorithm.kl_penalty", "inactive: algorithm.use_kl_in_reward is false")
        if self.has("algorithm.kl_ctrl.kl_coef"):
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
        else:
            self.put("algorithm.kl_loss_fn", "none", src)
            self.skip(A + "kl_loss_type", "inactive: actor_rollout_ref.actor.use_kl_loss "
                      "is false")

    def _batch(self) -> None:
        mini_key, total_key, n_key = A + "ppo_mini_batch_size", "data.train_batch_size", R + "n"
        mini, total, n = self.get(mini_key), self.get(total_key), self.get(n_key)
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

    def _taskset_entries(self, key: str) -> list[tuple[str, str, str]]:
        """``(name, path, split)`` per file of ``data.train_files`` / ``data.val_files``."""
        files = self.get(key)
        if files is None:
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

    def _tasksets(self) -> None:
        names: set[str] = set()

        def unique(name: str) -> str:
            candidate, i = name, 2
            while candidate in names:
                candidate, i = f"{name}_{i}", i + 1
            names.add(candidate)
            return candidate

        def format_keys(prefix: str) -> None:
            for verl_key, field_name in (("data.prompt_key", "prompt_key"),
                                         ("data.response_key", "response_key")):
                if self.has(verl_key):
                    self.put(f"{prefix}.format.{field_name}", self.get(verl_key), verl_key)

        train = self._taskset_entries("data.train_files")
        for i, (name, path, split) in enumerate(train):
            prefix = f"buffer.explorer_input.tasksets[{i}]"
            self.put(f"{prefix}.name", unique(name), "data.train_files")
            self.put(f"{prefix}.storage_type", "file", "data.train_files")
            self.put(f"{prefix}.path", path, "data.train_files")
            self.put(f"{prefix}.split", split, "data.train_files")
            format_keys(prefix)
            if self.has("data.shuffle"):
                self.put(f"{prefix}.task_selector.selector_type",
                         "shuffle" if self.get("data.shuffle") else "sequential",
                         self.source_value("data.shuffle"))
            if self.has("data.seed") and self.get("data.seed") is not None:
                self.put(f"{prefix}.task_selector.seed", self.get("data.seed"), "data.seed")
        if train and not self.has("data.shuffle"):
            self.report.note("data.shuffle is not set: veRL shuffles the training data by "
                             "default, rft reads tasksets in file order (set "
                             "task_selector.selector_type: shuffle to match)")
        if not train:
            self.skip("data.shuffle", "no data.train_files in the launch")
            self.report.note("no data.train_files: add buffer.explorer_input.tasksets by hand")
        val = self._taskset_entries("data.val_files")
        for i, (name, path, split) in enumerate(val):
            prefix = f"buffer.explorer_input.eval_tasksets[{i}]"
            self.put(f"{prefix}.name", unique(f"{name}_eval"), "data.val_files")
            self.put(f"{prefix}.storage_type", "file", "data.val_files")
            self.put(f"{prefix}.path", path, "data.val_files")
            self.put(f"{prefix}.split", split, "data.val_files")
            format_keys(prefix)
            for sub in ("temperature", "top_p", "top_k"):
                if self.has(R + "val_kwargs." + sub):
                    self.put(f"{prefix}.rollout_args.{sub}", self.get(R + "val_kwargs." + sub),
                             R + "val_kwargs." + sub)
            if self.has(R + "val_kwargs.do_sample"):
                if not self.get(R + "val_kwargs.do_sample"):
                    self.put(f"{prefix}.rollout_args.temperature", 0.0,
                             R + "val_kwargs.do_sample=False (greedy)")
            if self.has(R + "val_kwargs.n"):
                self.put(f"{prefix}.repeat_times", self.get(R + "val_kwargs.n"),
                         R + "val_kwargs.n")
        if val and not any(self.has(R + "val_kwargs." + k) for k in ("do_sample", "temperature")):
            self.report.note("veRL validates greedily by default (rollout.val_kwargs."
                             "do_sample=False); rft's eval tasksets sample at model.temperature "
                             "(set their rollout_args.temperature: 0 for greedy evaluation)")
        if train or val:
            self.report.note("veRL picks the reward by each row's data_source; rft runs a "
                             "workflow: set buffer.explorer_input.default_workflow_type (e.g. "
                             "verl_gsm8k_workflow, veRL's GSM8K scoring)")
            self.report.note("the tasksets' format keeps rft's defaults unless data.prompt_key "
                             "/ data.response_key are given: check them against the dataset's "
                             "columns (veRL's preprocessed parquet has a chat-message 'prompt' "
                             "and reward_model.ground_truth)")
        for key in DERIVED["tasksets"].reads:
            if self.has(key) and key not in self.consumed:
                self.skip(key, "unused: the launch has no "
                          + ("data.val_files" if "val_kwargs" in key else
                             "data.train_files / data.val_files"))

    def _monitor(self) -> None:
        if not self.has("trainer.logger"):
            return
        loggers = self.get("trainer.logger")
        if not isinstance(loggers, list):
            loggers = [loggers]
        chosen = [str(name) for name in loggers if name != "console"]
        if not chosen:
            self.put("monitor.monitor_type", "console", "trainer.logger")
            return
        first = chosen[0]
        self.put("monitor.monitor_type", MONITORS.get(first, first),
                 "trainer.logger (console is always on)")
        if first not in MONITORS:
            self.report.note(f"trainer.logger {first!r}: rft has no monitor of that name "
                             "built in; a plugin must provide it")
        for other in chosen[1:]:
            self.report.add("trainer.logger", other,
                            "rft logs to one monitor besides the console; "
                            f"{MONITORS.get(first, first)} was kept")

    def _gpus_and_reward_model(self) -> None:
        nodes, per_node = self.peek("trainer.nnodes"), self.peek("trainer.n_gpus_per_node")
        tp = self.peek(R + "tensor_model_parallel_size") or 1  # rft's default, not veRL's
        for key, value in (("trainer.nnodes", nodes), ("trainer.n_gpus_per_node", per_node),
                           (R + "tensor_model_parallel_size", tp)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise VerlConvertError(f"{key}={value}: expected a positive integer")
        total = nodes * per_node
        share = total // EXPLORER_GPU_SHARE
        engines = max(1, share // tp)
        gpus = (f"{total} GPUs ({self.source('trainer.nnodes')} × "
                f"{self.source('trainer.n_gpus_per_node')}) / {EXPLORER_GPU_SHARE}")
        self.put("explorer.rollout_model.engine_num", engines,
                 f"{gpus} / tensor_parallel_size {tp}")
        used = engines * tp
        enabled = self.has("reward_model.enable") and bool(self.get("reward_model.enable"))
        if enabled:
            path = self.get("reward_model.model.path")
            if path is None:
                raise VerlConvertError("reward_model.enable=True needs reward_model.model.path")
            rm_tp = self.get("reward_model.rollout.tensor_model_parallel_size") or 1
            rm_engines = max(1, share // rm_tp)
            prefix = "explorer.auxiliary_models[0]"
            self.put(f"{prefix}.model_path", path, "reward_model.model.path")
            self.put(f"{prefix}.engine_num", rm_engines,
                     f"{gpus} / tensor_parallel_size {rm_tp}")
            self.put(f"{prefix}.tensor_parallel_size", rm_tp,
                     "reward_model.rollout.tensor_model_parallel_size"
                     if self.has("reward_model.rollout.tensor_model_parallel_size")
                     else "rft default (veRL's reward model runs on FSDP)")
            used += rm_engines * rm_tp
            self.report.note("the reward model is explorer.auxiliary_models[0]: rft does not "
                             "score with it by itself, the workflow must call it (set "
                             "buffer.explorer_input.default_workflow_type)")
        else:
            for key in ("reward_model.model.path",
                        "reward_model.rollout.tensor_model_parallel_size"):
                self.skip(key, "inactive: reward_model.enable is not true")
            self.consumed.add("reward_model.enable")
        if used >= total:
            self.report.note(f"the explorer takes {used} of the {total} GPUs, leaving none "
                             "for the trainer: lower engine_num or use mode: colocate")
        else:
            self.report.note(f"GPU split: explorer {used} of {total} GPUs, trainer "
                             f"{total - used} (veRL time-shares all of them; adjust "
                             "explorer.rollout_model.engine_num to taste)")


def _prefix_match(pattern: str, key: str) -> bool:
    """``a.b.*`` matches ``a.b.c…``; ``a.b.x_*`` matches ``a.b.x_y…``."""
    return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern


def convert_overrides(overrides: list[Override]) -> Conversion:
    """Apply every rule to the overrides of a veRL launch.

    :raises VerlConvertError: the batch sizes break the alignment rules, or a required
        companion key is missing.
    """
    return Converter(overrides).run()


def table_rows() -> list[tuple[str, str, str]]:
    """``(veRL, rft, note)`` for every rule, in the order of docs/verl.md."""
    rows: list[tuple[str, str, str]] = []
    for name, rule in DERIVED.items():
        rows.append((", ".join(f"`{k}`" for k in rule.reads) or "—",
                     ", ".join(f"`{k}`" for k in rule.writes), rule.rule))
    for rule in DIRECT:
        rows.append((f"`{rule.verl}`", ", ".join(f"`{k}`" for k in rule.rft), rule.note))
    for rule in PASSTHROUGH:
        rows.append((f"`{rule.verl}`", ", ".join(f"`{k}`" for k in rule.rft),
                     rule.note or "passed through to veRL's workers"))
    for rule in NO_EQUIVALENT:
        rows.append((f"`{rule.verl}`", "— (reported)", rule.note))
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

