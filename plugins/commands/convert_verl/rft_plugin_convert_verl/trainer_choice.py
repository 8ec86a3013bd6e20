"""Which rft trainer a converted launch gets: ``torch`` (rft's native trainer) or ``verl``
(veRL's own workers, the ``rft-plugin-verl`` distribution).

``verl`` is chosen when all of these hold, ``torch`` otherwise:

1. the launch needs something only veRL's workers provide (:attr:`TrainerNeeds.verl_only`):
   ulysses sequence parallel > 1, the Megatron strategy, or veRL worker settings kept in
   ``trainer.trainer_config`` that rft's torch trainer does not read (offload, FSDP,
   kernel settings);
2. a trainer ``verl`` is registered and its environment check
   (``rft_plugin_verl.environment.problems()``) finds nothing wrong;
3. the verl trainer can run it: one trainer rank (one GPU in the launch), no Megatron, no
   LoRA, sequence parallel 1 (it runs one rank), and the trainer's own ``check_config``
   accepts the converted config — so a config written with ``verl`` validates.

``--trainer torch|verl`` forces the choice; ``verl`` is refused in one line when 2 or 3
fails. Either way the report carries one line saying which trainer was chosen and why.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from rft_plugin_convert_verl.interpolations import without_interpolations
from rft_plugin_convert_verl.parse import VerlConvertError

TRAINERS = ("torch", "verl")
"""Values of ``--trainer``."""

MODEL_PLACEHOLDER = "<model>"
"""``model.model_path`` used for the verl trainer's config check when the launch leaves it
unset (the check only needs a value)."""


@dataclass
class TrainerNeeds:
    """What the conversion found that bears on the trainer choice."""

    verl_only: list[str] = field(default_factory=list)
    """Why only veRL's workers run the launch as written (one short phrase each)."""
    blockers: list[str] = field(default_factory=list)
    """Why the verl trainer cannot run it (one short phrase each)."""
    unread: list[str] = field(default_factory=list)
    """veRL keys kept in ``trainer_config`` that rft's torch trainer does not read."""


def verl_trainer() -> tuple[Any, str | None]:
    """The registered ``verl`` trainer class and ``None``, or ``None`` and why it is not
    usable here (one line)."""
    from rft.plugins import PluginRegistry

    try:
        registry = PluginRegistry.create(kinds=["trainer"])
    except Exception as exc:  # a broken plugin elsewhere: the converter still works
        return None, f"the trainer plugins could not be loaded ({exc})"
    if not registry.has("trainer", "verl"):
        return None, ("no trainer 'verl' is registered (install rft-plugin-verl: "
                      "plugins/trainers/verl/README.md)")
    try:
        from rft_plugin_verl.environment import problems
    except ImportError:
        problems = None  # type: ignore[assignment]
    if problems is not None:
        found = problems()
        if found:
            return None, found[0]
    return registry.get("trainer", "verl"), None


def _verl_check(trainer: Any, config: dict[str, Any]) -> str | None:
    """The first problem the verl trainer's ``check_config`` finds in ``config`` written
    with ``trainer_type: verl``, or ``None``."""
    from rft.config.convert import to_dataclass
    from rft.config.schema import RftConfig

    data = without_interpolations(copy.deepcopy(config))
    data.setdefault("trainer", {})["trainer_type"] = "verl"
    model = data.setdefault("model", {})
    if not model.get("model_path"):
        model["model_path"] = MODEL_PLACEHOLDER
    schema_problems: list[str] = []
    rft_config = to_dataclass(RftConfig, data, "", schema_problems)
    if schema_problems:
        return schema_problems[0]
    try:
        problems, _warnings = trainer.check_config(rft_config)
    except Exception as exc:  # the check itself failed: do not write a config it refuses
        return f"its config check failed ({type(exc).__name__}: {exc})"
    return problems[0] if problems else None


def choose(config: dict[str, Any], needs: TrainerNeeds, forced: str | None) -> tuple[str, str]:
    """``(trainer_type, why)`` for the converted ``config`` (see the module docstring).

    :param forced: ``--trainer`` (``None``: choose).
    :raises VerlConvertError: ``--trainer verl`` where the verl trainer cannot run it.
    """
    if forced is not None and forced not in TRAINERS:
        raise VerlConvertError(f"--trainer {forced}: expected one of {', '.join(TRAINERS)}")
    if forced == "torch":
        return "torch", "forced by --trainer torch"
    if forced is None and not needs.verl_only:
        return "torch", "the launch needs nothing only veRL's workers provide"
    needed = "; ".join(needs.verl_only)
    trainer, unusable = verl_trainer()
    if trainer is None:
        if forced == "verl":
            raise VerlConvertError(f"--trainer verl: {unusable}")
        return "torch", f"the launch needs veRL's workers ({needed}), but {unusable}"
    problem = needs.blockers[0] if needs.blockers else _verl_check(trainer, config)
    if problem is not None:
        if forced == "verl":
            raise VerlConvertError(f"--trainer verl: the verl trainer cannot run this "
                                   f"launch: {problem}")
        return "torch", (f"the launch needs veRL's workers ({needed}), but the verl trainer "
                         f"cannot run it: {problem}")
    if forced == "verl":
        return "verl", "forced by --trainer verl"
    return "verl", f"the launch needs veRL's workers ({needed}) and rft-plugin-verl is usable"


def apply(config: dict[str, Any], sources: dict[str, str], report: Any, needs: TrainerNeeds,
          forced: str | None) -> str:
    """Write ``trainer.trainer_type`` into ``config`` (with its source comment) and the
    one-line choice into ``report``; returns the trainer type."""
    trainer_type, why = choose(config, needs, forced)
    config.setdefault("trainer", {})["trainer_type"] = trainer_type
    sources["trainer.trainer_type"] = (
        "rft's native trainer (the report says why, not veRL's workers)"
        if trainer_type == "torch" else "veRL's workers (rft-plugin-verl); the report says why")
    report.note(f"trainer: {trainer_type} — {why}")
    if trainer_type == "torch" and needs.unread:
        count = len(needs.unread)
        report.note(
            f"trainer.trainer_config keeps {count} veRL worker setting{'s' if count != 1 else ''}"
            " for trainer_type verl; rft's torch trainer does not read them (memory, offload, "
            "kernel and parallelism settings of veRL's workers): " + ", ".join(needs.unread))
    return trainer_type


__all__ = ["TRAINERS", "TrainerNeeds", "apply", "choose", "verl_trainer"]
