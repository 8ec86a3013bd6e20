"""Writing ``global_step_<N>`` atomically: under a temporary name, every file synced,
renamed when complete; pruning to ``max_checkpoints_to_keep``."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from typing import Any

from rft.checkpoint.disk_full import (
    cause,
    disk_full,
    disk_full_line,
    failed_file,
    tensor_bytes,
    tree_bytes,
)
from rft.checkpoint.hashing import (
    CHECKSUMS_KEY,
    FILES_KEY,
    file_digest,
    file_sizes,
    save_hashed,
    written_digests,
)
from rft.checkpoint.layout import CheckpointError, list_checkpoints

def save_checkpoint(job_dir: str, step: int,
                    trainer_state: dict[str, Any] | Callable[[str], dict[str, Any]],
                    state: dict[str, Any], *, max_to_keep: int | None = None,
                    save_hf: Callable[[str], None] | None = None,
                    extra: dict[str, Any] | None = None) -> str:
    """Write ``global_step_<step>`` atomically; prune to ``max_to_keep``; return its path.

    ``trainer_state``: what ``trainer.pt`` holds, or a function called with the temporary
    folder that writes the trainer's own files there and returns it
    (:meth:`rft.trainer.base.Trainer.write_checkpoint`).
    ``extra``: more objects to keep, each saved as ``<name>.pt`` (read back with
    :func:`rft.checkpoint.load.load_extra`).

    :raises CheckpointError: the folder cannot be written (one line: the folder and the
        cause); nothing of the new checkpoint is left behind.
    """
    final = os.path.join(job_dir, f"global_step_{step}")
    partial = final + ".partial"
    writing: list[str] = []  # the file rft is writing (for a disk-full message)
    try:
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial)
        if callable(trainer_state):
            trainer_state = trainer_state(partial)
        digests = {"trainer.pt": save_hashed(trainer_state, partial, "trainer.pt", writing)}
        for name, value in (extra or {}).items():
            digests[f"{name}.pt"] = save_hashed(value, partial, f"{name}.pt", writing)
        writing.clear()
        if save_hf is not None:
            save_hf(os.path.join(partial, "hf"))
        files = file_sizes(partial)
        digests = {**written_digests(partial), **digests}
        checksums = {name: digests.get(name) or file_digest(os.path.join(partial, name))
                     for name in files}
        with open(os.path.join(partial, "state.json"), "w", encoding="utf-8") as handle:
            json.dump({**state, "step": step, FILES_KEY: files, CHECKSUMS_KEY: checksums},
                      handle)
        _sync_tree(partial)
        if os.path.exists(final):
            _remove(final)
        os.replace(partial, final)
        _sync_dir(job_dir)
    except Exception as exc:  # OSError, torch's RuntimeError, safetensors' errors, …
        written, full = tree_bytes(partial), disk_full(exc, job_dir)  # before the removal
        shutil.rmtree(partial, ignore_errors=True)
        if full:
            least = max(written, tensor_bytes([trainer_state, extra]))
            writing = writing or failed_file(exc, partial)
            raise CheckpointError(disk_full_line(job_dir, final, writing, least)) from exc
        raise CheckpointError(f"checkpoint {final}: cannot write: {cause(exc)}") from exc
    if max_to_keep is not None:
        for old in list_checkpoints(job_dir)[:-max_to_keep]:
            _remove(old.path)
    return final


def _remove(path: str) -> None:
    """Delete a checkpoint folder so that a crash midway never leaves a listed one: renamed
    out of the ``global_step_N`` namespace first."""
    doomed = path + ".deleting"
    try:
        os.replace(path, doomed)
    except OSError:
        doomed = path
    shutil.rmtree(doomed, ignore_errors=True)


def _sync_tree(root: str) -> None:
    """fsync every file under ``root`` and the folders (the rename publishes whole files)."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _sync_dir(folder)


def _sync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder
    finally:
        os.close(fd)
