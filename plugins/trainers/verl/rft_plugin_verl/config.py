"""rft's config → veRL 0.9.1's config tree (what veRL's workers are built from).

:func:`build_verl_config` starts from veRL's own flattened default config
(``verl/trainer/config/_generated_ppo_trainer.yaml``; with ``trainer_strategy: megatron``
its Megatron one, :mod:`rft_plugin_verl.megatron`, GPU only and untested), read with
OmegaConf (no Hydra composition), and sets:

1. the values rft's fields decide, per the veRL alignment guide (:data:`rft_plugin_verl.
   keys.RFT_FIELDS`): model paths, ``rollout.n = algorithm.repeat_times``, the actor's
   optimizer from ``algorithm.optimizer`` (and the critic's, unless
   ``trainer_config.critic.optim`` sets it), strategy, dynamic batch size and token
   budget, sequence parallelism, gradient clipping, ``loss_agg_mode``, total steps;
2. the user's ``trainer.trainer_config`` tree, key by key (checked as
   :mod:`rft_plugin_verl.keys` says: a key veRL does not have, or one an rft field sets, is
   a problem naming it; the keys mirroring rft fields were reconciled by the core's
   validation and left the tree, :mod:`rft.config.verl_keys`);
3. defaults the one-process adapter needs where the user left them unset: the mini-batch
   (``ppo_mini_batch_size = train_batch_size / repeat_times`` prompts, one optimizer step
   per training step, as the native trainer) and, without ``use_dynamic_bsz``, micro-batches
   of the whole mini-batch;
4. on a machine without CUDA (rft's CPU shim, :mod:`rft_plugin_verl.cpu_platform`):
   ``fsdp2``, fp32 FSDP mixed precision, eager attention, no ``torch.compile``, no
   remove-padding (packed sequences need FlashAttention's varlen kernels).

The same function runs at validation (problems and warnings reported with their dotted
keys) and when the trainer is built (the tree handed to veRL).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from rft.config.schema import resolved_grad_clip
from rft.trainer.lora import lora_of

from rft_plugin_verl import keys, megatron
from rft_plugin_verl import lora as verl_lora

CONFIG_FILE = "_generated_ppo_trainer.yaml"
"""veRL's flattened default config of its FSDP / FSDP2 workers."""

KEY = "trainer.trainer_config"
"""Dotted prefix of every message about the user's veRL tree."""

CPU_MIXED_PRECISION = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
"""FSDP mixed precision on CPU: float32 throughout (veRL's default computes in bf16)."""

ENGINE_SECTIONS = ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config",
                   "critic.fsdp")
"""The FSDP engine configs of actor, reference and critic."""


@dataclass
class VerlConfig:
    """veRL's config tree for this run, and what the trainer reads from it."""

    tree: Any
    """The whole veRL config (an OmegaConf ``DictConfig``, interpolations unresolved)."""
    strategy: str
    """``fsdp`` or ``fsdp2``, as veRL runs it."""
    cpu: bool
    """Running on rft's CPU shim."""
    problems: list[str] = field(default_factory=list)
    """``dotted.key: message`` lines; the tree must not be used when there is one."""
    warnings: list[str] = field(default_factory=list)
    """``dotted.key: message`` lines."""
    user_paths: set[str] = field(default_factory=set)
    """veRL key paths the user set in ``trainer.trainer_config``."""

    def get(self, path: str, default: Any = None) -> Any:
        """The resolved value at ``path`` (``default`` when absent or null)."""
        from omegaconf import OmegaConf

        value = OmegaConf.select(self.tree, path, default=default)
        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
        return default if value is None else value


