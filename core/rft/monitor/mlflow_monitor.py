"""The ``mlflow`` monitor: one MLflow run per role in the experiment ``<project>``.

Needs ``pip install 'rft-framework[mlflow]'`` (``mlflow`` or the lighter
``mlflow-skinny``).
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from rft.errors import RftError
from rft.monitor.base import Monitor
from rft.monitor.tensorboard import scalar

MAX_METRICS_PER_BATCH = 1000
"""MLflow's limit of metrics per ``log_batch`` call."""
MAX_KEY_LENGTH = 250
"""MLflow's limit on the length of a metric name."""


@dataclass
class MlflowArgs:
    """Arguments of the ``mlflow`` monitor."""

    uri: str = "http://localhost:5000"
    """Tracking URI: ``http(s)://host:port`` of an MLflow server, a local file store
    (``file:///abs/path`` or a plain path), or any other URI MLflow accepts
    (``sqlite:///mlflow.db`` with the full ``mlflow`` package)."""
    username: str | None = None
    """Overrides ``MLFLOW_TRACKING_USERNAME`` (HTTP basic auth of the server)."""
    password: str | None = None
    """Overrides ``MLFLOW_TRACKING_PASSWORD``."""
    connect_timeout_s: float = 5.0
    """An ``http(s)`` server that accepts no connection within this many seconds at start
    is an error (instead of MLflow's minutes of retries)."""


def tracking_uri(uri: str) -> str:
    """``uri`` with a plain path turned into an absolute ``file://`` URI (a URI has a
    scheme of two or more letters, or is ``databricks``)."""
    if uri == "databricks" or re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", uri):
        return uri
    return Path(uri).expanduser().resolve().as_uri()


def check_reachable(uri: str, timeout: float) -> None:
    """Raise a one-line :class:`RftError` when the ``http(s)`` server at ``uri`` does not
    accept a TCP connection within ``timeout`` seconds; other schemes pass."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "localhost", port), timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise RftError(f"monitor.monitor_args.uri: cannot reach the MLflow server at {uri} "
                       f"({reason}); start one (mlflow server --port {port}) or set "
                       f"monitor.monitor_args.uri") from None


_BAD_CHARS = re.compile(r"[^/\w.\- :]")


def metric_key(name: str) -> str:
    """``name`` made acceptable to MLflow: ``@`` → ``_at_`` (``pass@4`` → ``pass_at_4``),
    other characters outside ``[A-Za-z0-9_./:- ]`` → ``_``, no empty path segments, at
    most 250 characters."""
    key = _BAD_CHARS.sub("_", name.replace("@", "_at_"))
    key = "/".join(part for part in key.split("/") if part not in ("", ".", "..")) or "_"
    return key[:MAX_KEY_LENGTH]


class MlflowMonitor(Monitor):
    """Logs each step's numeric metrics with one ``log_batch`` call (chunks of 1000).

    Experiment = ``project`` (created when missing), run name = ``<name>_<role>``, tags
    ``rft.name`` / ``rft.role``. Metric names are adapted with :func:`metric_key`. NaN and
    inf are logged as given (MLflow stores them); values that are not numbers are skipped.
    ``close()`` marks the run ``FINISHED``.
    """

    Args = MlflowArgs

    def __init__(self, project: str, name: str, role: str, log_dir: str,
                 args: MlflowArgs | None = None) -> None:
        super().__init__(project, name, role, log_dir, args or MlflowArgs())
        try:
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise RftError("monitor.monitor_type: 'mlflow' needs the mlflow package: "
                           "pip install 'rft-framework[mlflow]'") from None
        self._metric = Metric
        self.uri = tracking_uri(self.args.uri)
        if self.uri.startswith("file:"):
            # MLflow ≥ 3.7 refuses the file store unless this opt-out is set.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        # MLflow reads the credentials of an HTTP server from these variables only.
        if self.args.username is not None:
            os.environ["MLFLOW_TRACKING_USERNAME"] = self.args.username
        if self.args.password is not None:
            os.environ["MLFLOW_TRACKING_PASSWORD"] = self.args.password
        check_reachable(self.uri, self.args.connect_timeout_s)
        try:
            self._client = MlflowClient(tracking_uri=self.uri)
            experiment = self._client.get_experiment_by_name(project)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else self._client.create_experiment(project))
            run = self._client.create_run(experiment_id, run_name=self.run_name,
                                          tags={"rft.name": name, "rft.role": role})
        except Exception as exc:
            raise RftError(f"monitor: MLflow at {self.uri}: cannot start run "
                           f"{self.run_name!r}: {_one_line(exc)}") from exc
        self.experiment_id = experiment_id
        self.run_id = run.info.run_id
        self._closed = False

    def start(self, total_steps: int) -> None:
        self._client.log_param(self.run_id, "total_steps", total_steps)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        timestamp = int(time.time() * 1000)
        batch = []
        for name, value in metrics.items():
            number = scalar(value)
            if number is not None:
                batch.append(self._metric(metric_key(name), number, timestamp, step))
        for begin in range(0, len(batch), MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=batch[begin:begin + MAX_METRICS_PER_BATCH])

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """The rows as the run's artifact ``<name>/step_<N>.json`` (``log_table``)."""
        if rows:
            columns = list(rows[0])
            self._client.log_table(self.run_id, {c: [row.get(c) for row in rows]
                                                 for c in columns},
                                   artifact_file=f"{name}/step_{step}.json")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.set_terminated(self.run_id)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__

