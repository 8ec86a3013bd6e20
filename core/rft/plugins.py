"""The plugin manager: built-in plugins plus entry points of group ``rft``, and lookups.

A :class:`PluginRegistry` is built fresh for each run (there is no import-time global):

    registry = PluginRegistry.create()
    grpo = registry.get(ALGORITHM, "grpo")  # an AlgorithmPreset (rft.plugin_kinds.ALGORITHM)

The kinds are the typed objects of :mod:`rft.plugin_kinds`; names the project knows of but
that may not be installed are the data of :mod:`rft.plugin_catalog`.

Environment variables:

- ``RFT_DISABLE_PLUGIN_AUTOLOAD=1`` — load only the core's built-in plugins.
- ``RFT_PLUGINS=a,b`` — load only the entry points of these distributions (or entry-point
  names); others are skipped.
- ``RFT_TRACE_PLUGINS=1`` — print every hook call and what it returned to stderr.

Each plugin distribution declares which core it was built for (``rft-framework>=0.N,<0.N+1``);
:func:`core_requirement` checks that against the installed core, and ``rft plugins`` /
``rft validate`` / ``rft run`` report a plugin built for another core (a warning: it is
still loaded).
"""

from __future__ import annotations

import functools
import importlib.metadata as importlib_metadata
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, overload

import pluggy
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from rft import hookspecs
from rft.errors import DuplicateNameError, PluginError, UnknownNameError
from rft.plugin_catalog import CATALOG_PATH, PluginCatalog, load_catalog
from rft.plugin_kinds import ALL_KINDS, PluginKind, T
from rft.suggest import closest

CORE_DISTRIBUTION = "rft-framework"
"""The core's distribution name (the import name and the command stay ``rft``); reported
for the core's built-in plugins."""

UNRELATED_DISTRIBUTION = "rft"
"""The core's distribution name before 0.1; on PyPI ``rft`` is an unrelated RobotFramework
project, so a plugin depending on it is flagged."""


KINDS: dict[str, PluginKind[Any]] = {kind.name: kind for kind in ALL_KINDS}
"""Every kind by its name (``rft plugins``, a name given as a string)."""


@functools.cache
def plugin_catalog() -> PluginCatalog:
    """The catalog shipped with the core (``rft/plugin_catalog.toml``: official plugin
    distributions and Trinity-RFT names that need third-party packages), read once."""
    return load_catalog(CATALOG_PATH, KINDS)


@dataclass
class PluginInfo:
    """What ``rft plugins`` shows about one loaded plugin."""

    name: str
    distribution: str
    version: str
    hooks: list[str]
    registers: dict[str, list[str]] = field(default_factory=dict)
    compatible: bool = True
    """Whether the distribution's requirement on the core accepts the installed core."""
    requires_core: str | None = None
    """The distribution's requirement on the core as declared (``None``: none declared, or
    a built-in)."""
    problem: str | None = None
    """Why it is not compatible, in a few words (``None`` when it is)."""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution,
                "version": self.version, "hooks": self.hooks, "registers": self.registers,
                "compatible": self.compatible, "requires_core": self.requires_core}


@dataclass(frozen=True)
class CoreRequirement:
    """What one plugin distribution requires of the core, checked against the installed
    core (:func:`core_requirement`)."""

    distribution: str
    requires_core: str | None
    """The requirement as declared, e.g. ``"rft-framework<0.2,>=0.1"``; ``None`` if none."""
    compatible: bool
    problem: str | None = None
    """Short reason shown by ``rft plugins``, e.g. ``"needs rft-framework<0.1"``."""
    warning: str | None = None
    """One line for ``rft validate`` / ``rft run``: the distribution, its requirement and
    the installed core version."""


def compatible_core_bound(core_version: str) -> str:
    """The bound a plugin built against core ``0.N.x`` declares: ``>=0.N,<0.N+1``
    (``>=M,<M+1`` from 1.0 on)."""
    try:
        release = Version(core_version).release
    except InvalidVersion:
        return ""
    major, minor = (release + (0, 0))[:2]
    if major == 0:
        return f">=0.{minor},<0.{minor + 1}"
    return f">={major},<{major + 1}"


