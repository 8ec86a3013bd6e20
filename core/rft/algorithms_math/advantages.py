"""Deprecated: the advantage estimators moved into their algorithm plugins.

================================================  ==========================================
``grpo_advantages``, ``opo_advantages``           ``rft_plugin_grpo`` (rft-plugin-grpo)
``gae_advantages``                                ``rft_plugin_ppo`` (rft-plugin-ppo)
``rloo_advantages``                               ``rft_plugin_rloo`` (rft-plugin-rloo)
``reinforce_plus_plus[_baseline]_advantages``     ``rft_plugin_reinforceplusplus``
``remax_advantages``                              ``rft_plugin_remax`` (rft-plugin-remax)
``group_ids`` and the segment helpers             :mod:`rft.group_ops` (core)
================================================  ==========================================

This module only forwards those names (importing the plugin on first use, with a
``DeprecationWarning``) so that code written against the old location keeps working;
it is deleted once nothing imports it.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED: dict[str, tuple[str, str]] = {
    "grpo_advantages": ("rft_plugin_grpo", "grpo_advantages"),
    "opo_advantages": ("rft_plugin_grpo", "opo_advantages"),
    "gae_advantages": ("rft_plugin_ppo", "gae_advantages"),
    "rloo_advantages": ("rft_plugin_rloo", "rloo_advantages"),
    "reinforce_plus_plus_advantages": ("rft_plugin_reinforceplusplus",
                                       "reinforce_plus_plus_advantages"),
    "reinforce_plus_plus_baseline_advantages": ("rft_plugin_reinforceplusplus",
                                                "reinforce_plus_plus_baseline_advantages"),
    "remax_advantages": ("rft_plugin_remax", "remax_advantages"),
    "group_ids": ("rft.group_ops", "group_ids"),
    "GroupIndex": ("rft.group_ops", "GroupIndex"),
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _MOVED[name]
    warnings.warn(f"rft.algorithms_math.advantages.{name} moved to {module}.{attribute}",
                  DeprecationWarning, stacklevel=2)
    try:
        return getattr(importlib.import_module(module), attribute)
    except ImportError as exc:
        distribution = module.replace("_", "-")
        raise ImportError(f"{name} moved to {module}: pip install {distribution}") from exc
