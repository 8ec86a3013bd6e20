"""rft: reinforcement fine-tuning of language models with pluggable algorithms.

Public front for plugin authors: ``from rft import hookimpl`` and the types plugins use.
Heavy dependencies (torch, transformers) are imported only by the modules that need them.
"""

from __future__ import annotations

from rft.contracts import (AdvantageFn, AdvantageInputs, AggContext, EntropyInputs,
                           EntropyLossFn, KLFn, KLInputs, PolicyLossFn, PolicyLossInputs,
                           needs_ref_log_prob)
from rft.errors import ConfigError, PluginError, RftError, UnknownNameError
from rft.hookspecs import hookimpl, hookspec

__all__ = ["AdvantageFn", "AdvantageInputs", "AggContext", "ConfigError", "EntropyInputs",
           "EntropyLossFn", "KLFn", "KLInputs", "PluginError", "PolicyLossFn",
           "PolicyLossInputs", "RftError", "UnknownNameError", "hookimpl", "hookspec",
           "needs_ref_log_prob"]
__version__ = "0.1.0"