def core_requirement(distribution: importlib_metadata.Distribution,
                     core_version: str | None = None) -> CoreRequirement:
    """Read ``distribution``'s ``Requires-Dist`` for the core and check it against
    ``core_version`` (default: the installed core's).

    A requirement on ``rft`` (the unrelated PyPI project) is incompatible; no requirement
    on the core at all is compatible (nothing to check), and so is any requirement when the
    core's own version is unknown (running from a source tree that is not installed).
    """
    name = distribution.metadata["Name"] or "?"
    core_version = core_version or _core_version()
    ours: Requirement | None = None
    unrelated: Requirement | None = None
    for line in distribution.requires or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        canonical = canonicalize_name(requirement.name)
        if canonical == CORE_DISTRIBUTION:
            ours = requirement
        elif canonical == UNRELATED_DISTRIBUTION:
            unrelated = requirement
    installed = f"installed: {CORE_DISTRIBUTION} {core_version}"
    if unrelated is not None:
        declared = _format_requirement(unrelated)
        bound = compatible_core_bound(core_version)
        return CoreRequirement(
            name, declared, False,
            problem=f"depends on {declared!r}, an unrelated PyPI project; "
                    f"needs {CORE_DISTRIBUTION}",
            warning=f"plugin distribution {name} depends on {declared!r}, the unrelated PyPI "
                    f"project 'rft' (not this framework); it should depend on "
                    f"'{CORE_DISTRIBUTION}{bound}' ({installed})")
    if ours is None:
        return CoreRequirement(name, None, True)
    declared = _format_requirement(ours)
    try:
        compatible = ours.specifier.contains(Version(core_version), prereleases=True)
    except InvalidVersion:
        compatible = True
    if compatible or core_version == _UNKNOWN_VERSION:
        return CoreRequirement(name, declared, True)
    return CoreRequirement(
        name, declared, False, problem=f"needs {declared}",
        warning=f"plugin distribution {name} requires {declared} ({installed}); it was built "
                f"for another core version and may not work")


def _format_requirement(requirement: Requirement) -> str:
    """``name`` plus its specifiers, lower bounds first (``rft-framework>=0.1,<0.2``)."""
    specifiers = sorted(requirement.specifier,
                        key=lambda s: (s.operator.startswith("<"), s.operator, s.version))
    return requirement.name + ",".join(str(s) for s in specifiers)


@dataclass(frozen=True)
class Registration:
    """One name of one kind, with its implementation and where it came from."""

    kind: str
    name: str
    implementation: Any
    plugin: str
    distribution: str


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _builtin_plugin_modules() -> list[ModuleType]:
    from rft.builtin import builtin_plugin_modules

    return builtin_plugin_modules()


class RftPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers which distribution each plugin came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.distributions: dict[str, tuple[str, str]] = {}
        """``plugin name -> (distribution, version)`` for plugins loaded from entry points."""
        self.core_requirements: dict[str, CoreRequirement] = {}
        """``plugin name ->`` what its distribution requires of the core (entry points)."""


def create_plugin_manager(
    *,
    autoload: bool | None = None,
    allow: Iterable[str] | None = None,
    extra_plugins: Iterable[object] = (),
    builtins: bool = True,
) -> RftPluginManager:
    """Build a fresh pluggy manager with the core built-ins and the ``rft`` entry points.

    :param autoload: load entry points; defaults to ``not RFT_DISABLE_PLUGIN_AUTOLOAD``.
    :param allow: distribution or entry-point names to load; defaults to ``RFT_PLUGINS``.
    :param extra_plugins: plugin objects registered after the built-ins (tests, scripts);
        one already registered (an installed plugin's module, loaded through its entry
        point) is skipped, not registered twice.
    :param builtins: register the core's built-in plugins (which import torch); ``False``
        where only kinds no built-in registers are looked up (the CLI's command list).
    """
    manager = RftPluginManager()
    for module in _builtin_plugin_modules() if builtins else ():
        manager.register(module, name=f"rft.builtin.{module.__name__.rsplit('.', 1)[-1]}")
    if autoload is None:
        autoload = not _env_flag("RFT_DISABLE_PLUGIN_AUTOLOAD")
    if autoload:
        _load_entry_points(manager, _allow_list(allow))
    for plugin in extra_plugins:
        if manager.is_registered(plugin):
            continue
        name = plugin.__name__ if isinstance(plugin, ModuleType) else type(plugin).__qualname__
        manager.register(plugin, name=None if manager.has_plugin(name) else name)
    if _env_flag("RFT_TRACE_PLUGINS"):
        manager.trace.root.setwriter(lambda message: sys.stderr.write(message))
        manager.enable_tracing()
    return manager


def _allow_list(allow: Iterable[str] | None) -> set[str] | None:
    """``allow``, or else ``RFT_PLUGINS`` split on commas; ``None``: everything."""
    if allow is None and os.environ.get("RFT_PLUGINS", "").strip():
        allow = [part.strip() for part in os.environ["RFT_PLUGINS"].split(",") if part.strip()]
    return set(allow) if allow is not None else None


def _selected_entry_points(allow: set[str] | None) -> list[importlib_metadata.EntryPoint]:
    """The entry points of group ``rft`` that ``allow`` lets through (all when ``None``)."""
    selected = []
    for entry_point in importlib_metadata.entry_points(group=hookspecs.PROJECT_NAME):
        distribution = entry_point.dist.name if entry_point.dist else entry_point.name
        if allow is not None and distribution not in allow and entry_point.name not in allow:
            continue
        selected.append(entry_point)
    return selected


