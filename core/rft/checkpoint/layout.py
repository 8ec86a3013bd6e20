"""Where the checkpoints of a job are: ``<job dir>/global_step_<N>/`` folders, the one-line
:class:`CheckpointError`, the write probe of a job dir."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from rft.errors import RftError

STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointError(RftError):
    """A checkpoint cannot be written or read."""


@dataclass
class Checkpoint:
    """A complete checkpoint on disk."""

    step: int
    path: str


def list_checkpoints(job_dir: str) -> list[Checkpoint]:
    """Complete checkpoints of a job, oldest first."""
    if not os.path.isdir(job_dir):
        return []
    found = []
    for name in os.listdir(job_dir):
        match = STEP_DIR.match(name)
        if match and os.path.isfile(os.path.join(job_dir, name, "state.json")):
            found.append(Checkpoint(int(match.group(1)), os.path.join(job_dir, name)))
    return sorted(found, key=lambda c: c.step)


def newest_checkpoint(job_dir: str) -> Checkpoint | None:
    """The newest complete checkpoint of a job, or ``None``."""
    found = list_checkpoints(job_dir)
    return found[-1] if found else None


def check_writable(job_dir: str) -> None:
    """Create ``job_dir`` and prove it is writable, or raise a one-line error naming it."""
    try:
        os.makedirs(job_dir, exist_ok=True)
        probe = os.path.join(job_dir, f".write_test.{os.getpid()}")  # explore and train
        # processes of one run probe the same job dir at once
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("ok")
        os.remove(probe)
    except OSError as exc:
        raise CheckpointError(f"checkpoint_root_dir: cannot write to {job_dir}: "
                              f"{exc.strerror or exc}") from exc


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (empty when it has none)."""
    text = str(exc)
    return text.splitlines()[0] if text else ""
