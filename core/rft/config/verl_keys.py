"""veRL keys in ``trainer.trainer_config`` that mirror rft fields, reconciled as Trinity-RFT
does (``verl_config.synchronize_config``): one table for every trainer type.

A veRL YAML (``trainer.trainer_config_path``, or the inline tree) repeats keys that rft
owns through its own fields. Trinity-RFT loads the file, then overwrites those keys from
its own fields, except where its field is unset: there the file's value stays.
:func:`reconcile` does the same, never silently, before the other checks run:

- a mirrored key (:data:`MIRRORED`) equal to what rft's field gives: accepted quietly;
- different, rft's field set: a warning ``trainer.trainer_config.<path> <v> is overridden
  by <field> <w>``; rft's field wins;
- different, rft's field left at its default: where Trinity-RFT keeps veRL's value
  (``reads``), the value is read into rft's field (a warning says so); elsewhere rft's
  default wins, with the override warning;
- from a file only: the sections rft owns entirely (:data:`FILE_SECTIONS`) get one warning
  each (how many keys, rft's fields decide them).

Every reconciled key leaves the tree, so the trainers see only the keys that reach them.
A mirrored key set inline (not from a file) is reconciled the same way; rft-owned sections
set inline stay for the trainer's own check (the verl trainer refuses them, the torch
trainer warns per key).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rft.config.schema import resolved_grad_clip

if TYPE_CHECKING:
    from rft.config.schema import RftConfig

A = "actor_rollout_ref.actor."
"""Prefix of veRL's actor keys."""

KEY = "trainer.trainer_config"
"""Dotted prefix of every message about the veRL tree."""


@dataclass(frozen=True)
class Mirror:
    """One veRL key path that an rft field sets."""

    field: str
    """rft's dotted field (``algorithm.policy_loss_fn_args.<name>`` reads the mapping)."""
    reads: bool
    """Trinity-RFT keeps veRL's value while its field is unset: read it into rft's field
    when that is at its default."""


MIRRORED: dict[str, Mirror] = {
    A + "grad_clip": Mirror("trainer.grad_clip", reads=True),
    A + "optim.clip_grad": Mirror("trainer.grad_clip", reads=True),
    A + "use_dynamic_bsz": Mirror("trainer.use_dynamic_bsz", reads=True),
    A + "ppo_max_token_len_per_gpu": Mirror("trainer.max_token_len_per_gpu", reads=True),
    A + "ulysses_sequence_parallel_size": Mirror("trainer.ulysses_sequence_parallel_size",
                                                 reads=True),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": Mirror(
        "trainer.ulysses_sequence_parallel_size", reads=True),
    A + "strategy": Mirror("trainer.trainer_strategy", reads=True),
    "actor_rollout_ref.ref.strategy": Mirror("trainer.trainer_strategy", reads=False),
    "critic.strategy": Mirror("trainer.trainer_strategy", reads=False),
    "critic.ulysses_sequence_parallel_size": Mirror("trainer.ulysses_sequence_parallel_size",
                                                    reads=True),
    "critic.loss_agg_mode": Mirror("algorithm.loss_agg_mode", reads=True),
    A + "loss_agg_mode": Mirror("algorithm.loss_agg_mode", reads=True),
    A + "optim.lr": Mirror("algorithm.optimizer.lr", reads=True),
    A + "optim.weight_decay": Mirror("algorithm.optimizer.weight_decay", reads=True),
    A + "optim.betas": Mirror("algorithm.optimizer.betas", reads=True),
    A + "optim.lr_warmup_steps": Mirror("algorithm.optimizer.lr_warmup_steps", reads=True),
    A + "optim.lr_warmup_steps_ratio": Mirror("algorithm.optimizer.lr_warmup_steps_ratio",
                                              reads=True),
    A + "optim.min_lr_ratio": Mirror("algorithm.optimizer.min_lr_ratio", reads=True),
    A + "optim.warmup_style": Mirror("algorithm.optimizer.lr_scheduler_type", reads=True),
    A + "optim.lr_scheduler_type": Mirror("algorithm.optimizer.lr_scheduler_type", reads=True),
    A + "optim.total_training_steps": Mirror("trainer.total_steps", reads=False),
    "actor_rollout_ref.model.path": Mirror("model.model_path", reads=False),
    "actor_rollout_ref.rollout.n": Mirror("algorithm.repeat_times", reads=False),
    "actor_rollout_ref.rollout.temperature": Mirror("model.temperature", reads=False),
    A + "clip_ratio": Mirror("algorithm.policy_loss_fn_args.clip_range", reads=False),
    A + "clip_ratio_low": Mirror("algorithm.policy_loss_fn_args.clip_range_low", reads=False),
    A + "clip_ratio_high": Mirror("algorithm.policy_loss_fn_args.clip_range_high", reads=False),
    A + "entropy_coeff": Mirror("algorithm.entropy_loss_fn_args.entropy_coef", reads=False),
    A + "kl_loss_coef": Mirror("algorithm.kl_loss_fn_args.kl_coef", reads=False),
    **{f"algorithm.rollout_correction.{name}": Mirror(
        f"algorithm.rollout_correction.{name}", reads=True)
       for name in ("rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize",
                    "rollout_rs", "rollout_rs_threshold", "bypass_mode", "loss_type")},
}
"""veRL key path → the rft field that sets it (the veRL alignment guide's mapping; which
way each goes follows Trinity-RFT's ``synchronize_config``: it overwrites model path,
``rollout.n``, temperature, total steps and the loss from its own fields and keeps the
file's gradient clip, token budget, dynamic batching, sequence parallelism, strategy and
optimizer)."""

