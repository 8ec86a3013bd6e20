"""The plugin manager: built-in plugins plus entry points of group ``rft``, and lookups.

A :class:`PluginRegistry` is built fresh for each run (there is no import-time global):

    registry = PluginRegistry.create()
    grpo = registry.get("algorithm", "grpo")

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

import importlib.metadata as importlib_metadata
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from rft import hookspecs
from rft.errors import DuplicateNameError, PluginError, UnknownNameError
from rft.suggest import closest

CORE_DISTRIBUTION = "rft-framework"
"""The core's distribution name (the import name and the command stay ``rft``); reported
for the core's built-in plugins."""

UNRELATED_DISTRIBUTION = "rft"
"""The core's distribution name before 0.1; on PyPI ``rft`` is an unrelated RobotFramework
project, so a plugin depending on it is flagged."""


@dataclass(frozen=True)
class Kind:
    """One kind of thing a config selects by name."""

    name: str
    """Short name used in lookups, e.g. ``"advantage_fn"``."""
    hook: str
    """Name of the ``register_*`` hook that provides it."""
    label: str
    """Human wording used in error messages."""


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("algorithm", "register_algorithms", "algorithm"),
        Kind("advantage_fn", "register_advantage_fns", "advantage function"),
        Kind("policy_loss_fn", "register_policy_loss_fns", "policy loss function"),
        Kind("kl_fn", "register_kl_fns", "KL function"),
        Kind("entropy_loss_fn", "register_entropy_loss_fns", "entropy loss function"),
        Kind("sample_strategy", "register_sample_strategies", "sample strategy"),
        Kind("priority_fn", "register_priority_fns", "priority function"),
        Kind("workflow", "register_workflows", "workflow"),
        Kind("reward_fn", "register_reward_fns", "reward function"),
        Kind("task_selector", "register_task_selectors", "task selector"),
        Kind("experience_operator", "register_experience_operators", "experience operator"),
        Kind("engine", "register_engines", "engine"),
        Kind("tool_call_parser", "register_tool_call_parsers", "tool-call parser"),
        Kind("reasoning_parser", "register_reasoning_parsers", "reasoning parser"),
        Kind("trainer", "register_trainers", "trainer"),
        Kind("monitor", "register_monitors", "monitor"),
        Kind("command", "register_commands", "command"),
    )
}

