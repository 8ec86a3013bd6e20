"""What a run left on disk, read back: the runs under a checkpoint root, each run's stages
and status, its metric curves (the ``jsonl`` monitor's files) and its rollout record.

Layout read (what ``rft run`` writes)::

    <root>/<project>[/<group>]/<name>/          a run (summary.json, log/, monitor/ ...)
        summary.json                            written after each finished stage
        log/launcher.log                        the run's log
        monitor/<role>.jsonl                    a one-stage run's metrics
        <stage>/monitor/<role>.jsonl            a multi-stage run's, per stage
        [<stage>/]monitor/rollouts/step_<N>.jsonl   the rollout record

Status, from those files alone (no process table: the studio may run elsewhere):
``finished`` — ``summary.json`` lists every stage and is not older than any metric
file; ``failed`` — the log's last record is an ``ERROR`` / ``CRITICAL`` one;
``running`` — a metric or log file changed within :data:`LIVE_SECONDS`; else ``stopped``
(interrupted, or waiting longer than that).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rft.errors import RftError
from rft.monitor.rollout_record import RECORD_FOLDER, step_file_name, step_of_file

LIVE_SECONDS = 120.0
"""A run whose files changed this recently counts as running."""
MAX_DEPTH = 3
"""``<project>/<name>`` or ``<project>/<group>/<name>`` under the root."""

Curve = list[tuple[int, float]]
"""``(step, value)`` points, by step."""


@dataclass(frozen=True)
class StageFiles:
    """One stage of a run: its folder (the run's own for a one-stage run)."""

    name: str
    """The stage's name (``""`` for a one-stage run)."""
    folder: Path

    @property
    def monitor(self) -> Path:
        return self.folder / "monitor"

    @property
    def record(self) -> Path:
        return self.monitor / RECORD_FOLDER

    def metric_files(self) -> list[Path]:
        """The ``jsonl`` monitor's metric files (``<role>.jsonl``), by name."""
        return sorted(p for p in self.monitor.glob("*.jsonl") if p.is_file())


@dataclass(frozen=True)
class RunFiles:
    """One run under the checkpoint root."""

    run_id: str
    """``<project>/<name>`` (or ``<project>/<group>/<name>``), relative to the root."""
    folder: Path
    stages: list[StageFiles] = field(default_factory=list)

    def stage(self, name: str) -> StageFiles:
        """The stage called ``name`` (``""``: the first). :raises RftError: none such."""
        for stage in self.stages:
            if stage.name == name or not name:
                return stage
        raise RftError(f"run {self.run_id}: no stage {name!r} (stages: "
                       f"{', '.join(s.name or '-' for s in self.stages) or 'none'})")


def _is_run(folder: Path) -> bool:
    return ((folder / "summary.json").is_file() or (folder / "monitor").is_dir()
            or (folder / "log").is_dir())


def _stages(folder: Path) -> list[StageFiles]:
    """A run's stages: the run's own folder when it has ``monitor/``, else each subfolder
    with one, in the order ``summary.json`` lists them (then by creation)."""
    if (folder / "monitor").is_dir():
        return [StageFiles("", folder)]
    found = [child for child in folder.iterdir()
             if child.is_dir() and (child / "monitor").is_dir()]
    order = [str(s.get("name")) for s in _summary(folder).get("stages", [])]
    found.sort(key=lambda p: (order.index(p.name) if p.name in order else len(order),
                              (p / "monitor").stat().st_mtime))
    return [StageFiles(child.name, child) for child in found]


def discover_runs(root: Path) -> list[RunFiles]:
    """Every run under ``root`` (module docstring), newest first; ``[]`` when ``root``
    does not exist."""
    runs: list[RunFiles] = []

    def walk(folder: Path, depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        try:
            children = sorted(p for p in folder.iterdir() if p.is_dir())
        except OSError:
            return
        for child in children:
            if depth >= 2 and _is_run(child):
                runs.append(RunFiles(child.relative_to(root).as_posix(), child,
                                     _stages(child)))
            elif not child.name.startswith(("global_step_", ".")):
                walk(child, depth + 1)

    if root.is_dir():
        walk(root, 1)
    runs.sort(key=lambda r: _newest_change(r), reverse=True)
    return runs


def find_run(root: Path, run_id: str) -> RunFiles:
    """The run ``run_id`` under ``root``. :raises RftError: no such run (one line)."""
    for run in discover_runs(root):
        if run.run_id == run_id:
            return run
    raise RftError(f"{root / run_id}: no run there (a run folder holds monitor/, log/ or "
                   "summary.json)")


def resolve_run(path: Path) -> RunFiles:
    """The run in folder ``path`` (``rft plot RUN``). :raises RftError: not a run."""
    if not path.is_dir() or not _is_run(path):
        raise RftError(f"{path}: not a run folder (it holds no monitor/, log/ or "
                       "summary.json; give <checkpoint_root_dir>/<project>/<name>)")
    return RunFiles(path.name, path, _stages(path))


def _summary(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _watched(run: RunFiles) -> Iterator[Path]:
    yield run.folder / "log" / "launcher.log"
    for stage in run.stages:
        yield from stage.metric_files()
        yield stage.folder / "log" / "launcher.log"


def _newest_change(run: RunFiles) -> float:
    times = [p.stat().st_mtime for p in _watched(run) if p.is_file()]
    return max(times, default=run.folder.stat().st_mtime)


_LOG_LEVEL = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def _last_log_level(path: Path) -> str | None:
    """The level of the last record of a log file (``None``: no record)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 65536))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        match = _LOG_LEVEL.match(line)
        if match:
            return match.group(1)
    return None


def run_status(run: RunFiles, now: float | None = None) -> str:
    """``finished``, ``failed``, ``running`` or ``stopped`` (module docstring)."""
    now = time.time() if now is None else now
    summary_file = run.folder / "summary.json"
    newest = _newest_change(run)
    summary = _summary(run.folder)
    if summary_file.is_file() and len(summary.get("stages", [])) >= len(run.stages) \
            and summary_file.stat().st_mtime >= newest - 1.0:
        return "finished"
    logs = [p for p in (run.folder / "log" / "launcher.log",
                        *(s.folder / "log" / "launcher.log" for s in run.stages)) if p.is_file()]
    if logs and _last_log_level(max(logs, key=lambda p: p.stat().st_mtime)) in (
            "ERROR", "CRITICAL"):
        return "failed"
    return "running" if now - newest < LIVE_SECONDS else "stopped"


def read_curves(stage: StageFiles) -> dict[str, Curve]:
    """Every metric of a stage's monitor files: ``{name: [(step, value), ...]}`` by step
    (a step logged twice keeps its last value; non-finite values and lines cut short are
    skipped)."""
    points: dict[str, dict[int, float]] = {}
    for path in stage.metric_files():
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written, or cut short by a crash
            if not isinstance(record, dict) or not isinstance(record.get("step"), int) \
                    or not isinstance(record.get("metrics"), dict):
                continue
            for key, value in record["metrics"].items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) \
                        and math.isfinite(value):
                    points.setdefault(key, {})[record["step"]] = float(value)
    return {key: sorted(steps.items()) for key, steps in sorted(points.items())}


def record_steps(stage: StageFiles) -> list[int]:
    """The explore steps the stage's rollout record holds, ascending."""
    if not stage.record.is_dir():
        return []
    return sorted(s for s in (step_of_file(p.name) for p in stage.record.iterdir())
                  if s is not None)


def read_record(stage: StageFiles, step: int) -> list[dict[str, Any]]:
    """The samples of explore step ``step`` in the stage's rollout record.

    :raises RftError: the step is not recorded (one line naming the steps that are)."""
    path = stage.record / step_file_name(step)
    if not path.is_file():
        steps = record_steps(stage)
        raise RftError(f"{path}: step {step} is not in the rollout record (recorded: "
                       f"{', '.join(map(str, steps[-10:])) or 'none; set monitor.rollout_record'})")
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


__all__ = ["Curve", "LIVE_SECONDS", "RunFiles", "StageFiles", "discover_runs", "find_run",
           "read_curves", "read_record", "record_steps", "resolve_run", "run_status"]
