"""Checkpoints of a run: ``<job dir>/global_step_<N>/`` written atomically.

A checkpoint folder holds ``trainer.pt`` (the trainer's state), ``state.json`` (step,
model version, task-selector states, counters) and optionally ``hf/`` (the actor in
Hugging Face format). It is written under a temporary name and renamed when complete,
so a crash never leaves a half-written ``global_step_N``; resuming picks the newest
complete one. ``max_checkpoints_to_keep`` prunes the oldest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

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


def save_checkpoint(job_dir: str, step: int, trainer_state: dict[str, Any],
                    state: dict[str, Any], *, max_to_keep: int | None = None,
                    save_hf: Callable[[str], None] | None = None) -> str:
    """Write ``global_step_<step>`` atomically; prune to ``max_to_keep``; return its path."""
    final = os.path.join(job_dir, f"global_step_{step}")
    partial = final + ".partial"
    try:
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial)
        torch.save(trainer_state, os.path.join(partial, "trainer.pt"))
        if save_hf is not None:
            save_hf(os.path.join(partial, "hf"))
        with open(os.path.join(partial, "state.json"), "w", encoding="utf-8") as handle:
            json.dump({**state, "step": step}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(partial, final)
    except OSError as exc:
        raise CheckpointError(f"checkpoint {final}: cannot write: {exc.strerror or exc}") from exc
    if max_to_keep is not None:
        for old in list_checkpoints(job_dir)[:-max_to_keep]:
            shutil.rmtree(old.path, ignore_errors=True)
    return final


def load_checkpoint(checkpoint: Checkpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(trainer_state, state)`` of a checkpoint.

    :raises CheckpointError: a missing or corrupt file (one line naming it).
    """
    state_path = os.path.join(checkpoint.path, "state.json")
    trainer_path = os.path.join(checkpoint.path, "trainer.pt")
    try:
        with open(state_path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {state_path} is corrupt: {exc}") from exc
    try:
        trainer_state = torch.load(trainer_path, weights_only=False, map_location="cpu")
    except Exception as exc:  # torch raises several types for truncated files
        raise CheckpointError(f"checkpoint {trainer_path} is corrupt or unreadable: "
                              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    return trainer_state, state


def check_writable(job_dir: str) -> None:
    """Create ``job_dir`` and prove it is writable, or raise a one-line error naming it."""
    try:
        os.makedirs(job_dir, exist_ok=True)
        probe = os.path.join(job_dir, ".write_test")
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("ok")
        os.remove(probe)
    except OSError as exc:
        raise CheckpointError(f"checkpoint_root_dir: cannot write to {job_dir}: "
                              f"{exc.strerror or exc}") from exc