_ALGORITHM_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "rft-plugin-grpo": {"algorithm": ("grpo",),
                        "advantage_fn": ("grpo", "grpo_no_std", "opo", "clipb",
                                         "clipv")},
    "rft-plugin-ppo": {"algorithm": ("ppo",), "advantage_fn": ("ppo", "gae")},
    "rft-plugin-opmd": {"algorithm": ("opmd",), "advantage_fn": ("opmd",),
                        "policy_loss_fn": ("opmd",)},
    "rft-plugin-rloo": {"algorithm": ("rloo",), "advantage_fn": ("rloo",)},
    "rft-plugin-reinforceplusplus": {
        "algorithm": ("reinforceplusplus", "reinforceplusplus_baseline"),
        "advantage_fn": ("reinforceplusplus", "reinforceplusplus_baseline")},
    "rft-plugin-remax": {"algorithm": ("remax",), "advantage_fn": ("remax",)},
    "rft-plugin-gspo": {"algorithm": ("gspo",), "policy_loss_fn": ("gspo",)},
    "rft-plugin-dpo": {"algorithm": ("dpo",), "policy_loss_fn": ("dpo",)},
    "rft-plugin-sft": {"algorithm": ("sft",), "policy_loss_fn": ("sft",)},
    "rft-plugin-mix": {"algorithm": ("mix",), "policy_loss_fn": ("mix",),
                       "sample_strategy": ("mix",)},
    "rft-plugin-cispo": {"algorithm": ("cispo",), "policy_loss_fn": ("cispo",)},
    "rft-plugin-sapo": {"algorithm": ("sapo",), "policy_loss_fn": ("sapo",)},
    "rft-plugin-topr": {"algorithm": ("topr",), "advantage_fn": ("reinforce",),
                        "policy_loss_fn": ("topr",)},
    "rft-plugin-asymre": {"algorithm": ("asymre",), "advantage_fn": ("asymre",)},
    "rft-plugin-raft": {"algorithm": ("raft",), "advantage_fn": ("raft",),
                        "policy_loss_fn": ("raft",)},
    "rft-plugin-dapo": {"algorithm": ("dapo",), "experience_operator": ("overlong_penalty",)},
    "rft-plugin-grpo-verl": {"algorithm": ("grpo_verl",), "advantage_fn": ("grpo_verl",)},
    "rft-plugin-rec": {"algorithm": ("rec",), "advantage_fn": ("rec",),
                       "policy_loss_fn": ("rec",)},
    "rft-plugin-m2po": {"algorithm": ("m2po",), "policy_loss_fn": ("m2po",)},
    "rft-plugin-sppo": {"algorithm": ("sppo",), "policy_loss_fn": ("sppo",)},
    "rft-plugin-on-policy-distill": {
        "algorithm": ("on_policy_distill",), "advantage_fn": ("on_policy_distill",),
        "workflow": ("on_policy_distill_workflow", "on_policy_distill_math_workflow")},
    "rft-plugin-jsd": {"algorithm": ("jsd",), "advantage_fn": ("jsd",)},
    "rft-plugin-multi-step-grpo": {
        "algorithm": ("multi_step_grpo",), "advantage_fn": ("step_wise_grpo",),
        "experience_operator": ("step_wise_grpo",)},
    "rft-plugin-gigpo": {"algorithm": ("gigpo",), "advantage_fn": ("gigpo",),
                         "experience_operator": ("gigpo",)},
    "rft-plugin-mix-chord": {"algorithm": ("mix_chord",),
                             "policy_loss_fn": ("mix_chord", "sft_phi", "sft_is")},
}
"""What each algorithm distribution (``plugins/algorithms/<name>``) registers, by kind."""

KNOWN_PROVIDERS: dict[tuple[str, str], str] = {
    **{(kind, name): distribution
       for distribution, kinds in _ALGORITHM_NAMES.items()
       for kind, names in kinds.items() for name in names},
    **{("workflow", name): "rft-plugin-workflows" for name in (
        "simple_workflow", "math_workflow", "math_boxed_workflow", "verl_gsm8k_workflow",
        "agent_openai_workflow", "llm_judge_workflow", "tool_agent_workflow",
        "async_math_workflow", "async_math_boxed_workflow",
        "toolcall_workflow", "tool_call_workflow", "math_rm_workflow",
        "async_math_rm_workflow", "math_ruler_workflow", "async_math_ruler_workflow",
        "math_trainable_ruler_workflow", "rubric_judge_workflow",
        "step_wise_math_workflow")},
    ("workflow", "frozen_lake_workflow"): "rft-plugin-frozen-lake",
    **{("reward_fn", name): "rft-plugin-rewards" for name in (
        "math_reward", "math_boxed_reward", "gsm8k_reward", "countdown_reward",
        "format_reward", "accuracy_reward", "math_dapo_reward")},
    **{("task_selector", name): "rft-plugin-selectors" for name in (
        "shuffle", "random", "offline_easy2hard", "difficulty_based")},
    ("command", "convert-verl"): "rft-plugin-convert-verl",
    ("trainer", "verl"): "rft-plugin-verl",
    ("workflow", "verl_workflow"): "rft-plugin-convert-verl",
}
"""Names provided by the project's official plugin distributions, for install hints
(``tests/test_plugins.py`` checks it against what those distributions register)."""

_AGENTSCOPE = ("Trinity-RFT's AgentScope agent workflow: it needs the agentscope package "
               "(pip install agentscope) and a workflow plugin that wraps it, which rft does "
               "not ship")
