"""The ``tensorboard`` monitor: TensorBoard event files, one directory per role.

Uses ``torch.utils.tensorboard.SummaryWriter`` when the ``tensorboard`` package is
installed (``pip install 'rft-framework[tensorboard]'``), else
``tensorboardX.SummaryWriter``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError
from rft.folders import make_folder
from rft.monitor.base import Monitor


@dataclass
class TensorboardArgs:
    """Arguments of the ``tensorboard`` monitor."""

    log_dir: str | None = None
    """Directory of the event files; ``None``: ``<checkpoint_job_dir>/monitor/tensorboard``.
    Each role writes into its own sub-directory ``<log_dir>/<role>``."""


def scalar(value: Any) -> float | None:
    """``value`` as a float, or ``None`` for what is not a number (strings, lists …).

    Non-finite floats are returned as given: TensorBoard and MLflow store NaN / inf."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a multi-element tensor
        return None


def _summary_writer_class() -> type:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        pass
    else:
        return SummaryWriter
    try:
        import tensorboardX
    except ImportError:
        raise RftError("monitor.monitor_type: 'tensorboard' needs the tensorboard package: "
                       "pip install 'rft-framework[tensorboard]'") from None
    return tensorboardX.SummaryWriter


class TensorboardMonitor(Monitor):
    """Writes every metric as a scalar (tag = metric name, x = step) to
    ``<log_dir>/tensorboard/<role>``; view both runs with ``tensorboard --logdir
    <log_dir>/tensorboard``.

    Values that are not numbers are skipped; NaN and inf are written as given (TensorBoard
    draws them as gaps / markers). The writer is flushed after every step, so a crash loses
    no logged step; a resumed run adds a new event file to the same directory, purging the
    steps it redoes (:meth:`rewind`).
    """

    Args = TensorboardArgs

    def __init__(self, project: str, name: str, role: str, log_dir: str,
                 args: TensorboardArgs | None = None) -> None:
        super().__init__(project, name, role, log_dir, args or TensorboardArgs())
        writer_class = _summary_writer_class()
        self.path = os.path.join(self.args.log_dir or os.path.join(log_dir, "tensorboard"), role)
        make_folder(self.path, "monitor tensorboard")
        self._writer_class = writer_class
        self._writer = writer_class(log_dir=self.path)
        self._closed = False

    def rewind(self, step: int) -> None:
        """Reopen the writer with ``purge_step = step + 1``: TensorBoard drops the events of
        later steps that earlier event files of this directory hold."""
        self._writer.close()
        self._writer = self._writer_class(log_dir=self.path, purge_step=step + 1)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            number = scalar(value)
            if number is not None:
                self._writer.add_scalar(key, number, step)
        self._writer.flush()

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """The rows as a Markdown table in TensorBoard's Text tab (tag ``name``)."""
        if rows:
            self._writer.add_text(name, markdown_table(rows), step)
            self._writer.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.close()


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """``rows`` (dicts with the keys of the first) as a Markdown table; ``|`` and line
    breaks inside a cell are escaped so that each row stays one table line."""
    columns = list(rows[0])

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", "<br>")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)