def core_compatibility_warnings(*, autoload: bool | None = None,
                                allow: Iterable[str] | None = None) -> list[str]:
    """One line per plugin distribution (that :func:`create_plugin_manager` with the same
    arguments would load) whose requirement on the core rejects the installed core, or
    that depends on the unrelated ``rft``; the plugins are not imported."""
    if autoload is None:
        autoload = not _env_flag("RFT_DISABLE_PLUGIN_AUTOLOAD")
    if not autoload:
        return []
    warnings: dict[str, str] = {}
    for entry_point in _selected_entry_points(_allow_list(allow)):
        if entry_point.dist is None:
            continue
        found = core_requirement(entry_point.dist)
        if found.warning is not None:
            warnings.setdefault(found.distribution, found.warning)
    return list(warnings.values())


def _load_entry_points(manager: RftPluginManager, allow: set[str] | None) -> None:
    """Load every entry point of group ``rft``, optionally filtered by ``allow``."""
    core_version = _core_version()
    for entry_point in _selected_entry_points(allow):
        distribution = entry_point.dist.name if entry_point.dist else entry_point.name
        if manager.get_plugin(entry_point.name) is not None:
            continue
        try:
            plugin = entry_point.load()
        except Exception as exc:  # a broken plugin must name itself
            raise PluginError(
                f"plugin {entry_point.name!r} from distribution {distribution!r} failed to "
                f"import: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            manager.register(plugin, name=entry_point.name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"plugin {entry_point.name!r} from distribution {distribution!r} is invalid: "
                f"{exc}"
            ) from exc
        if entry_point.dist is not None:
            manager.distributions[entry_point.name] = (entry_point.dist.metadata["name"],
                                                       entry_point.dist.version)
            manager.core_requirements[entry_point.name] = core_requirement(entry_point.dist,
                                                                           core_version)