_ALFWORLD = ("Trinity-RFT's ALFWorld environment: it needs the alfworld package (pip install "
             "alfworld, then alfworld-download) and a workflow plugin that wraps it, which rft "
             "does not ship")
_MULTIMODAL = ("Trinity-RFT's vision-language workflow: rft does not train on images or video "
               "yet (format.image_key / video_key are refused); docs/multimodal.md says what it "
               "would take")
EXTERNAL_PROVIDERS: dict[tuple[str, str], str] = {
    **{("workflow", name): _AGENTSCOPE for name in (
        "agentscope*", "as_react_workflow", "email_search_workflow")},
    **{("workflow", name): _ALFWORLD for name in (
        "alfworld_workflow", "alfworld_workflow_v2", "step_wise_alfworld_workflow",
        "RAFT_alfworld_workflow", "RAFT_reflect_alfworld_workflow")},
    **{("workflow", name): _MULTIMODAL for name in (
        "simple_mm_workflow", "async_simple_mm_workflow")},
    ("workflow", "RAFT_baseline_*"): (
        "Trinity-RFT's R3L example workflow (examples/R3L; its alfworld, scienceworld and "
        "webshop variants also need those environments): rft does not ship it; a workflow "
        "plugin (register_workflows) can add it"),
    ("workflow", "bots_math_boxed_workflow"): (
        "Trinity-RFT's BOTS example plugin (examples/bots/plugins), not part of Trinity-RFT "
        "or rft: register it from an rft workflow plugin, or use math_boxed_workflow"),
    ("workflow", "learn2ask_workflow"): (
        "Trinity-RFT's Learn-to-Ask example workflow (examples/learn_to_ask): rft does not "
        "ship it; a workflow plugin (register_workflows) can add it"),
    ("workflow", "medicine_ruler_workflow"): (
        "Trinity-RFT's RULER workflow of its RaR-Medicine example: rft ships "
        "math_ruler_workflow only; a workflow plugin (register_workflows) can add it"),
    ("workflow", "bcp_simple_react_workflow"): (
        "Trinity-RFT's BrowseComp-Plus agent workflow: it needs the BrowseComp-Plus searcher "
        "and its index, and a workflow plugin that wraps them, which rft does not ship"),
    ("workflow", "agentopia_workflow"): (
        "Trinity-RFT's workflow for an environment service (taskset storage_type "
        "env_service): rft has no environment-service storage or workflow"),
    ("workflow", "sciworld_workflow"): (
        "Trinity-RFT's ScienceWorld environment: it needs the scienceworld package (pip install "
        "scienceworld, Java 1.8+) and a workflow plugin that wraps it, which rft does not ship"),
    ("reward_fn", "rm_gallery_reward"): (
        "Trinity-RFT's wrapper of RM-Gallery's rewards (reward_fn_args.reward_name): it "
        "needs the rm-gallery package, whose releases (0.1.7) pin transformers<5 and pull in "
        "label-studio, so it cannot be installed beside rft's transformers>=5; rft does not "
        "ship it (for math_verify_reward use math_boxed_reward or accuracy_reward)"),
    ("workflow", "webshop_workflow"): (
        "Trinity-RFT's WebShop environment: it needs the web_agent_site package of "
        "github.com/princeton-nlp/WebShop (installed from source, about 15 GB of memory) and a "
        "workflow plugin that wraps it, which rft does not ship"),
}
"""Names of Trinity-RFT that need a third-party package and are not provided by any of the
project's distributions: what the unknown-name message says instead of an install hint. A
key whose name ends with ``*`` matches every name with that prefix."""


