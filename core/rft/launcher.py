"""Launcher: runs the stages of a validated config in order, each in its mode.

Modes are part of the core (not plugins). A stage starts from the previous stage's final
model: its config is rebuilt with that model path and checked again (a new run plan).
After the last stage, ``<job dir>/summary.json`` holds each stage's held-out evaluation
before and after it, and the console shows the same as a table.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Any

from rft.adapter import is_adapter_folder
from rft.checkpoint import check_writable
from rft.config import LoadedConfig, Stage
from rft.config.check import check
from rft.config.derive import Derived
from rft.config.token_budget import budget_line
from rft.data.stage_tasks import prepare_tasks
from rft.distributed.ray_runtime import RAY
from rft.errors import ConfigError, RftError
from rft.host_memory import retain_freed_memory
from rft.logs import configure_logging, file_note, reset_logging
from rft.modes.bench import run_bench
from rft.modes.both import run_both
from rft.modes.colocate import run_colocate_mode
from rft.modes.explore import run_explore_mode
from rft.modes.preflight import check_data_sources, check_model_sources
from rft.modes.runtime import Distributed
from rft.modes.serve import run_serve_mode
from rft.modes.stage import StageResult
from rft.plugin_kinds import RUN_ARTIFACT
from rft.plugins import PluginRegistry
from rft.run_artifacts import write_artifacts
from rft.scoped_environ import scoped_environ
from rft.services import run_services, with_service_env
from rft.modes.train import run_train_mode

ModeRunner = Callable[[Stage, Distributed], StageResult]
"""A mode's entry point: the stage and the cluster runtime its actors run on."""


def _bench(stage: Stage, runtime: Distributed) -> StageResult:
    """Mode ``bench`` (one process: no cluster)."""
    return run_bench(stage)


MODE_RUNNERS: dict[str, ModeRunner] = {
    "colocate": run_colocate_mode,
    "both": run_both,
    "train": run_train_mode,
    "explore": run_explore_mode,
    "bench": _bench,
    "serve": run_serve_mode,
}
"""Runner per mode; a mode missing here is not available in this version of rft."""

RUNTIME: Distributed = RAY
"""The cluster runtime every mode runs on (:mod:`rft.distributed.ray_runtime`)."""


def run(loaded: LoadedConfig) -> int:
    """Run every stage in order; write the summary; return the process exit status."""
    missing = sorted({stage.config.mode for stage in loaded.stages} - set(MODE_RUNNERS))
    if missing:
        raise RftError(
            f"mode: {', '.join(repr(m) for m in missing)} cannot run yet: this version of rft "
            f"runs {', '.join(sorted(MODE_RUNNERS))}")
    retain_freed_memory()  # the steps' tensors reuse freed host memory (rft.host_memory)
    try:
        return _run_stages(loaded)
    except Exception as exc:  # the log's last record says the run failed (rft studio reads it)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        file_note("rft.launcher", logging.ERROR, f"run failed: {first}")
        raise
    except KeyboardInterrupt:
        file_note("rft.launcher", logging.WARNING, "run interrupted")
        raise
    finally:
        reset_logging()  # the log file is closed; a later run in this process starts anew


def _run_stages(loaded: LoadedConfig) -> int:
    """The stages in order, each from the previous stage's final model (the log of each
    in its job dir); the summary after each. ``loaded.stages`` ends up holding each stage
    as it ran (a chained stage's new plan, :func:`start_from`)."""
    results: list[StageResult] = []
    previous_model: str | None = None
    check_stage_chain(loaded.stages)
    for stage in loaded.stages:  # every stage's data before the first stage runs
        check_data_sources(stage.plan)
    for index, stage in enumerate(loaded.stages):
        if previous_model is not None:
            stage = start_from(stage, previous_model, loaded.stages[index - 1],
                               loaded.registry or PluginRegistry.create(), f"stages[{index}].")
            loaded.stages[index] = stage  # the stage as it runs (a new Stage and plan)
        check_model_sources(stage.plan)
        check_writable(stage.plan.job_dir)  # one line before anything is written there
        configure_logging(stage.config.log, stage.plan.job_dir, "launcher")
        announce_token_budget(stage)
        with run_services(stage.plan.services, stage.plan.job_dir) as variables:  # service.*
            prepare_tasks(stage.plan)  # data_processor.task_pipeline: the taskset it writes
            stage = with_service_env(stage, variables)  # Ray explorer actors reach them too
            with explorer_environment(stage):
                result = MODE_RUNNERS[stage.config.mode](stage, RUNTIME)
        results.append(result)
        previous_model = result.final_model_path
        write_summary(loaded, results)
    artifacts = end_of_run_artifacts(loaded.registry or PluginRegistry.create(kinds=[RUN_ARTIFACT]),
                                     [stage.plan.job_dir for stage in loaded.stages])
    if any(artifacts):
        write_summary(loaded, results, artifacts)
    print_summary(results, artifacts)
    return 0


def end_of_run_artifacts(registry: PluginRegistry, job_dirs: list[str]) -> list[dict[str, str]]:
    """Each job dir's files from the plugins' ``register_run_artifacts`` in ``registry``
    (``{name: path}`` per job dir, in order; :mod:`rft.run_artifacts`)."""
    registered = {name: registry.get(RUN_ARTIFACT, name) for name in registry.names(RUN_ARTIFACT)}
    return [write_artifacts(registered, job_dir) for job_dir in job_dirs]