ANY_TYPED = frozenset({"algorithm.rollout_correction.rollout_is_threshold",
                       "algorithm.rollout_correction.rollout_rs_threshold"})
"""Fields of type ``Any`` (a number or a string): veRL's value is read as it is."""

LOG_PROB_KEYS = ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu",
                 "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu")
"""The ``actor_rollout_ref.rollout`` keys that reach veRL: the actor's forward-only
(old log-prob) micro-batching. Every other rollout key belongs to rft's explorer."""

HONOURED_DRIVER_KEYS = ("trainer.critic_warmup",)
"""Keys of veRL's driver section (``trainer.*``) the verl trainer honours itself."""

FILE_SECTIONS: dict[str, str] = {
    "actor_rollout_ref.rollout": "the rollout is rft's explorer (explorer.rollout_model, "
                                 "model fields)",
    "actor_rollout_ref.hybrid_engine": "the rollout is rft's explorer",
    "data": "rft's buffer.explorer_input and model token limits",
    "trainer": "rft's project, name, cluster, trainer and explorer fields",
    "reward_model": "explorer.auxiliary_models and rft's reward functions",
}
"""Sections of a veRL file that rft's fields decide entirely, and which fields."""


def _kept(path: str) -> bool:
    """Keys of an rft-owned section that still reach a trainer."""
    if path in HONOURED_DRIVER_KEYS:
        return True
    prefix = "actor_rollout_ref.rollout."
    return path.startswith(prefix) and path[len(prefix):] in LOG_PROB_KEYS


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict) and node:
        out: list[tuple[str, Any]] = []
        for name, value in node.items():
            out.extend(_leaves(value, f"{prefix}.{name}" if prefix else str(name)))
        return out
    return [(prefix, node)] if prefix else []


def _remove(tree: dict[str, Any], path: str) -> None:
    """Delete ``path`` from ``tree`` and the mappings it leaves empty."""
    parts = path.split(".")
    chain = [tree]
    for part in parts[:-1]:
        chain.append(chain[-1][part])
    del chain[-1][parts[-1]]
    for depth in range(len(parts) - 1, 0, -1):
        if chain[depth] == {}:
            del chain[depth - 1][parts[depth - 1]]


def _owner_and_name(c: RftConfig, field: str) -> tuple[Any, str]:
    node: Any = c
    parts = field.split(".")
    for part in parts[:-1]:
        node = getattr(node, part)
    return node, parts[-1]


def _default(owner: Any, name: str) -> Any:
    if isinstance(owner, dict):
        return None
    for f in dataclasses.fields(owner):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            factory = f.default_factory
            return factory() if callable(factory) else None
    return None


def _value(c: RftConfig, field: str) -> tuple[Any, bool]:
    """rft's value of ``field`` and whether the user set it (differs from its default)."""
    if field == "trainer.grad_clip":
        unset = c.trainer.grad_clip is None and c.algorithm.optimizer.clip_grad is None
        return resolved_grad_clip(c.trainer, c.algorithm.optimizer), not unset
    owner, name = _owner_and_name(c, field)
    if isinstance(owner, dict):
        return owner.get(name), name in owner
    value = getattr(owner, name)
    if field == "algorithm.optimizer.lr_scheduler_type" and owner.warmup_style is not None:
        return owner.warmup_style, True
    return value, value != _default(owner, name)