def config_dir() -> str | None:
    """veRL's ``trainer/config`` folder (found without importing veRL), or ``None``."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "trainer", "config")


def build_verl_config(*, model: Any, algorithm: Any, trainer: Any, train_batch_size: int,
                      total_steps: int | None, cpu: bool,
                      flash_attn: bool | None = None) -> VerlConfig:
    """veRL's config for an rft stage (see the module docstring).

    :param model: the ``model`` section.
    :param algorithm: the ``algorithm`` section, preset applied.
    :param trainer: the ``trainer`` section.
    :param train_batch_size: experiences per training step.
    :param total_steps: training steps of the stage (``None``: unknown).
    :param cpu: whether veRL runs on rft's CPU shim here.
    :param flash_attn: whether ``flash-attn`` is installed (``None``: look).
    """
    from omegaconf import OmegaConf

    strategy = trainer.trainer_strategy
    result = VerlConfig(tree=None, strategy=strategy, cpu=cpu)
    is_megatron = strategy == megatron.STRATEGY  # GPU only, untested (rft_plugin_verl.megatron)
    if cpu and strategy == "fsdp":
        result.strategy = "fsdp2"
        result.warnings.append("trainer.trainer_strategy: 'fsdp' (FSDP1) needs an accelerator; "
                               "on this machine without CUDA veRL runs 'fsdp2'")
    folder = config_dir()
    if folder is None:
        result.problems.append("trainer.trainer_type: veRL is not installed")
        return result
    path = os.path.join(folder, megatron.CONFIG_FILE if is_megatron else CONFIG_FILE)
    result.tree = OmegaConf.load(path)
    _apply_rft_fields(result, model, algorithm, trainer, total_steps)
    _apply_user_tree(result, OmegaConf.load(path), trainer.trainer_config or {})
    _apply_defaults(result, algorithm, train_batch_size, int(trainer.ranks or 1))
    if is_megatron:
        vanilla = bool(result.get("actor_rollout_ref.actor.megatron.vanilla_mbridge", False))
        problem = megatron.environment_problem(cpu, vanilla)
        if problem is not None:
            result.problems.insert(0, problem)
        result.problems.extend(megatron.parallel_problems(result.get, int(trainer.ranks or 1)))
    elif cpu:
        _apply_cpu(result)
    else:
        _apply_attention(result, flash_attn if flash_attn is not None
                         else importlib.util.find_spec("flash_attn") is not None)
    _check_unsupported(result)
    return result


# ---- 1. rft's fields -----------------------------------------------------------------


def _set(result: VerlConfig, path: str, value: Any) -> None:
    from omegaconf import OmegaConf

    OmegaConf.update(result.tree, path, value, merge=False, force_add=True)


def _optimizer(algorithm: Any, trainer: Any, total_steps: int | None) -> dict[str, Any]:
    """veRL's ``optim`` section from ``algorithm.optimizer`` (the alignment guide)."""
    o = algorithm.optimizer
    return {
        "lr": float(o.lr),
        "betas": [float(b) for b in o.betas],
        "weight_decay": float(o.weight_decay),
        "lr_warmup_steps": int(o.lr_warmup_steps),
        "lr_warmup_steps_ratio": float(o.lr_warmup_steps_ratio),
        "min_lr_ratio": float(o.min_lr_ratio),
        "lr_scheduler_type": o.warmup_style or o.lr_scheduler_type,
        "clip_grad": resolved_grad_clip(trainer, algorithm.optimizer),
        "total_training_steps": int(total_steps) if total_steps else -1,
    }


