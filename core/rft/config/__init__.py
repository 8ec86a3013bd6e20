"""Configuration: schema, loading, validation.

    from rft.config import load_config
    loaded = load_config("examples/quickstart.yaml", ["buffer.batch_size=8"])
    for stage in loaded.stages: ...

``load_config`` reads the YAML (OmegaConf: interpolation, ``${oc.env:VAR,default}``),
applies dot-list overrides, converts onto the typed dataclasses of
:mod:`rft.config.schema`, expands ``stages`` (each stage's sections merged onto the
global ones), derives (:mod:`rft.config.derive`) then checks (:mod:`rft.config.check`)
every stage, and raises one :class:`~rft.errors.ConfigError` listing **all** problems.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rft.config.convert import INVALID, to_dataclass
from rft.config.load import load_plain
from rft.config.schema import RftConfig, StageConfig
from rft.config.plan import RunPlan
from rft.config.trinity_forms import explain_unknown_keys
from rft.config.validate import validate
from rft.errors import ConfigError
from rft.plugins import PluginRegistry

STAGE_SECTIONS = ("mode", "algorithm", "buffer", "data_processor", "explorer", "trainer",
                  "synchronizer")
"""Global sections a stage may override; the rest is shared by every stage."""


@dataclass(frozen=True)
class Stage:
    """One validated stage of a run (a config without ``stages`` is a single stage)."""

    name: str | None
    """``stage_name`` (``None`` for a config without ``stages``)."""
    plan: RunPlan
    """The stage's run plan."""
    warnings: tuple[str, ...] = ()
    """What validation warned about."""

    @property
    def config(self) -> RftConfig:
        """The stage's validated config (``plan.config``)."""
        return self.plan.config


@dataclass
class LoadedConfig:
    """A validated config: the global view and the stages to run in order."""

    config: RftConfig
    stages: list[Stage] = field(default_factory=list)
    registry: PluginRegistry | None = None
    """The registry the stages were validated with (the launcher checks a chained stage's
    new config with it)."""

    @property
    def warnings(self) -> list[str]:
        return [w for stage in self.stages for w in stage.warnings]


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` merged in: mappings merge key by key, others replace."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def timestamp_name(plain: dict[str, Any]) -> None:
    """A new experiment (``continue_from_checkpoint: false``) gets ``<name>_<timestamp>``."""
    if plain.get("continue_from_checkpoint", True) is False and isinstance(
            plain.get("name"), str):
        plain["name"] = f"{plain['name']}_{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _convert(plain: dict[str, Any], prefix: str, problems: list[str]) -> RftConfig | None:
    """The typed config, its conversion problems appended to ``problems``. A key that
    failed to convert keeps its default, so the rest is still validated: every problem
    of a config is reported in one pass. ``None`` only when no config could be built."""
    local: list[str] = []
    config = to_dataclass(RftConfig, plain, "", local)
    local = explain_unknown_keys(local)
    problems.extend(prefix + p for p in local if p not in problems)  # global ones once
    return None if config is INVALID else config


_SUGGESTED = re.compile(r"did you mean '([^']+)'")
_STAGE_PREFIX = re.compile(r"^stages\[\d+\]\.")


def reported_keys(problems: list[str]) -> set[str]:
    """Dotted keys that conversion ``problems`` already speak for: the culprit's, and the
    key a did-you-mean names (its sibling). A stage's problems count without their
    ``stages[i].`` prefix (a stage's config holds the global keys too)."""
    keys: set[str] = set()
    for line in problems:
        key = line.split(": ", 1)[0]
        keys.add(key)
        match = _SUGGESTED.search(line)
        if match:
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            keys.add(f"{parent}.{match.group(1)}" if parent else match.group(1))
    return keys


def follow_on(problem: str, reported: set[str]) -> bool:
    """Whether a validation ``problem`` is about a key conversion already reported (the
    default it fell back to, e.g. ``model.model_path: must be set`` after
    ``model.model_pth: unknown key; did you mean 'model_path'?``)."""
    key = problem.split(": ", 1)[0]
    return any(key == k or key.startswith((k + ".", k + "[")) for k in reported)


def build_stages(plain: dict[str, Any], registry: PluginRegistry) -> LoadedConfig:
    """Convert, expand stages, derive and validate; raise :class:`ConfigError` on problems."""
    problems: list[str] = []
    plain = dict(plain)
    timestamp_name(plain)
    raw_stages = plain.pop("stages", None) or []
    global_config = _convert(plain, "", problems)
    if not isinstance(raw_stages, list):
        raise ConfigError(problems + ["stages: expected a list of stages"])
    loaded_stages: list[Stage] = []
    stage_plains: list[tuple[str, str | None, dict[str, Any]]] = []
    seen_names: set[str] = set()
    for i, raw_stage in enumerate(raw_stages):
        key = f"stages[{i}]"
        stage_problems: list[str] = []
        stage = (to_dataclass(StageConfig, raw_stage, key, stage_problems)
                 if isinstance(raw_stage, dict) else INVALID)
        if not isinstance(raw_stage, dict):
            stage_problems.append(f"{key}: expected a mapping, got {type(raw_stage).__name__}")
        problems.extend(stage_problems)
        if stage is INVALID or stage_problems:
            continue
        if stage.stage_name in seen_names:
            problems.append(f"{key}.stage_name: {stage.stage_name!r} is used twice")
        seen_names.add(stage.stage_name)
        overrides = {s: getattr(stage, s) for s in STAGE_SECTIONS if getattr(stage, s) is not None}
        merged = deep_merge(plain, overrides)
        merged["name"] = f"{plain.get('name')}_{stage.stage_name}"
        if "checkpoint_job_dir" not in plain:
            merged["checkpoint_job_dir"] = os.path.join(
                str(plain.get("checkpoint_root_dir", RftConfig.checkpoint_root_dir)),
                str(plain.get("project", RftConfig.project)),
                str(plain.get("group", RftConfig.group) or ""),
                str(plain.get("name", RftConfig.name)), stage.stage_name)
        stage_plains.append((f"{key}.", stage.stage_name, merged))
    if not raw_stages:
        stage_plains.append(("", None, plain))
    for prefix, stage_name, stage_plain in stage_plains:
        config = global_config if not prefix else _convert(stage_plain, prefix, problems)
        if config is None:
            continue
        reported = reported_keys([_STAGE_PREFIX.sub("", p) for p in problems])
        config = copy.deepcopy(config)
        found, warnings, plan = validate(config, registry)
        problems.extend(prefix + p for p in found if not follow_on(p, reported))
        if plan is not None:
            loaded_stages.append(Stage(stage_name, plan, tuple(warnings)))
    if problems:
        raise ConfigError(_unique(problems))
    assert global_config is not None
    return LoadedConfig(global_config, loaded_stages, registry)


def _unique(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = (),
                registry: PluginRegistry | None = None) -> LoadedConfig:
    """Load, convert, expand, derive and validate a config file.

    :param overrides: ``key.sub=value`` items applied on top of the file.
    :param registry: plugin registry; a fresh one is built when omitted.
    :raises ConfigError: listing every problem, one line each.
    """
    plain = load_plain(path, overrides)
    return build_stages(plain, registry or PluginRegistry.create())


__all__ = ["LoadedConfig", "RunPlan", "Stage", "build_stages", "deep_merge", "load_config"]
