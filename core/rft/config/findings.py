"""What the two stages of validation report, and the plugin lookups both share.

:class:`Findings` collects problems and warnings (one line each, starting with the dotted
key) while :func:`rft.config.derive.derive` fills values in and the checks of
:func:`rft.config.check.check` read the derived config; it resolves plugin names through
the registry (:meth:`Findings.select`). It holds no result of a check: each check returns
its own typed result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rft.config.convert import INVALID, to_dataclass
from rft.config.dotted import import_dotted, looks_dotted
from rft.config.load import unset_env_variable
from rft.config.plan import Selected
from rft.config.schema import RftConfig, TasksetConfig
from rft.plugins import PluginRegistry, args_type_of
from rft.plugin_kinds import ENGINE, PluginKind

T = TypeVar("T")


@dataclass
class Findings:
    """Problems and warnings found so far, and the registry names resolve through."""

    registry: PluginRegistry
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def problem(self, key: str, message: str) -> None:
        """Add the problem ``key: message``."""
        self.problems.append(f"{key}: {message}")

    def said(self) -> set[str]:
        """Keys a problem or warning already names."""
        return {line.split(": ", 1)[0] for line in self.problems + self.warnings}

    def select(self, kind: PluginKind[T], key: str, name: str | None,
               args: dict[str, Any] | None = None, args_key: str | None = None
               ) -> Selected[T] | None:
        """Resolve ``name`` of ``kind`` found at ``key``; build its args from ``args``."""
        if name is None:
            return None
        implementation: T
        if self.registry.has(kind, name):
            implementation = self.registry.get(kind, name)
        elif looks_dotted(name):  # Trinity-RFT's form: an import path
            try:
                implementation = import_dotted(name)
            except ImportError as exc:
                self.problem(key, f"cannot use {name!r} as a {kind.label}: {exc}")
                return None
        else:
            self.problems.append(self.registry.unknown_name_message(kind, name, key=key))
            return None
        built = build_args(implementation, name, args or {}, args_key or f"{key}_args",
                           self.problems)
        return Selected(key, name, implementation, built)


def lookup(registry: PluginRegistry, kind: str, name: str | None) -> Any:
    """What ``name`` of ``kind`` resolves to, or ``None`` (no message: the checks report
    a name that does not resolve). For derivations that read a plugin's declarations."""
    if name is None:
        return None
    if registry.has(kind, name):
        return registry.get(kind, name)
    if looks_dotted(name):
        try:
            return import_dotted(name)
        except ImportError:
            return None
    return None


def is_remote(registry: PluginRegistry, engine_type: str) -> bool:
    """Whether ``engine_type`` is a registered engine serving a remote model."""
    if not registry.has("engine", engine_type):
        return False
    return bool(getattr(registry.get(ENGINE, engine_type), "remote", False))


def build_args(implementation: Any, name: str, args: dict[str, Any], key: str,
               problems: list[str]) -> Any:
    """Instance of ``implementation.Args`` built from ``args`` (problems appended)."""
    args_type = args_type_of(implementation)
    if args_type is None:
        if args:
            problems.append(f"{key}: {name!r} takes no arguments, got {', '.join(args)}")
        return None
    built: Any = to_dataclass(args_type, dict(args), key, problems)
    return None if built is INVALID else built


def local_looking(path: str) -> bool:
    """True for paths that must exist here (absolute, ``./``, ``../``, ``~``, an unset
    ``${oc.env:VAR}``), as opposed to hub ids such as ``Qwen/Qwen2.5-1.5B-Instruct``."""
    return (os.path.isabs(path) or path.startswith((".", "~"))
            or unset_env_variable(path) is not None)


def require_local(found: Findings, key: str, path: str | None) -> None:
    """A problem when a local-looking ``path`` does not exist."""
    if path and local_looking(path) and not os.path.exists(os.path.expanduser(path)):
        found.problem(key, f"path {path!r} does not exist")


MISSING_DATA_HERE = "does not exist here; `rft run` stops at start unless it exists where it runs"
"""The warning for a data path missing on the validating machine (a config written for a
cluster validates on a laptop; :func:`rft.modes.preflight.check_data_sources` makes it a
one-line error when a run starts)."""


def data_path_here(found: Findings, key: str, path: str | None) -> None:
    """A warning when a data ``path`` (or its environment variable) is missing here."""
    variable = unset_env_variable(path)
    if variable is not None:
        found.warnings.append(f"{key}: environment variable {variable} is not set here (used "
                              f"in {path}); `rft run` stops at start unless it is set where "
                              "it runs")
    elif path and local_looking(path) and not os.path.exists(os.path.expanduser(path)):
        found.warnings.append(f"{key}: path {path!r} {MISSING_DATA_HERE}")


def training_tasksets(c: RftConfig) -> list[tuple[str, TasksetConfig]]:
    """``taskset`` and ``tasksets`` with their dotted keys, in order."""
    ei = c.buffer.explorer_input
    found: list[tuple[str, TasksetConfig]] = []
    if ei.taskset is not None:
        found.append(("buffer.explorer_input.taskset", ei.taskset))
    found += [(f"buffer.explorer_input.tasksets[{i}]", t) for i, t in enumerate(ei.tasksets)]
    return found


__all__ = ["MISSING_DATA_HERE", "Findings", "build_args", "data_path_here", "is_remote",
           "local_looking", "lookup", "require_local", "training_tasksets"]
