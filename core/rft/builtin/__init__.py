"""The core's own plugins, registered like any other plugin.

Each module listed in :data:`BUILTIN_MODULES` holds ``@hookimpl`` functions; the plugin
manager registers them before the entry points of installed plugin distributions.
"""

from __future__ import annotations

import importlib
from types import ModuleType

BUILTIN_MODULES: tuple[str, ...] = (
    "rft.builtin.monitors",
    "rft.builtin.kl",
    "rft.builtin.entropy",
    "rft.builtin.policy_loss",
    "rft.builtin.sample_strategies",
    "rft.builtin.priority",
    "rft.builtin.operators",
    "rft.builtin.engines",
    "rft.builtin.reply_parsers",
    "rft.builtin.action_parsers",
    "rft.builtin.trainers",
    "rft.builtin.selectors",
)
"""Dotted names of the built-in plugin modules, in registration order."""


def builtin_plugin_modules() -> list[ModuleType]:
    """Import and return the built-in plugin modules."""
    return [importlib.import_module(name) for name in BUILTIN_MODULES]