def _apply_rft_fields(result: VerlConfig, model: Any, algorithm: Any, trainer: Any,
                      total_steps: int | None) -> None:
    actor, ref = "actor_rollout_ref.actor", "actor_rollout_ref.ref"
    if str(algorithm.optimizer.optimizer_type).lower() not in ("adam", "adamw"):
        result.problems.append(f"algorithm.optimizer.optimizer_type: the verl trainer maps it to "
                               f"veRL's AdamW; got {algorithm.optimizer.optimizer_type!r}")
    values: dict[str, Any] = {
        "actor_rollout_ref.model.path": model.model_path,
        "actor_rollout_ref.model.trust_remote_code": bool(model.trust_remote_code),
        "critic.model.path": model.critic_model_path or model.model_path,
        "critic.model.trust_remote_code": bool(model.trust_remote_code),
        "actor_rollout_ref.rollout.n": int(algorithm.repeat_times or 1),
        "actor_rollout_ref.rollout.temperature": (float(model.temperature)
                                                  if model.temperature > 0 else 1.0),
        f"{actor}.strategy": result.strategy,
        f"{ref}.strategy": result.strategy,
        "critic.strategy": result.strategy,
        f"{actor}.use_dynamic_bsz": bool(trainer.use_dynamic_bsz),
        f"{actor}.ulysses_sequence_parallel_size": int(trainer.ulysses_sequence_parallel_size),
        f"{actor}.fsdp_config.ulysses_sequence_parallel_size":
            int(trainer.ulysses_sequence_parallel_size),
        f"{ref}.ulysses_sequence_parallel_size": int(trainer.ulysses_sequence_parallel_size),
        "critic.ulysses_sequence_parallel_size": int(trainer.ulysses_sequence_parallel_size),
        f"{actor}.grad_clip": resolved_grad_clip(trainer, algorithm.optimizer),
        "critic.grad_clip": resolved_grad_clip(trainer, algorithm.optimizer),
        f"{actor}.loss_agg_mode": algorithm.loss_agg_mode or "token-mean",
    }
    if trainer.max_token_len_per_gpu:
        tokens = int(trainer.max_token_len_per_gpu)
        values[f"{actor}.ppo_max_token_len_per_gpu"] = tokens
        values["critic.ppo_max_token_len_per_gpu"] = tokens
    lora = lora_of(model)
    if lora is not None and result.strategy == megatron.STRATEGY:
        result.problems.append(megatron.lora_problem())
    elif lora is not None:  # veRL's peft path (rft_plugin_verl.lora)
        result.problems.extend(verl_lora.config_problems(lora))
        for name, value in verl_lora.model_values(lora).items():
            values[f"{verl_lora.MODEL}.{name}"] = value
    optim = _optimizer(algorithm, trainer, total_steps)
    if result.strategy == megatron.STRATEGY:  # its tree's keys (rft_plugin_verl.megatron)
        result.problems.extend(megatron.adapt_rft_values(
            values, optim, int(trainer.ulysses_sequence_parallel_size)))
    for path, value in values.items():
        _set(result, path, value)
    for name, value in optim.items():
        _set(result, f"{actor}.optim.{name}", value)
        _set(result, f"critic.optim.{name}", value)  # the user's critic.optim wins (step 2)