def external_provider(kind: str, name: str) -> str | None:
    """What :data:`EXTERNAL_PROVIDERS` says about ``name`` (exact names first, then the
    longest matching ``prefix*``), or ``None``."""
    if (kind, name) in EXTERNAL_PROVIDERS:
        return EXTERNAL_PROVIDERS[(kind, name)]
    prefixes = [(k, v) for (kk, k), v in EXTERNAL_PROVIDERS.items()
                if kk == kind and k.endswith("*") and name.startswith(k[:-1])]
    return max(prefixes, key=lambda kv: len(kv[0]))[1] if prefixes else None


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

    def __init__(self, manager: RftPluginManager, kinds: Iterable[str] | None = None) -> None:
        """:param kinds: collect only these kinds (only their ``register_*`` hooks are
            called); looking up another kind is a ``KeyError``. Default: every kind."""
        self.manager = manager
        selected = KINDS.values() if kinds is None else [KINDS[_check_kind(k)] for k in kinds]
        self._entries: dict[str, dict[str, Registration]] = {
            kind.name: self._collect(kind) for kind in selected
        }

    @classmethod
    def create(cls, *, kinds: Iterable[str] | None = None, **kwargs: Any) -> PluginRegistry:
        """A registry of ``kinds`` over :func:`create_plugin_manager` (same keyword
        arguments)."""
        return cls(create_plugin_manager(**kwargs), kinds)

    # ---- building ------------------------------------------------------------------

    def distribution_of(self, plugin_name: str) -> tuple[str, str]:
        """``(distribution, version)`` that provides a plugin; the core for built-ins."""
        if plugin_name in self.manager.distributions:
            return self.manager.distributions[plugin_name]
        return CORE_DISTRIBUTION, _core_version()

    def _collect(self, kind: Kind) -> dict[str, Registration]:
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

    def _of(self, kind: str) -> dict[str, Registration]:
        """The registrations of ``kind``; ``KeyError`` if it is not a kind or was not
        collected."""
        entries = self._entries.get(_check_kind(kind))
        if entries is None:
            raise KeyError(f"plugin kind {kind!r} was not collected by this registry "
                           f"(kinds: {', '.join(self._entries)})")
        return entries

    def names(self, kind: str) -> list[str]:
        """Sorted names registered for ``kind``."""
        return sorted(self._of(kind))

    def has(self, kind: str, name: str) -> bool:
        return name in self._of(kind)

    def registration(self, kind: str, name: str, *, key: str | None = None) -> Registration:
        """The registration of ``name``; :class:`UnknownNameError` if there is none.

        :param key: the dotted config key the name came from, put first in the message.
        """
        entries = self._of(kind)
        if name in entries:
            return entries[name]
        raise UnknownNameError(kind, name, self.unknown_name_message(kind, name, key=key))

    def get(self, kind: str, name: str, *, key: str | None = None) -> Any:
        """The implementation registered as ``name`` for ``kind``."""
        return self.registration(kind, name, key=key).implementation

    def unknown_name_message(self, kind: str, name: str, *, key: str | None = None) -> str:
        """One line: unknown name, closest names, and the package that provides it."""
        label = KINDS[_check_kind(kind)].label
        known = self.names(kind)
        prefix = f"{key}: " if key else ""
        message = f"{prefix}unknown {label} {name!r}"
        external = external_provider(kind, str(name))
        if external:  # a name of Trinity-RFT's, not a typo
            return f"{message} ({external})"
        close = closest(str(name), known, n=3, cutoff=0.75)
        if close:
            message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        provider = KNOWN_PROVIDERS.get((kind, str(name)))
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
                info = infos.get(registration.plugin)
                if info is not None:
                    info.registers.setdefault(kind, []).append(registration.name)
        for info in infos.values():
            info.registers = {kind: sorted(names) for kind, names in info.registers.items()}
        return list(infos.values())


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise KeyError(f"unknown plugin kind {kind!r}; kinds: {', '.join(KINDS)}")
    return kind


_UNKNOWN_VERSION = "0+unknown"


def _core_version() -> str:
    try:
        return importlib_metadata.version(CORE_DISTRIBUTION)
    except importlib_metadata.PackageNotFoundError:
        return _UNKNOWN_VERSION


def args_type_of(implementation: Any) -> type | None:
    """The dataclass an implementation declares for its ``*_args``, or ``None``."""
    return getattr(implementation, "Args", None)
