"""Which config fields rft honours: the readers of the support note every schema field carries.

The configuration guide documents more fields than rft implements. Silence is the worst
answer, so every field of every dataclass in :mod:`rft.config.schema` declares its support
in its ``field(metadata=...)`` (:mod:`rft.config.field_support`: ``consumed``,
``unsupported``, ``derived``, ``structural``); :func:`missing_support` names, one line
each, a field that declares none (``tests/test_config_support.py`` runs it over the
schema). A subclass inherits its base class's fields with their notes; it redeclares a
field to give it a note of its own.

- :class:`Consumed`: the field has its documented effect; ``modules`` are the modules that
  read it (the test checks that each of them really reads an attribute of that name).
  Values it accepts without implementing them (``trainer_strategy: megatron``) are its
  ``unsupported`` part, reported like an unsupported field.
- :class:`Unsupported`: rft accepts the field but does not implement it. Validation
  (:func:`support_messages`, through ``check_support``, the last of
  :data:`rft.config.check.CHECKS`) reports a user who sets it (to anything but its default, or to what ``when`` matches)
  in one line ``dotted.key: <reason>``: a warning, or a problem where running without it
  would mislead (``severity="error"``, e.g. the Tinker service).
- :class:`Derived`: validation fills it in (``cluster.trainer_gpu_num``, ...).
- :class:`Structural`: a section or container whose own fields have their notes.

``trainer.trainer_config`` is a free-form veRL tree. The native ``torch`` trainer reads
the key paths in :data:`TRAINER_CONFIG_HONOURED` (see :mod:`rft.trainer.options`); with
``trainer_type: torch`` every other key path set there is a warning naming it.

``scripts/config_support_table.py`` renders the notes as the "support" tables of
``docs/configuration.md``.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

from rft.config import schema
from rft.config.field_support import (
    Consumed,
    Derived,
    Structural,
    Support,
    Unsupported,
    entry_of,
)

# --------------------------------------------------------------------------------------
# The notes, read from the fields
# --------------------------------------------------------------------------------------


def schema_classes() -> list[type]:
    """Every dataclass defined in :mod:`rft.config.schema`, in definition order."""
    return [obj for obj in vars(schema).values()
            if isinstance(obj, type) and dataclasses.is_dataclass(obj)
            and obj.__module__ == schema.__name__]


def support_of(cls: type, name: str) -> Support | None:
    """The support note of field ``name`` of the dataclass ``cls`` (declared there or
    inherited from a base class); ``None`` when it has none or no such field."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return entry_of(f)
    return None


def declared_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields ``cls`` declares itself (not the ones it inherits unchanged)."""
    own = inspect.get_annotations(cls)
    return [f for f in dataclasses.fields(cls) if f.name in own]


def declaring_class(cls: type, name: str) -> type:
    """The class of ``cls.__mro__`` whose body declares field ``name`` (``cls`` if none)."""
    return next((klass for klass in cls.__mro__ if name in inspect.get_annotations(klass)),
                cls)


def missing_support(classes: Iterable[type]) -> list[str]:
    """One line per field of the dataclasses ``classes`` (inherited ones included) that
    declares no support note, naming it ``Class.field`` after the class that declares it;
    empty when every field says what rft does with it."""
    missing = {f"{declaring_class(cls, f.name).__name__}.{f.name}": None
               for cls in classes for f in dataclasses.fields(cls) if entry_of(f) is None}
    return [f"{key}: no support note; declare it with field(metadata=consumed(...) | "
            "unsupported(...) | derived(...) | structural(...)) (rft.config.field_support)"
            for key in missing]


def support_table(classes: Iterable[type] | None = None) -> dict[str, Support]:
    """``{"Class.field": note}`` of every field the schema classes declare (inherited
    fields under their declaring class), in declaration order."""
    return {f"{cls.__name__}.{f.name}": entry
            for cls in (schema_classes() if classes is None else classes)
            for f in declared_fields(cls)
            if (entry := entry_of(f)) is not None}


SUPPORT: Mapping[str, Support] = types.MappingProxyType(support_table())
"""Support of every schema field, keyed ``"ClassName.field"`` (read-only; built from the
fields' metadata)."""

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
# The validation check
# --------------------------------------------------------------------------------------


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
    "declared_fields",
    "declaring_class",
    "field_default",
    "field_kind",
    "is_set",
    "leaf_paths",
    "missing_support",
    "schema_classes",
    "support_label",
    "support_messages",
    "support_note",
    "support_of",
    "support_table",
    "unhonoured_trainer_config_keys",
    "unsupported_settings",
]