# ---- 2. the user's trainer_config ----------------------------------------------------


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, value)`` of every leaf of a plain nested mapping (an empty
    mapping is a leaf)."""
    if isinstance(node, dict) and node:
        out: list[tuple[str, Any]] = []
        for name, value in node.items():
            out.extend(_leaves(value, f"{prefix}.{name}" if prefix else str(name)))
        return out
    return [(prefix, node)] if prefix else []


def _apply_user_tree(result: VerlConfig, defaults: Any, user: dict[str, Any]) -> None:
    """Set each leaf of ``user`` (checked against veRL's untouched ``defaults``)."""
    for raw_path, value in _leaves(user):
        path = keys.alias(raw_path)
        where = f"{KEY}.{raw_path}"
        if path == keys.NATIVE_ONLY or path.startswith(keys.NATIVE_ONLY + "."):
            result.warnings.append(f"{where}: an option of the native trainer (trainer_type "
                                   "torch); the verl trainer ignores it")
            continue
        owned = keys.owner(path)
        if owned is not None:
            result.problems.append(f"{where}: {owned}")
            continue
        reason = keys.rft_section(path)
        if reason is not None and path == keys.HYBRID_ENGINE and value is True:
            result.warnings.append(f"{where}: has no effect: {reason} (an actor that is also "
                                   "the rollout, as Trinity-RFT's configs say it)")
            continue
        if reason is not None:
            result.problems.append(f"{where}: does not reach veRL: {reason}")
            continue
        known, hint = _known(defaults, path)
        if not known:
            result.problems.append(f"{where}: not a key of veRL {_verl_version()}'s config"
                                   + (f"; did you mean {hint!r}?" if hint else ""))
            continue
        result.user_paths.add(path)
        _set(result, path, value)


def _verl_version() -> str:
    from rft_plugin_verl.environment import VERL_VERSION

    return VERL_VERSION


def _known(tree: Any, path: str) -> tuple[bool, str | None]:
    """Whether ``path`` is a key of veRL's config: a key of the flattened default tree,
    anything under a free-form node (an empty mapping or a null), or a field of the
    dataclass the enclosing node's ``_target_`` names. Else the closest sibling key."""
    from omegaconf import OmegaConf

    node = tree
    parts = path.split(".")
    for depth, name in enumerate(parts):
        if not OmegaConf.is_dict(node):
            return True, None  # below a free-form value (null, {}) set by the user
        if name in node:
            child = node._get_node(name)  # unresolved (interpolations stay strings)
            if depth == len(parts) - 1:
                return True, None
            value = child._value() if child is not None else None
            if value is None or (OmegaConf.is_dict(child) and len(child) == 0):
                return True, None  # a free-form mapping (override_config, engine_kwargs…)
            node = child
            continue
        if _dataclass_field(node, name):
            return True, None
        siblings = [str(k) for k in node]
        close = difflib.get_close_matches(name, siblings, n=1)
        prefix = ".".join(parts[:depth])
        return False, (f"{prefix}.{close[0]}" if prefix else close[0]) if close else None
    return True, None


def _dataclass_field(node: Any, name: str) -> bool:
    """Whether the dataclass named by ``node``'s ``_target_`` has a field ``name`` (veRL
    fields without a default in the flattened yaml, e.g. ``fsdp_config.mixed_precision``).
    Imports that one veRL config module, only for keys the yaml does not list."""
    target = node.get("_target_") if "_target_" in node else None
    if not isinstance(target, str) or "." not in target:
        return False
    module_name, _, class_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return False
    return is_dataclass(cls) and name in {f.name for f in fields(cls)}


# ---- 3. defaults the adapter needs ---------------------------------------------------


def _apply_defaults(result: VerlConfig, algorithm: Any, train_batch_size: int,
                    ranks: int = 1) -> None:
    actor, ref = "actor_rollout_ref.actor", "actor_rollout_ref.ref"
    n = int(algorithm.repeat_times or 1)
    user = result.user_paths
    if f"{actor}.ppo_mini_batch_size" not in user:
        _set(result, f"{actor}.ppo_mini_batch_size", max(1, train_batch_size // n))
    mini_prompts = int(result.get(f"{actor}.ppo_mini_batch_size"))
    if mini_prompts <= 0:
        result.problems.append(f"{KEY}.{actor}.ppo_mini_batch_size: must be > 0, got "
                               f"{mini_prompts}")
        return
    rows = min(mini_prompts * n, train_batch_size)
    if train_batch_size % rows:
        result.problems.append(
            f"{KEY}.{actor}.ppo_mini_batch_size: {mini_prompts} prompts × repeat_times {n} = "
            f"{rows} rows must divide buffer.train_batch_size ({train_batch_size}) (veRL "
            "splits each batch into whole mini-batches)")
    if rows % ranks:
        result.problems.append(
            f"trainer.ranks: veRL splits each mini-batch of {rows} experiences "
            f"(ppo_mini_batch_size × repeat_times) evenly over its {ranks} ranks; choose a "
            "number of ranks that divides it")
        return
    per_rank = rows // ranks  # what each data-parallel rank gets of a mini-batch
    if not result.get(f"{actor}.use_dynamic_bsz"):
        for path in (f"{actor}.ppo_micro_batch_size_per_gpu",
                     "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                     f"{ref}.log_prob_micro_batch_size_per_gpu",
                     "critic.ppo_micro_batch_size_per_gpu"):
            if path not in user and result.get(path) is None:
                _set(result, path, per_rank)
            micro = int(result.get(path) or 0)
            if ranks > 1 and micro > 0 and per_rank % micro:
                result.problems.append(
                    f"{KEY}.{path}: {micro} rows per micro-batch must divide the {per_rank} "
                    f"rows each of the {ranks} ranks gets of a mini-batch (veRL splits it "
                    "into whole micro-batches)")


def _apply_cpu(result: VerlConfig) -> None:
    """What veRL needs to run on rft's CPU shim (see the module docstring)."""
    user = result.user_paths
    for section in ENGINE_SECTIONS:
        if f"{section}.mixed_precision" not in user and not any(
                p.startswith(f"{section}.mixed_precision.") for p in user):
            _set(result, f"{section}.mixed_precision", dict(CPU_MIXED_PRECISION))
        if f"{section}.use_torch_compile" not in user:
            _set(result, f"{section}.use_torch_compile", False)
    # veRL offloads a forward-only engine (the reference model) with
    # CPUOffloadPolicy(pin_memory=True), and pinned memory needs an accelerator: the
    # reference engine is built as a trainable one instead, with an optimizer it never
    # steps (AdamW allocates its state at the first step only)
    _set(result, "actor_rollout_ref.ref.fsdp_config.forward_only", False)
    _set(result, "actor_rollout_ref.ref.optim", result.get("actor_rollout_ref.actor.optim"))
    for path in ("actor_rollout_ref.actor.use_torch_compile",
                 "actor_rollout_ref.ref.use_torch_compile"):
        if path not in user:
            _set(result, path, False)
    for section in ("actor_rollout_ref.model", "critic.model"):
        if f"{section}.override_config.attn_implementation" not in user:
            _set(result, f"{section}.override_config.attn_implementation", "eager")
        if result.get(f"{section}.use_remove_padding") and f"{section}.use_remove_padding" in user:
            result.warnings.append(f"{KEY}.{section}.use_remove_padding: ignored on this "
                                   "machine without CUDA (packed sequences need "
                                   "FlashAttention's varlen kernels, which have no CPU build): "
                                   "sequences run padded, the same loss, slower")
        _set(result, f"{section}.use_remove_padding", False)


NO_FLASH_ATTN = ("trainer.trainer_config: flash-attn is not installed, so veRL runs "
                 "attn_implementation 'sdpa' with use_remove_padding false (no packed "
                 "sequences); pip install flash-attn for veRL's defaults "
                 "(flash_attention_2, use_remove_padding true)")
"""The one-line warning of a GPU run without ``flash-attn``."""


def _apply_attention(result: VerlConfig, flash_attn: bool) -> None:
    """On GPUs veRL defaults to ``flash_attention_2`` and ``use_remove_padding: true``, both
    FlashAttention's; without ``flash-attn`` installed: ``sdpa`` and no remove-padding,
    together (one warning), and a user's request for either is a problem naming its key."""
    if flash_attn:
        return
    user = result.user_paths
    changed = False
    for section in ("actor_rollout_ref.model", "critic.model"):
        attn = f"{section}.override_config.attn_implementation"
        if attn in user:
            if result.get(attn) == "flash_attention_2":
                result.problems.append(f"{KEY}.{attn}: flash_attention_2 needs flash-attn, which "
                                       "is not installed (pip install flash-attn, or 'sdpa')")
        else:
            _set(result, attn, "sdpa")
            changed = True
        padding = f"{section}.use_remove_padding"
        if padding in user:
            if result.get(padding):
                result.problems.append(f"{KEY}.{padding}: packed sequences need flash-attn's "
                                       "varlen kernels, which are not installed (pip install "
                                       "flash-attn, or false)")
        elif result.get(padding):
            _set(result, padding, False)
            changed = True
    if changed:
        result.warnings.append(NO_FLASH_ATTN)


def _check_unsupported(result: VerlConfig) -> None:
    """LoRA on the critic (the actor's adapter is ``model.lora_configs``, whose veRL keys
    are rft fields: :data:`rft_plugin_verl.keys.RFT_FIELDS`)."""
    section = "critic.model"
    if int(result.get(f"{section}.lora_rank", 0) or 0) > 0 or int(
            result.get(f"{section}.lora.rank", 0) or 0) > 0:
        result.problems.append(f"{KEY}.{section}: a LoRA critic is not implemented by the verl "
                               "trainer (model.lora_configs trains the actor's adapter; the "
                               "critic trains in full, as with trainer_type torch)")
