"""The second stage of validation: checks that only read a derived config.

:func:`check` takes what :func:`rft.config.derive.derive` returned and runs every
section's check over it, in the order of :data:`CHECKS`. No check writes into the config
and none depends on another having passed, so every independent problem of a config is
reported in one pass. Each check that resolves plugins returns its typed result
(:class:`~rft.config.check_algorithm.AlgorithmChoice`,
:class:`~rft.config.check_buffer.BufferChoice`,
:class:`~rft.config.check_models.ModelChoice`, the trainer's and monitor's
:class:`~rft.config.plan.Selected`); :func:`check` assembles them into the
:class:`~rft.config.plan.RunPlan` when no problem was found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from rft.config.check_algorithm import AlgorithmChoice, check_algorithm
from rft.config.check_buffer import BufferChoice, check_buffer
from rft.config.check_models import ModelChoice, check_cluster, check_explorer
from rft.config.check_sections import (
    check_data_processor,
    check_global,
    check_model,
    check_monitor,
    check_services,
    check_split_modes,
    check_support,
    check_synchronizer,
)
from rft.config.check_trainer import check_memory, check_rollout_logprobs, check_trainer
from rft.config.data_checks import check_datasets
from rft.config.derive import Derived
from rft.config.external import check_external_engines
from rft.config.findings import Findings
from rft.config.host_checks import check_host
from rft.config.lora import check_lora
from rft.config.plan import RunPlan, Selected
from rft.config.task_pipeline import check_task_pipeline
from rft.plugins import PluginRegistry
from rft.plugin_kinds import MONITOR


class Checked(NamedTuple):
    """What :func:`check` returns."""

    problems: list[str]
    """Every problem, one line each starting with its dotted key (derivation's first)."""
    warnings: list[str]
    """Every warning, one line each."""
    plan: RunPlan | None
    """The run plan; ``None`` when there are problems."""


CHECKS: tuple[Callable[..., Any], ...] = (
    check_global, check_algorithm, check_model, check_buffer, check_datasets, check_explorer,
    check_cluster, check_external_engines, check_synchronizer, check_trainer, check_memory,
    check_lora, check_rollout_logprobs, check_split_modes, check_monitor,
    check_data_processor, check_task_pipeline, check_host, check_services, check_support,
)
"""The checks in the order :func:`check` runs them (the order of the lines they print)."""


def check(derived: Derived, registry: PluginRegistry) -> Checked:
    """Every check of :data:`CHECKS` over ``derived.config`` (read only); the plan when no
    problem was found (derivation's problems and warnings come first)."""
    c = derived.config
    found = Findings(registry, list(derived.problems), list(derived.warnings))
    check_global(c, found)
    algorithm = check_algorithm(c, found)
    preset = algorithm.preset if algorithm is not None else None
    check_model(c, found)
    buffer = check_buffer(c, found, preset)
    check_datasets(c, found, preset)
    models = check_explorer(c, found)
    check_cluster(c, found)
    check_external_engines(c, found, preset)
    check_synchronizer(c, found)
    trainer = check_trainer(c, found, preset)
    check_memory(c, found)
    check_lora(c, found, trainer, models.rollout)
    check_rollout_logprobs(c, found, models.rollout)
    check_split_modes(c, found, preset)
    monitor = check_monitor(c, found)
    operators = check_data_processor(c, found)
    task_operators = check_task_pipeline(c, found)
    services = check_services(c, found)
    check_host(c, found, preset, models, buffer)
    check_support(c, found)
    if found.problems:
        return Checked(found.problems, found.warnings, None)
    plan = _plan(derived, registry, algorithm, trainer, monitor, operators, models, buffer,
                 services)
    plan = replace(plan, task_operators=task_operators)
    return Checked(found.problems, found.warnings, plan)


def _plan(derived: Derived, registry: PluginRegistry, algorithm: AlgorithmChoice | None,
          trainer: Selected[Any] | None, monitor: Selected[Any] | None,
          operators: tuple[Selected[Any], ...], models: ModelChoice,
          buffer: BufferChoice, services: tuple[Selected[Any], ...] = ()) -> RunPlan:
    """The run plan of a config without problems: every check resolved what it names
    (a name that does not resolve is a problem)."""
    c = derived.config
    assert (algorithm is not None and algorithm.loss is not None
            and algorithm.sample_strategy is not None and trainer is not None
            and monitor is not None and models.rollout is not None
            and c.checkpoint_job_dir is not None
            and c.buffer.trainer_input.experience_buffer is not None)
    console = Selected("monitor.monitor_type", "console", registry.get(MONITOR, "console"))
    return RunPlan(
        config=c, preset=algorithm.preset, loss=algorithm.loss,
        sample_strategy=algorithm.sample_strategy, trainer=trainer, monitor=monitor,
        console=console, rollout_model=models.rollout, auxiliary_models=models.auxiliary,
        tasksets=buffer.tasksets, eval_tasksets=buffer.eval_tasksets, operators=operators,
        priority_fn=buffer.priority_fn,
        experience_buffer=c.buffer.trainer_input.experience_buffer,
        job_dir=c.checkpoint_job_dir, token_budget=derived.token_budget, services=services)


__all__ = ["CHECKS", "Checked", "check"]
