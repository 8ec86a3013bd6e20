"""Checkpoints of a run: ``<job dir>/global_step_<N>/`` written atomically.

A checkpoint folder holds ``trainer.pt`` (the trainer's state), ``state.json`` (step,
model version, task-selector states, counters) and optionally ``hf/`` (the actor in
Hugging Face format). It is written under a temporary name and renamed when complete,
so a crash never leaves a half-written ``global_step_N`` and another process (an
``explore`` or ``bench`` run) never sees one; resuming picks the newest complete one.
``max_checkpoints_to_keep`` prunes the oldest.

:func:`load_actor_weights` reads the actor's weights of a checkpoint for an inference
engine: from ``hf/`` when it is there (safetensors, sharded or not), else from the
``actor`` entry of ``trainer.pt``.
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


def newest_checkpoint(job_dir: str) -> Checkpoint | None:
    """The newest complete checkpoint of a job, or ``None``."""
    found = list_checkpoints(job_dir)
    return found[-1] if found else None


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
        probe = os.path.join(job_dir, f".write_test.{os.getpid()}")  # explore and train
        # processes of one run probe the same job dir at once
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("ok")
        os.remove(probe)
    except OSError as exc:
        raise CheckpointError(f"checkpoint_root_dir: cannot write to {job_dir}: "
                              f"{exc.strerror or exc}") from exc


def load_actor_weights(checkpoint: Checkpoint) -> dict[str, torch.Tensor]:
    """The actor's weights of a checkpoint in Hugging Face naming (see the module docstring).

    :raises CheckpointError: no readable weights (one line naming the folder).
    """
    hf_dir = os.path.join(checkpoint.path, "hf")
    try:
        if os.path.isdir(hf_dir):
            return _read_hf_weights(hf_dir)
        trainer_state = torch.load(os.path.join(checkpoint.path, "trainer.pt"),
                                   weights_only=False, map_location="cpu")
    except CheckpointError:
        raise
    except Exception as exc:  # missing (pruned meanwhile), truncated or foreign files
        raise CheckpointError(f"checkpoint {checkpoint.path}: cannot read the actor's weights: "
                              f"{type(exc).__name__}: {_first_line(exc)}") from exc
    actor = trainer_state.get("actor") if isinstance(trainer_state, dict) else None
    if not isinstance(actor, dict):
        raise CheckpointError(f"checkpoint {checkpoint.path}: neither hf/ nor an 'actor' entry "
                              "in trainer.pt holds the actor's weights")
    return actor


def _read_hf_weights(hf_dir: str) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face model folder (``*.safetensors``, else ``*.bin``)."""
    from safetensors.torch import load_file

    names = sorted(os.listdir(hf_dir))
    shards = [n for n in names if n.endswith(".safetensors")]
    weights: dict[str, torch.Tensor] = {}
    if shards:
        for shard in shards:
            weights.update(load_file(os.path.join(hf_dir, shard)))
        return weights
    bins = [n for n in names if n.endswith(".bin") and n.startswith("pytorch_model")]
    for shard in bins:
        weights.update(torch.load(os.path.join(hf_dir, shard), map_location="cpu",
                                  weights_only=True))
    if not weights:
        raise CheckpointError(f"checkpoint {hf_dir}: no *.safetensors or pytorch_model*.bin")
    return weights


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""
