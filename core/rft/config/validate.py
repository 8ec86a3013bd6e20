"""Validation of a config: :func:`validate` = :func:`~rft.config.derive.derive` then
:func:`~rft.config.check.check`.

The first stage fills in every value the configuration guide derives and returns a new
config (its input is not changed); the second only reads that config, resolves **every**
plugin name through the plugin registry (checking its ``*_args`` against the
implementation's ``Args`` dataclass) and collects **all** problems, each one line starting
with its dotted key, in one pass.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from rft.config.check import check
from rft.config.derive import derive
from rft.config.findings import build_args, local_looking
from rft.config.plan import RunPlan, Selected
from rft.config.schema import RftConfig
from rft.plugins import PluginRegistry


class Validated(NamedTuple):
    """What :func:`validate` returns."""

    problems: list[str]
    """Every problem, one line each starting with its dotted key."""
    warnings: list[str]
    """Every warning, one line each."""
    plan: RunPlan | None
    """The run plan; ``None`` when there are problems."""


def validate(config: RftConfig, registry: PluginRegistry) -> Validated:
    """Derive, then check; ``config`` is not changed. Returns ``(problems, warnings,
    plan)``, the plan holding the derived config."""
    problems, warnings, plan = check(derive(config, registry), registry)
    return Validated(problems, warnings, plan)


def fields_as_dict(config: Any) -> dict[str, Any]:
    """Plain-data view of a (validated) config, for printing."""
    return dataclasses.asdict(config)


__all__ = ["Selected", "Validated", "build_args", "fields_as_dict", "local_looking",
           "validate"]
