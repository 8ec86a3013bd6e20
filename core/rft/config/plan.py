"""The run plan: what config validation hands to the runtime.

:func:`rft.config.check.check` returns ``(problems, warnings, plan)``. The
:class:`RunPlan` is frozen and typed: it holds the validated config (every derived value
filled in), the algorithm preset, and every plugin the config names **resolved once**
into a :class:`Selected` (implementation + built ``Args``), grouped by the part of the
run that uses it. Consumers take the slice they need: a trainer gets a
:class:`TrainerPlan`, the explorer its :class:`TasksetPlan` s and :class:`ModelPlan`, and
so on. The plan pickles (implementations are pickled by reference), so Ray actors receive
it instead of validating again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeGuard, TypeVar

from rft.algorithm import AlgorithmPreset
from rft.config.schema import (AlgorithmConfig, ExperienceBufferConfig, ModelConfig,
                               RftConfig, TasksetConfig, TrainerConfig)
from rft.config.token_budget import TokenBudget
from rft.contracts import (AdvantageFn, EntropyLossFn, KLFn, PolicyLossFn,
                           needs_ref_log_prob)

if TYPE_CHECKING:  # the kinds' contracts (runtime modules above the config layer)
    from rft.buffer.operators import ExperienceOperator
    from rft.buffer.replay import PriorityFn
    from rft.buffer.sampling import SampleStrategy
    from rft.buffer.selector import TaskSelector
    from rft.data.task_operator import TaskOperator
    from rft.engines.engine import InferenceEngine
    from rft.engines.reply_parsing import FunctionCall
    from rft.environment import ActionParser, Environment
    from rft.monitor.base import Monitor
    from rft.services import RunService
    from rft.trainer.base import Trainer
    from rft.workflow import Workflow

Implementation = TypeVar("Implementation")


@dataclass(frozen=True)
class Selected(Generic[Implementation]):
    """A plugin name from the config, resolved once: its implementation and built args.

    ``Implementation`` is the contract of the plugin kind (``Selected[PolicyLossFn[Any]]``),
    what a registry lookup with that :class:`~rft.plugin_kinds.PluginKind` returns."""

    key: str
    """Dotted config key the name came from, e.g. ``algorithm.advantage_fn`` (for
    messages)."""
    name: str
    """The registered name."""
    implementation: Implementation
    """What the plugin registered under ``name``."""
    args: Any = None
    """Instance of the implementation's ``Args`` dataclass, or ``None`` if it has none."""

    @property
    def is_off(self) -> bool:
        """The name ``none``: the term is disabled."""
        return self.name == "none"


def active(selected: Selected[Implementation] | None
           ) -> TypeGuard[Selected[Implementation]]:
    """``selected`` is set and not ``none``."""
    return selected is not None and not selected.is_off