class PluginRegistry:
    """All names of all kinds (or of ``kinds``), collected once from a plugin manager."""

    def __init__(self, manager: RftPluginManager,
                 kinds: Iterable[PluginKind[Any] | str] | None = None) -> None:
        """:param kinds: collect only these kinds (only their ``register_*`` hooks are
            called); looking up another kind is a ``KeyError``. Default: every kind."""
        self.manager = manager
        selected = (list(KINDS.values()) if kinds is None
                    else [KINDS[_check_kind(k)] for k in kinds])
        self._entries: dict[str, dict[str, Registration]] = {
            kind.name: self._collect(kind) for kind in selected
        }

    @classmethod
    def create(cls, *, kinds: Iterable[PluginKind[Any] | str] | None = None,
               **kwargs: Any) -> PluginRegistry:
        """A registry of ``kinds`` over :func:`create_plugin_manager` (same keyword
        arguments)."""
        return cls(create_plugin_manager(**kwargs), kinds)

    # ---- building ------------------------------------------------------------------

    def distribution_of(self, plugin_name: str) -> tuple[str, str]:
        """``(distribution, version)`` that provides a plugin; the core for built-ins."""
        if plugin_name in self.manager.distributions:
            return self.manager.distributions[plugin_name]
        return CORE_DISTRIBUTION, _core_version()

    def _collect(self, kind: PluginKind[Any]) -> dict[str, Registration]:
        caller = getattr(self.manager.hook, kind.hook)
        entries: dict[str, Registration] = {}
        for impl in reversed(caller.get_hookimpls()):  # registration order
            plugin_name = impl.plugin_name
            distribution = self.distribution_of(plugin_name)[0]
            try:
                returned = impl.function()
            except Exception as exc:
                raise PluginError(
                    f"plugin {plugin_name!r} ({distribution}): {kind.hook}() raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if _env_flag("RFT_TRACE_PLUGINS"):
                names = sorted(returned) if isinstance(returned, dict) else returned
                sys.stderr.write(f"rft-trace: {plugin_name}.{kind.hook}() -> {names}\n")
            if returned is None:
                continue
            if not isinstance(returned, dict) or not all(isinstance(k, str) for k in returned):
                raise PluginError(
                    f"plugin {plugin_name!r} ({distribution}): {kind.hook}() must return a "
                    f"dict of {{name: implementation}}, got {type(returned).__name__}"
                )
            for name, implementation in returned.items():
                if name in entries:
                    other = entries[name]
                    raise DuplicateNameError(
                        f"{kind.label} {name!r} is registered twice: by plugin "
                        f"{other.plugin!r} (distribution {other.distribution}) and by plugin "
                        f"{plugin_name!r} (distribution {distribution})"
                    )
                entries[name] = Registration(kind.name, name, implementation, plugin_name,
                                             distribution)
        return entries

    # ---- lookups -------------------------------------------------------------------

    def _of(self, kind: PluginKind[Any] | str) -> dict[str, Registration]:
        """The registrations of ``kind``; ``KeyError`` if it is not a kind or was not
        collected."""
        name = _check_kind(kind)
        entries = self._entries.get(name)
        if entries is None:
            raise KeyError(f"plugin kind {name!r} was not collected by this registry "
                           f"(kinds: {', '.join(self._entries)})")
        return entries

    def names(self, kind: PluginKind[Any] | str) -> list[str]:
        """Sorted names registered for ``kind``."""
        return sorted(self._of(kind))

    def has(self, kind: PluginKind[Any] | str, name: str) -> bool:
        return name in self._of(kind)

    def registration(self, kind: PluginKind[Any] | str, name: str, *,
                     key: str | None = None) -> Registration:
        """The registration of ``name``; :class:`UnknownNameError` if there is none.

        :param key: the dotted config key the name came from, put first in the message.
        """
        entries = self._of(kind)
        if name in entries:
            return entries[name]
        raise UnknownNameError(_check_kind(kind), name,
                               self.unknown_name_message(kind, name, key=key))

    @overload
    def get(self, kind: PluginKind[T], name: str, *, key: str | None = None) -> T: ...

    @overload
    def get(self, kind: str, name: str, *, key: str | None = None) -> Any: ...

    def get(self, kind: PluginKind[Any] | str, name: str, *, key: str | None = None) -> Any:
        """The implementation registered as ``name`` for ``kind``: typed by the kind's
        contract when ``kind`` is a :class:`~rft.plugin_kinds.PluginKind` (e.g.
        ``registry.get(POLICY_LOSS_FN, "ppo")`` is a ``PolicyLossFn``); a kind's name (a
        string) gives ``Any``."""
        return self.registration(kind, name, key=key).implementation

    def unknown_name_message(self, kind: PluginKind[Any] | str, name: str, *,
                             key: str | None = None) -> str:
        """One line: unknown name, closest names, and the package that provides it."""
        kind = KINDS[_check_kind(kind)]
        label = kind.label
        known = self.names(kind)
        prefix = f"{key}: " if key else ""
        message = f"{prefix}unknown {label} {name!r}"
        catalog = plugin_catalog()
        external = catalog.external_reason(kind.name, str(name))
        if external:  # a name of Trinity-RFT's, not a typo
            return f"{message} ({external})"
        close = closest(str(name), known, n=3, cutoff=0.75)
        if close:
            message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        provider = catalog.provider(kind.name, str(name))
        if provider:
            message += f" (it is provided by {provider}: pip install {provider})"
        elif not close:
            message += f"; registered: {', '.join(known) or 'none'}"
        return message

    # ---- listing -------------------------------------------------------------------

    def plugins(self) -> list[PluginInfo]:
        """One :class:`PluginInfo` per loaded plugin, in registration order."""
        infos: dict[str, PluginInfo] = {}
        for plugin_name, plugin in self.manager.list_name_plugin():
            if plugin is None:
                continue
            distribution, version = self.distribution_of(plugin_name)
            hooks = sorted(
                caller.name for caller in self.manager.get_hookcallers(plugin) or []
            )
            info = PluginInfo(plugin_name, distribution, version, hooks)
            requirement = self.manager.core_requirements.get(plugin_name)
            if requirement is not None:
                info.compatible = requirement.compatible
                info.requires_core = requirement.requires_core
                info.problem = requirement.problem
            infos[plugin_name] = info
        for kind, entries in self._entries.items():
            for registration in entries.values():
                owner = infos.get(registration.plugin)
                if owner is not None:
                    owner.registers.setdefault(kind, []).append(registration.name)
        for info in infos.values():
            info.registers = {kind: sorted(names) for kind, names in info.registers.items()}
        return list(infos.values())


def _check_kind(kind: PluginKind[Any] | str) -> str:
    """The name of ``kind`` (an object or its name); ``KeyError`` if it is not a kind."""
    name = kind.name if isinstance(kind, PluginKind) else kind
    if KINDS.get(name) is None or (isinstance(kind, PluginKind) and KINDS[name] != kind):
        raise KeyError(f"unknown plugin kind {name!r}; kinds: {', '.join(KINDS)}")
    return name


_UNKNOWN_VERSION = "0+unknown"


def _core_version() -> str:
    try:
        return importlib_metadata.version(CORE_DISTRIBUTION)
    except importlib_metadata.PackageNotFoundError:
        return _UNKNOWN_VERSION


def args_type_of(implementation: Any) -> type[Any] | None:
    """The dataclass an implementation declares for its ``*_args``, or ``None``."""
    return getattr(implementation, "Args", None)
