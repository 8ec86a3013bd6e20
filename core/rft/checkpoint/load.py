"""Reading a checkpoint back: its state, its extra objects, and the newest readable one of
a job (unreadable newer ones moved aside with a warning)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from rft.checkpoint.hashing import (
    CHECKSUMS_KEY,
    FILES_KEY,
    check_file_digests,
    check_file_sizes,
)
from rft.checkpoint.layout import Checkpoint, CheckpointError, first_line, list_checkpoints

log = logging.getLogger("rft.checkpoint")


def load_checkpoint(checkpoint: Checkpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(trainer_state, state)`` of a checkpoint.

    :raises CheckpointError: a missing or corrupt file (one line naming it).
    """
    state_path = os.path.join(checkpoint.path, "state.json")
    trainer_path = os.path.join(checkpoint.path, "trainer.pt")
    try:
        with open(state_path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {state_path} is corrupt: {exc}") from exc
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CheckpointError(f"checkpoint {state_path} is corrupt: no step")
    if isinstance(state.get(FILES_KEY), dict):  # (checkpoints of older rft have no list)
        check_file_sizes(checkpoint, state[FILES_KEY])
    if isinstance(state.get(CHECKSUMS_KEY), dict):  # (nor, before 0.x, checksums)
        check_file_digests(checkpoint, state[CHECKSUMS_KEY])
    try:
        trainer_state = torch.load(trainer_path, weights_only=False, map_location="cpu")
    except Exception as exc:  # torch raises several types for truncated files
        raise CheckpointError(f"checkpoint {trainer_path} is corrupt or unreadable: "
                              f"{type(exc).__name__}: {first_line(exc)}") from exc
    return trainer_state, state


def load_extra(checkpoint: Checkpoint, name: str) -> Any:
    """The object saved as ``extra[name]`` (``None`` when the checkpoint has none).

    :raises CheckpointError: the file is corrupt (one line naming it).
    """
    path = os.path.join(checkpoint.path, f"{name}.pt")
    if not os.path.exists(path):
        return None
    try:
        return torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: "
                              f"{type(exc).__name__}: {first_line(exc)}") from exc


@dataclass
class LoadedCheckpoint:
    """A checkpoint read whole: what :func:`newest_readable_checkpoint` returns."""

    checkpoint: Checkpoint
    trainer_state: dict[str, Any]
    state: dict[str, Any]
    extra: dict[str, Any]
    skipped: list[str]
    """Newer checkpoints that could not be read (moved aside), one line each."""

    @property
    def step(self) -> int:
        return self.checkpoint.step


def newest_readable_checkpoint(job_dir: str, extra: tuple[str, ...] = ()
                               ) -> LoadedCheckpoint | None:
    """The newest checkpoint whose files all read (``trainer.pt``, ``state.json`` and the
    ``extra`` names), read; ``None`` when the job has no checkpoint.

    A newer one that cannot be read is renamed ``global_step_<N>.corrupt`` (so that no
    explorer or bench run takes it, and a resumed run can write ``global_step_<N>`` again)
    and named in a warning.

    :raises CheckpointError: no checkpoint of the job can be read (the newest one's error).
    """
    failed: list[tuple[Checkpoint, CheckpointError]] = []
    for checkpoint in reversed(list_checkpoints(job_dir)):
        try:
            trainer_state, state = load_checkpoint(checkpoint)
            extras = {name: load_extra(checkpoint, name) for name in extra}
        except CheckpointError as exc:
            failed.append((checkpoint, exc))
            continue
        skipped = []
        for bad, error in failed:
            aside = _move_aside(bad.path)
            line = f"{error}; skipped{f' (moved to {aside})' if aside else ''}"
            skipped.append(line)
            log.warning("resume: %s", line)
        if skipped:
            log.warning("resume: taking %s, the newest readable checkpoint", checkpoint.path)
        return LoadedCheckpoint(checkpoint, trainer_state, state, extras, skipped)
    if failed:  # none is readable: left as they are, for the user to look at
        raise failed[0][1]
    return None


def _move_aside(path: str) -> str | None:
    target, n = path + ".corrupt", 1
    while os.path.exists(target):
        n += 1
        target = f"{path}.corrupt{n}"
    try:
        os.replace(path, target)
    except OSError:
        return None
    return target
