"""The plugin contract of rft: every hook a plugin may implement.

A plugin is a module (or object) with functions decorated by ``rft.hookimpl`` whose names
are hooks below. It is found through the ``rft`` entry-point group of an installed
distribution, e.g. in the plugin's ``pyproject.toml``::

    [project.entry-points.rft]
    grpo = "rft_plugin_grpo"

Registration hooks
------------------
Every kind of thing that a YAML config selects *by name* has one ``register_*`` hook.
It takes no arguments and returns a ``dict`` mapping each name to its implementation.
All plugins' dicts are merged; a name registered by two plugins for the same kind is an
error that names both distributions.

An implementation may declare its arguments (the YAML ``*_args`` mapping that goes with
its name) as a dataclass in an attribute ``Args``::

    @dataclass
    class ClipArgs:
        clip_range: float = 0.2
        \"\"\"Symmetric clip range of the importance ratio.\"\"\"

    def clipped_ppo(...): ...
    clipped_ppo.Args = ClipArgs

Config validation checks ``*_args`` against ``Args`` (unknown key, wrong type) and fills
in its defaults; an implementation without ``Args`` accepts no arguments.

Hooks are grouped by the stage of a run that uses what they register, one module each
under :mod:`rft.hooks`; this module gathers them (``add_hookspecs(rft.hookspecs)``).
"""

from __future__ import annotations

# The calling contracts of the loss-path hooks, re-exported for plugin authors.
from rft.contracts import AdvantageFn as AdvantageFn
from rft.contracts import AdvantageInputs as AdvantageInputs
from rft.contracts import AggContext as AggContext
from rft.contracts import EntropyInputs as EntropyInputs
from rft.contracts import EntropyLossFn as EntropyLossFn
from rft.contracts import KLFn as KLFn
from rft.contracts import KLInputs as KLInputs
from rft.contracts import PolicyLossFn as PolicyLossFn
from rft.contracts import PolicyLossInputs as PolicyLossInputs
from rft.contracts import needs_ref_log_prob as needs_ref_log_prob
from rft.hooks.algorithm import register_algorithms as register_algorithms
from rft.hooks.algorithm import register_advantage_fns as register_advantage_fns
from rft.hooks.algorithm import register_policy_loss_fns as register_policy_loss_fns
from rft.hooks.algorithm import register_kl_fns as register_kl_fns
from rft.hooks.algorithm import register_entropy_loss_fns as register_entropy_loss_fns
from rft.hooks.algorithm import register_sample_strategies as register_sample_strategies
from rft.hooks.algorithm import register_priority_fns as register_priority_fns
from rft.hooks.exploration import register_workflows as register_workflows
from rft.hooks.exploration import register_environments as register_environments
from rft.hooks.exploration import register_action_parsers as register_action_parsers
from rft.hooks.exploration import register_reward_fns as register_reward_fns
from rft.hooks.exploration import register_task_selectors as register_task_selectors
from rft.hooks.exploration import register_experience_operators as register_experience_operators
from rft.hooks.exploration import register_task_operators as register_task_operators
from rft.hooks.exploration import register_services as register_services
from rft.hooks.exploration import register_engines as register_engines
from rft.hooks.exploration import register_tool_call_parsers as register_tool_call_parsers
from rft.hooks.exploration import register_reasoning_parsers as register_reasoning_parsers
from rft.hooks.run import register_trainers as register_trainers
from rft.hooks.run import register_monitors as register_monitors
from rft.hooks.run import register_commands as register_commands
from rft.hooks.run import register_run_artifacts as register_run_artifacts
from rft.hooks.markers import PROJECT_NAME as PROJECT_NAME
from rft.hooks.markers import hookimpl as hookimpl
from rft.hooks.markers import hookspec as hookspec
