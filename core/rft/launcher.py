"""Launcher: runs the stages of a validated config in order, each in its mode.

Modes are part of the core (not plugins). A stage starts from the previous stage's final
model. After the last stage, ``<job dir>/summary.json`` holds each stage's held-out
evaluation before and after it, and the console shows the same as a table.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from rft.checkpoint import check_writable
from rft.config import LoadedConfig, Stage
from rft.distributed.both import run_both
from rft.errors import RftError
from rft.logs import configure_logging, reset_logging
from rft.modes.bench import run_bench
from rft.modes.colocate import run_colocate
from rft.modes.explore import run_explore
from rft.modes.preflight import check_model_sources
from rft.modes.stage import StageResult
from rft.modes.train import run_train

ModeRunner = Callable[[Stage], StageResult]

MODE_RUNNERS: dict[str, ModeRunner] = {
    "colocate": run_colocate,
    "both": run_both,
    "train": run_train,
    "explore": run_explore,
    "bench": run_bench,
}
"""Runner per mode; a mode missing here is not available in this version of rft."""


def run(loaded: LoadedConfig) -> int:
    """Run every stage in order; write the summary; return the process exit status."""
    missing = sorted({stage.config.mode for stage in loaded.stages} - set(MODE_RUNNERS))
    if missing:
        raise RftError(
            f"mode: {', '.join(repr(m) for m in missing)} cannot run yet: this version of rft "
            f"runs {', '.join(sorted(MODE_RUNNERS))}")
    try:
        return _run_stages(loaded)
    finally:
        reset_logging()  # the log file is closed; a later run in this process starts anew


def _run_stages(loaded: LoadedConfig) -> int:
    """The stages in order, each from the previous stage's final model (the log of each
    in its job dir); the summary after each."""
    results: list[StageResult] = []
    previous_model: str | None = None
    for stage in loaded.stages:
        if previous_model is not None:
            stage.config.model.model_path = previous_model
            stage.config.model.critic_model_path = previous_model
        check_model_sources(stage.plan)
        check_writable(stage.plan.job_dir)  # one line before anything is written there
        configure_logging(stage.config.log, stage.plan.job_dir, "launcher")
        with explorer_environment(stage):
            result = MODE_RUNNERS[stage.config.mode](stage)
        results.append(result)
        previous_model = result.final_model_path
        write_summary(loaded, results)
    print_summary(results)
    return 0


@contextmanager
def explorer_environment(stage: Stage) -> Iterator[None]:
    """``explorer.env_vars`` set in this process while a stage whose explorer runs here
    (every mode but ``both``, whose explorer actor gets them as its runtime environment)
    runs; the environment is restored afterwards."""
    env_vars = stage.config.explorer.env_vars
    if stage.config.mode == "both" or not env_vars:
        yield
        return
    saved = {key: os.environ.get(key) for key in env_vars}
    os.environ.update({key: str(value) for key, value in env_vars.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def summary_path(loaded: LoadedConfig) -> str:
    """``<checkpoint_root_dir>/<project>[/<group>]/<name>/summary.json`` of the whole run."""
    c = loaded.config
    return os.path.join(c.checkpoint_root_dir, c.project, c.group, c.name, "summary.json")


def write_summary(loaded: LoadedConfig, results: list[StageResult]) -> None:
    path = summary_path(loaded)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data: dict[str, Any] = {"project": loaded.config.project, "name": loaded.config.name,
                            "stages": [asdict(r) for r in results]}
    partial = f"{path}.{os.getpid()}.tmp"  # explore and train runs may share the job dir
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
    os.replace(partial, path)


def print_summary(results: list[StageResult]) -> None:
    """A table: one row per stage and eval metric, before → after."""
    rows = [("stage", "metric", "before", "after")]
    for result in results:
        for key in sorted(set(result.eval_before) | set(result.eval_after)):
            if not key.endswith(("/accuracy", "/reward/mean")) and "pass@" not in key:
                continue
            before, after = result.eval_before.get(key), result.eval_after.get(key)
            rows.append((result.name or "-", key, _fmt(before), _fmt(after)))
    if len(rows) == 1:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    out = sys.stdout
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