def _same(verl: Any, rft: Any) -> bool:
    if isinstance(rft, bool) or isinstance(verl, bool):
        return verl == rft
    if isinstance(rft, (int, float)) and not isinstance(rft, bool):
        try:
            return abs(float(verl) - float(rft)) <= 1e-12 * max(1.0, abs(float(rft)))
        except (TypeError, ValueError):
            return False
    if isinstance(rft, list) and isinstance(verl, list) and len(rft) == len(verl):
        return all(_same(a, b) for a, b in zip(verl, rft))
    return verl == rft


def _read(c: RftConfig, field: str, value: Any) -> RftConfig | str:
    """``c`` with rft's ``field`` set to veRL's ``value``; a problem line when it cannot
    be."""
    owner, name = _owner_and_name(c, field)
    current = getattr(owner, name)
    try:
        if isinstance(current, bool):
            if not isinstance(value, bool):
                raise TypeError(value)
            new: Any = value
        elif field in ANY_TYPED:
            new = value
        elif isinstance(current, float):
            new = float(value)
        elif isinstance(current, int):
            new = int(value)
        elif field == "trainer.grad_clip":
            new = float(value)
        elif field == "trainer.max_token_len_per_gpu":
            new = int(value)
        elif isinstance(current, list):
            new = [float(v) for v in value]
        else:
            new = value
    except (TypeError, ValueError):
        return f"cannot be read into {field}: {value!r} is not of its type"
    return _replaced(c, field.split("."), new)


def _replaced(node: Any, path: list[str], value: Any) -> Any:
    """``node`` (a dataclass) with the field at ``path`` set to ``value``, each dataclass
    on the way copied with :func:`dataclasses.replace` (``node`` is not changed)."""
    if len(path) == 1:
        return dataclasses.replace(node, **{path[0]: value})
    child = _replaced(getattr(node, path[0]), path[1:], value)
    return dataclasses.replace(node, **{path[0]: child})


def reconcile(c: RftConfig, warnings: list[str], problems: list[str], *,
              from_file: bool) -> RftConfig:
    """``c`` with ``trainer.trainer_config`` reconciled with rft's fields (module
    docstring); ``c`` itself is not changed."""
    if not isinstance(c.trainer.trainer_config, dict) or not c.trainer.trainer_config:
        return c
    tree = copy.deepcopy(c.trainer.trainer_config)  # the user's mapping may be shared
    sections: dict[str, list[str]] = {}
    for path, verl in _leaves(tree):
        mirror = MIRRORED.get(path)
        where = f"{KEY}.{path}"
        if mirror is not None:
            _remove(tree, path)
            if verl is None:
                continue
            rft, is_set = _value(c, mirror.field)
            if _same(verl, rft):
                continue
            if mirror.reads and not is_set:
                read = _read(c, mirror.field, verl)
                if isinstance(read, str):
                    problems.append(f"{where}: {read}")
                else:
                    c = read
                    warnings.append(f"{where} {verl} is read into {mirror.field} (unset; "
                                    "Trinity-RFT keeps veRL's value there)")
                continue
            shown = "unset" if rft is None else rft
            warnings.append(f"{where} {verl} is overridden by {mirror.field} {shown}"
                            + ("" if is_set else " (rft's default)"))
            continue
        if not from_file or _kept(path):
            continue
        for section in FILE_SECTIONS:
            if path == section or path.startswith(section + "."):
                sections.setdefault(section, []).append(path)
                _remove(tree, path)
                break
    for section, paths in sections.items():
        names = ", ".join(p[len(section) + 1:] or p.rsplit(".", 1)[-1] for p in paths[:4])
        more = f", … ({len(paths)} keys)" if len(paths) > 4 else ""
        warnings.append(f"{KEY}.{section}: {names}{more} (from trainer.trainer_config_path) "
                        f"not used; rft's fields decide them: {FILE_SECTIONS[section]}")
    return dataclasses.replace(c, trainer=dataclasses.replace(c.trainer,
                                                              trainer_config=tree or None))