@dataclass(frozen=True)
class LossPlan:
    """The functions of the actor loss (veRL's ``ppo_loss``), as validation selected them.

    ``loss = agg(pg_loss) − entropy_term + kl_coef · agg(kl)``; see :mod:`rft.trainer.loss`.
    """

    policy_loss: Selected[PolicyLossFn[Any]]
    """``algorithm.policy_loss_fn``."""
    advantage: Selected[AdvantageFn[Any]] | None = None
    """``algorithm.advantage_fn`` (``None``: the algorithm uses none, e.g. SFT)."""
    kl_loss: Selected[KLFn[Any]] | None = None
    """``algorithm.kl_loss_fn`` (KL as a loss term)."""
    kl_penalty: Selected[KLFn[Any]] | None = None
    """``algorithm.kl_penalty_fn`` (KL subtracted from the token-level rewards)."""
    entropy: Selected[EntropyLossFn[Any]] | None = None
    """``algorithm.entropy_loss_fn``."""
    loss_agg_mode: str = "token-mean"
    """``algorithm.loss_agg_mode``."""

    @property
    def kl_loss_coef(self) -> float:
        """``kl_coef`` of the KL loss's args (``0`` when off)."""
        return kl_coef_of(self.kl_loss)

    @property
    def uses_kl_loss(self) -> bool:
        """A KL loss term is active: selected (not ``none``) with a non-zero ``kl_coef``
        (a zero coefficient adds nothing to the loss or its gradient, so it is not run)."""
        return active(self.kl_loss) and self.kl_loss_coef != 0

    @property
    def uses_kl_penalty(self) -> bool:
        """A KL reward penalty is active: selected (not ``none``) with a non-zero
        ``kl_coef`` (a zero coefficient leaves the rewards as they are)."""
        return active(self.kl_penalty) and kl_coef_of(self.kl_penalty) != 0

    @property
    def uses_entropy_loss(self) -> bool:
        """An entropy term with a non-zero coefficient is selected (it needs gradients)."""
        if not active(self.entropy):
            return False
        return getattr(self.entropy.args, "entropy_coef", None) != 0

    @property
    def policy_needs_ref(self) -> bool:
        """The policy loss declares ``needs_ref_log_prob`` (DPO-like losses)."""
        return needs_ref_log_prob(self.policy_loss.implementation)

    @property
    def needs_ref(self) -> bool:
        """The trainer holds and runs a reference model: a KL term is active
        (:attr:`uses_kl_loss`, :attr:`uses_kl_penalty`) or the policy loss declares
        ``needs_ref_log_prob``. Otherwise no reference model is loaded, kept in memory or
        run (``kl_loss_fn: none`` or ``kl_coef: 0``, and no KL penalty: one copy of the
        weights). The one place this is decided."""
        return self.uses_kl_loss or self.uses_kl_penalty or self.policy_needs_ref


def kl_coef_of(selected: Selected[Any] | None) -> float:
    """``kl_coef`` of a KL function's args (``0`` for ``none`` or no args)."""
    if not active(selected) or selected.args is None:
        return 0.0
    return float(getattr(selected.args, "kl_coef", 0.0))


@dataclass(frozen=True)
class TrainerPlan:
    """What a trainer backend (``trainer.trainer_type``) is built from."""

    model: ModelConfig
    """The ``model`` section (paths, token limits, sampling temperature)."""
    algorithm: AlgorithmConfig
    """The ``algorithm`` section with the preset applied (optimizer, repeat_times, …)."""
    trainer: TrainerConfig
    """The ``trainer`` section (``trainer_config``, grad clip, checkpoints)."""
    preset: AlgorithmPreset
    """The algorithm's flags (critic, reference, experience format, …)."""
    loss: LossPlan
    """The loss functions."""
    train_batch_size: int
    """Experiences per training step (``buffer.train_batch_size``)."""
    total_steps: int | None
    """Training steps of this stage (the LR schedule's length); ``None``: not known
    (a schedule that needs it, e.g. ``lr_warmup_steps_ratio``, then refuses to start)."""


@dataclass(frozen=True)
class TasksetPlan:
    """A taskset with its workflow, reward and task selector."""

    key: str
    """Its dotted key, e.g. ``buffer.explorer_input.tasksets[1]``."""
    config: TasksetConfig
    """The taskset section, defaults filled in."""
    is_eval: bool
    """An evaluation taskset."""
    workflow: Selected[type[Workflow]]
    """``default_workflow_type``."""
    reward: Selected[Callable[..., Any]] | None
    """``default_reward_fn_type`` (``None``: the workflow scores itself)."""
    selector: Selected[type[TaskSelector]]
    """``task_selector.selector_type``."""
    environment: Selected[type[Environment]] | None = None
    """``environment`` (its args from ``environment_args``); ``None``: none."""
    action_parser: Selected[ActionParser] | None = None
    """With an environment: the action parser (``workflow_args.action_parser``, else the
    environment's ``default_action_parser``)."""
    row_workflows: Mapping[str, Selected[type[Workflow]]] = field(default_factory=dict)
    """With ``format.workflow_key``: every registered workflow by name, for rows that name
    their own (args from ``workflow_args`` where they fit, else the defaults)."""
    row_rewards: Mapping[str, Selected[Callable[..., Any]]] = field(default_factory=dict)
    """With ``format.reward_fn_key``: every registered reward function by name, likewise."""