def announce_token_budget(stage: Stage) -> None:
    """One console line when the stage's ``trainer.max_token_len_per_gpu`` was derived
    (:func:`rft.config.token_budget.budget_line`)."""
    line = budget_line(stage.plan)
    if line is not None:
        print(f"[{stage.config.name}] {line}", file=sys.stdout, flush=True)


def start_from(stage: Stage, previous_model: str, previous: Stage, registry: PluginRegistry,
               key_prefix: str = "") -> Stage:
    """``stage`` pointed at the previous stage's final model: a new config
    (:func:`dataclasses.replace`), checked again into a new plan. A LoRA adapter (peft's
    folder, ``hf/`` of a LoRA stage) is continued by a LoRA stage (``lora_configs[0].path``,
    on the same base model); a stage without LoRA starts from the merged model
    (``hf/merged``, see :func:`check_stage_chain`). Problems of the new config (the model
    it names) raise :class:`~rft.errors.ConfigError`, one line each (keys after
    ``key_prefix``)."""
    model = stage.config.model
    if is_adapter_folder(previous_model) and model.lora_configs:
        base = previous.config.model.model_path
        adapter = replace(model.lora_configs[0], path=previous_model)
        model = replace(model, model_path=base, critic_model_path=base,
                        lora_configs=[adapter, *model.lora_configs[1:]])
    else:
        if is_adapter_folder(previous_model):
            previous_model = os.path.join(previous_model, "merged")
        model = replace(model, model_path=previous_model, critic_model_path=previous_model)
    derived = Derived(replace(stage.config, model=model), stage.plan.token_budget)
    problems, _, plan = check(derived, registry)  # its warnings were said at validation
    if plan is None:
        raise ConfigError([key_prefix + p for p in problems])
    return replace(stage, plan=plan)


def check_stage_chain(stages: list[Stage]) -> None:
    """A stage without LoRA after a LoRA stage starts from the merged model, which that
    stage must export (``trainer.save_hf_merged``): one line naming it, before any stage
    runs."""
    for index in range(1, len(stages)):
        before, after = stages[index - 1].config, stages[index].config
        if before.model.lora_configs and not after.model.lora_configs \
                and not before.trainer.save_hf_merged:
            raise RftError(f"stages[{index - 1}].trainer.save_hf_merged: stage "
                           f"{index} trains without LoRA and starts from stage {index - 1}'s "
                           "model, a LoRA adapter; set save_hf_merged: true in that stage "
                           "(its export then holds the merged model)")


@contextmanager
def explorer_environment(stage: Stage) -> Iterator[None]:
    """``explorer.env_vars`` set in this process while a stage whose explorer runs here
    (every mode but ``both``, whose explorer actor sets them itself:
    :mod:`rft.distributed.actor_env`)
    runs; the environment is restored afterwards."""
    env_vars = stage.config.explorer.env_vars
    if stage.config.mode == "both" or not env_vars:
        yield
        return
    with scoped_environ(env_vars):
        yield


def summary_path(loaded: LoadedConfig) -> str:
    """``<checkpoint_root_dir>/<project>[/<group>]/<name>/summary.json`` of the whole run."""
    c = loaded.config
    return os.path.join(c.checkpoint_root_dir, c.project, c.group, c.name, "summary.json")


def write_summary(loaded: LoadedConfig, results: list[StageResult],
                  artifacts: list[dict[str, str]] | None = None) -> None:
    """``summary.json``: each stage's result (with ``artifacts``: each stage's end-of-run
    files, ``{name: path}``)."""
    path = summary_path(loaded)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    stages = [asdict(r) for r in results]
    for stage, files in zip(stages, artifacts or [], strict=False):
        stage["artifacts"] = files
    data: dict[str, Any] = {"project": loaded.config.project, "name": loaded.config.name,
                            "stages": stages}
    partial = f"{path}.{os.getpid()}.tmp"  # explore and train runs may share the job dir
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    os.replace(partial, path)


def print_summary(results: list[StageResult],
                  artifacts: list[dict[str, str]] | None = None) -> None:
    """A table: one row per stage and eval metric, before → after; then one line per
    end-of-run file (``[<stage>] <name>: <path>``; no ``[<stage>]`` in a one-stage run)."""
    rows = [("stage", "metric", "before", "after")]
    for result in results:
        for key in sorted(set(result.eval_before) | set(result.eval_after)):
            if not key.endswith(("/accuracy", "/reward/mean")) and "pass@" not in key:
                continue
            before, after = result.eval_before.get(key), result.eval_after.get(key)
            rows.append((result.name or "-", key, _fmt(before), _fmt(after)))
    out = sys.stdout
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for n, row in enumerate(rows):
            print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)), file=out)
            if n == 0:
                print("  ".join("-" * w for w in widths), file=out)
    for result, files in zip(results, artifacts or [], strict=False):
        stage = f"[{result.name}] " if result.name else ""
        for name, path in files.items():
            print(f"{stage}{name}: {path}", file=out, flush=True)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
