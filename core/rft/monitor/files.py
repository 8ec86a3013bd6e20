"""Monitors that need no service: console lines and a JSON-lines file."""

from __future__ import annotations

import glob
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rft.errors import RftError
from rft.folders import make_folder
from rft.monitor.base import Monitor

HEADLINE_METRICS = (
    "rollout/reward/mean", "rollout/accuracy", "rollout/failed_tasks", "actor/pg_loss",
    "actor/entropy_loss", "actor/kl_loss", "actor/grad_norm", "critic/score/mean",
    "response_length/mean", "timing_s/step",
)
"""What the console shows by default (plus every ``eval/…/accuracy`` and ``pass@k``)."""


@dataclass
class ConsoleArgs:
    """Arguments of the ``console`` monitor."""

    keys: list[str] | None = None
    """Metric names to print; ``None``: the headline metrics and every eval accuracy."""
    all_metrics: bool = False
    """Print every metric of every step."""


class ConsoleMonitor(Monitor):
    """One line per step with a progress bar:
    ``[<run>] [#####-----] 12/40 | key=value | …``."""

    Args = ConsoleArgs
    BAR_WIDTH = 20

    def __init__(self, project: str, name: str, role: str, log_dir: str,
                 args: ConsoleArgs | None = None, stream: TextIO | None = None) -> None:
        super().__init__(project, name, role, log_dir, args or ConsoleArgs())
        self.stream = stream or sys.stdout
        self.total_steps: int | None = None

    def start(self, total_steps: int) -> None:
        self.total_steps = total_steps

    def selected_keys(self, metrics: Mapping[str, float]) -> list[str]:
        if self.args.all_metrics:
            return sorted(metrics)
        if self.args.keys is not None:
            return [k for k in self.args.keys if k in metrics]
        evals = sorted(k for k in metrics if k.startswith("eval/")
                       and (k.endswith("/accuracy") or "/pass@" in k))
        return [k for k in HEADLINE_METRICS if k in metrics] + evals

    def progress(self, step: int) -> str:
        if not self.total_steps:
            return f"step {step}"
        done = round(self.BAR_WIDTH * min(step, self.total_steps) / self.total_steps)
        return f"[{'#' * done}{'-' * (self.BAR_WIDTH - done)}] {step}/{self.total_steps}"

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        parts = [f"{key}={_short(metrics[key])}" for key in self.selected_keys(metrics)]
        print(f"[{self.run_name}] {self.progress(step)} | " + " | ".join(parts),
              file=self.stream, flush=True)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass
class JsonlArgs:
    """Arguments of the ``jsonl`` monitor."""

    filename: str | None = None
    """File name inside ``<job dir>/monitor``; default ``<role>.jsonl``."""


class JsonlMonitor(Monitor):
    """Appends ``{"step": N, "time": T, "metrics": {...}}`` per step to
    ``<log_dir>/<role>.jsonl`` (``time``: Unix seconds when it was logged).

    Each line is flushed and fsync-ed, so a crash loses no logged step; a resumed run
    first drops the lines of the steps it redoes (:meth:`rewind`), then appends to the same
    file, so each step is in it once. Non-finite values are written as strings (``"nan"``).
    """

    Args = JsonlArgs

    def __init__(self, project: str, name: str, role: str, log_dir: str,
                 args: JsonlArgs | None = None) -> None:
        super().__init__(project, name, role, log_dir, args or JsonlArgs())
        make_folder(log_dir, "monitor jsonl")
        self.path = os.path.join(log_dir, self.args.filename or f"{role}.jsonl")
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        clean = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
                 for k, v in metrics.items()}
        try:
            self._file.write(json.dumps({"step": step, "time": time.time(), "metrics": clean})
                             + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise RftError(f"monitor jsonl: cannot write {self.path}: "
                           f"{exc.strerror or exc}") from exc

    def table_path(self, name: str) -> str:
        """``<log_dir>/<name>/<role>.jsonl``: where :meth:`log_table` appends (a folder of
        its own: ``<log_dir>/*.jsonl`` are the metric files)."""
        return os.path.join(self.log_dir, name, f"{self.role}.jsonl")

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """One line per row, ``{"step": N, **row}``, appended to :meth:`table_path`."""
        path = self.table_path(name)
        try:
            make_folder(os.path.dirname(path), "monitor jsonl")
            with open(path, "a", encoding="utf-8") as handle:
                handle.writelines(json.dumps({"step": step, **row}) + "\n" for row in rows)
        except OSError as exc:
            raise RftError(f"monitor jsonl: cannot write {path}: "
                           f"{exc.strerror or exc}") from exc

    def rewind(self, step: int) -> None:
        """Keep the lines of steps ``<= step`` (and drop a last line a crash cut short), in
        the metrics file and in this role's table files; each file is replaced
        atomically."""
        self._file.close()
        _keep_steps(self.path, step)
        for table in sorted(glob.glob(os.path.join(glob.escape(self.log_dir), "*",
                                                   f"{self.role}.jsonl"))):
            _keep_steps(table, step)  # this role's tables: <log_dir>/<name>/<role>.jsonl
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def _keep_steps(path: str, step: int) -> None:
    """Rewrite the JSON-lines file ``path`` with the records of steps ``<= step`` only."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        if isinstance(record, dict) and isinstance(record.get("step"), int) \
                and record["step"] <= step:
            kept.append(line + "\n")
    if len(kept) != len(lines):
        partial = f"{path}.{os.getpid()}.tmp"
        try:
            with open(partial, "w", encoding="utf-8") as handle:
                handle.writelines(kept)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, path)
        except OSError as exc:
            raise RftError(f"monitor jsonl: cannot rewrite {path}: "
                           f"{exc.strerror or exc}") from exc