@dataclass(frozen=True)
class ModelPlan:
    """An inference model (the rollout model or an auxiliary one) and its parsers."""

    key: str
    """``explorer.rollout_model`` or ``explorer.auxiliary_models[i]``."""
    engine: Selected[type[InferenceEngine]]
    """``engine_type``."""
    tool_call_parser: Selected[Callable[[str], tuple[str, list[FunctionCall]]]] | None = None
    """The OpenAI endpoint's tool-call parser."""
    reasoning_parser: Selected[Callable[[str], tuple[str | None, str]]] | None = None
    """The OpenAI endpoint's reasoning parser."""


@dataclass(frozen=True)
class RunPlan:
    """One validated stage: its config and every resolved plugin (see the module doc)."""

    config: RftConfig
    """The stage's config after derivation (no value left to derive)."""
    preset: AlgorithmPreset
    """``algorithm.algorithm_type``'s preset."""
    loss: LossPlan
    """The actor loss's functions."""
    sample_strategy: Selected[type[SampleStrategy]]
    """``algorithm.sample_strategy``."""
    trainer: Selected[type[Trainer]]
    """``trainer.trainer_type``."""
    monitor: Selected[type[Monitor]]
    """``monitor.monitor_type``."""
    console: Selected[type[Monitor]]
    """The console monitor, always on beside ``monitor``."""
    rollout_model: ModelPlan
    """``explorer.rollout_model``."""
    auxiliary_models: tuple[ModelPlan, ...]
    """``explorer.auxiliary_models``, in order."""
    tasksets: tuple[TasksetPlan, ...]
    """Training tasksets (``taskset`` first, then ``tasksets``)."""
    eval_tasksets: tuple[TasksetPlan, ...]
    """``eval_tasksets``."""
    operators: tuple[Selected[type[ExperienceOperator]], ...]
    """``data_processor.experience_pipeline.operators``, in order."""
    priority_fn: Selected[PriorityFn] | None
    """The replay buffer's priority function (``None``: no replay buffer)."""
    experience_buffer: ExperienceBufferConfig
    """``buffer.trainer_input.experience_buffer``, name and path filled in."""
    job_dir: str
    """``checkpoint_job_dir``: ``<checkpoint_root_dir>/<project>/<name>[/<stage>]``."""
    services: tuple[Selected[type[RunService]], ...] = ()
    """The sections of ``service`` that are set, each resolved to its run service (``args``:
    the section's dataclass); the launcher starts them around each stage."""
    token_budget: TokenBudget | None = None
    """``trainer.max_token_len_per_gpu`` as derivation filled it in (``None``: the user
    set it, or nothing to derive it from); see :mod:`rft.config.token_budget`."""
    task_operators: tuple[Selected[type[TaskOperator]], ...] = ()
    """``data_processor.task_pipeline.operators``, in order (:mod:`rft.data.task_pipeline`
    runs them before the stage)."""

    @property
    def train_only(self) -> bool:
        """The algorithm learns from a fixed dataset (no exploring)."""
        return self.preset.train_only

    @property
    def train_batch_size(self) -> int:
        """``buffer.train_batch_size``: experiences per training step (validation derives
        it, so a plan always has it)."""
        size = self.config.buffer.train_batch_size
        assert size is not None  # derived by validation
        return size

    def trainer_plan(self, total_steps: int | None = None) -> TrainerPlan:
        """The trainer's slice, for a stage of ``total_steps`` steps (default:
        ``trainer.total_steps``)."""
        c = self.config
        return TrainerPlan(model=c.model, algorithm=c.algorithm, trainer=c.trainer,
                           preset=self.preset, loss=self.loss,
                           train_batch_size=self.train_batch_size,
                           total_steps=c.trainer.total_steps if total_steps is None
                           else total_steps)


__all__ = ["LossPlan", "ModelPlan", "RunPlan", "Selected", "TasksetPlan", "TrainerPlan",
           "active", "kl_coef_of"]
