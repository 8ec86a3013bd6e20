"""The kinds of thing a config selects by name, each typed by what its plugins register.

A :class:`PluginKind` ``[T]`` names a kind (``"policy_loss_fn"``), its ``register_*`` hook
and the contract ``T`` of what that hook's dicts map names to (``PolicyLossFn``): a
registry lookup with :data:`POLICY_LOSS_FN` returns a ``PolicyLossFn``, and the run plan
holds it as ``Selected[PolicyLossFn]`` (:mod:`rft.config.plan`), so each kind's contract
meets the registry in the type system. The contracts are imported for the type checker
only: this module stays free of torch (the CLI imports it on every start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from rft.algorithm import AlgorithmPreset
    from rft.buffer.operators import ExperienceOperator
    from rft.buffer.replay import PriorityFn
    from rft.buffer.sampling import SampleStrategy
    from rft.buffer.selector import TaskSelector
    from rft.commands import Command
    from rft.contracts import AdvantageFn, EntropyLossFn, KLFn, PolicyLossFn
    from rft.data.task_operator import TaskOperator
    from rft.engines.engine import InferenceEngine
    from rft.engines.reply_parsing import FunctionCall
    from rft.environment import ActionParser, Environment
    from rft.monitor.base import Monitor
    from rft.run_artifacts import RunArtifact
    from rft.services import RunService
    from rft.trainer.base import Trainer
    from rft.workflow import Workflow

T = TypeVar("T")


@dataclass(frozen=True)
class PluginKind(Generic[T]):
    """One kind of thing a config selects by name; ``T`` is what its plugins register."""

    name: str
    """Short name used in lookups and messages, e.g. ``"advantage_fn"``."""
    hook: str
    """Name of the ``register_*`` hook that provides it."""
    label: str
    """Human wording used in error messages."""


ALGORITHM: PluginKind[AlgorithmPreset] = PluginKind(
    "algorithm", "register_algorithms", "algorithm")
ADVANTAGE_FN: PluginKind[AdvantageFn[Any]] = PluginKind(
    "advantage_fn", "register_advantage_fns", "advantage function")
POLICY_LOSS_FN: PluginKind[PolicyLossFn[Any]] = PluginKind(
    "policy_loss_fn", "register_policy_loss_fns", "policy loss function")
KL_FN: PluginKind[KLFn[Any]] = PluginKind("kl_fn", "register_kl_fns", "KL function")
ENTROPY_LOSS_FN: PluginKind[EntropyLossFn[Any]] = PluginKind(
    "entropy_loss_fn", "register_entropy_loss_fns", "entropy loss function")
SAMPLE_STRATEGY: PluginKind[type[SampleStrategy]] = PluginKind(
    "sample_strategy", "register_sample_strategies", "sample strategy")
PRIORITY_FN: PluginKind[PriorityFn] = PluginKind(
    "priority_fn", "register_priority_fns", "priority function")
WORKFLOW: PluginKind[type[Workflow]] = PluginKind(
    "workflow", "register_workflows", "workflow")
REWARD_FN: PluginKind[Callable[..., Any]] = PluginKind(
    "reward_fn", "register_reward_fns", "reward function")
"""A function or a class (its instances score): called either way."""
TASK_SELECTOR: PluginKind[type[TaskSelector]] = PluginKind(
    "task_selector", "register_task_selectors", "task selector")
EXPERIENCE_OPERATOR: PluginKind[type[ExperienceOperator]] = PluginKind(
    "experience_operator", "register_experience_operators", "experience operator")
TASK_OPERATOR: PluginKind[type[TaskOperator]] = PluginKind(
    "task_operator", "register_task_operators", "task operator")
SERVICE: PluginKind[type[RunService]] = PluginKind(
    "service", "register_services", "service")
ENGINE: PluginKind[type[InferenceEngine]] = PluginKind(
    "engine", "register_engines", "engine")
ENVIRONMENT: PluginKind[type[Environment]] = PluginKind(
    "environment", "register_environments", "environment")
ACTION_PARSER: PluginKind[ActionParser] = PluginKind(
    "action_parser", "register_action_parsers", "action parser")
TOOL_CALL_PARSER: PluginKind[Callable[[str], tuple[str, list[FunctionCall]]]] = PluginKind(
    "tool_call_parser", "register_tool_call_parsers", "tool-call parser")
REASONING_PARSER: PluginKind[Callable[[str], tuple[str | None, str]]] = PluginKind(
    "reasoning_parser", "register_reasoning_parsers", "reasoning parser")
TRAINER: PluginKind[type[Trainer]] = PluginKind("trainer", "register_trainers", "trainer")
MONITOR: PluginKind[type[Monitor]] = PluginKind("monitor", "register_monitors", "monitor")
COMMAND: PluginKind[Command] = PluginKind("command", "register_commands", "command")
RUN_ARTIFACT: PluginKind[RunArtifact] = PluginKind(
    "run_artifact", "register_run_artifacts", "end-of-run artefact")

ALL_KINDS: tuple[PluginKind[Any], ...] = (
    ALGORITHM, ADVANTAGE_FN, POLICY_LOSS_FN, KL_FN, ENTROPY_LOSS_FN, SAMPLE_STRATEGY,
    PRIORITY_FN, WORKFLOW, REWARD_FN, TASK_SELECTOR, EXPERIENCE_OPERATOR, TASK_OPERATOR, SERVICE,
    ENGINE, ENVIRONMENT, ACTION_PARSER, TOOL_CALL_PARSER, REASONING_PARSER, TRAINER, MONITOR,
    COMMAND, RUN_ARTIFACT)
"""Every kind, in the order ``rft plugins`` lists them."""
