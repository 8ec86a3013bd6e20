"""One versioned record of a run's progress, written and read by every mode.

A checkpoint's ``state.json`` (modes ``colocate``, ``train``, ``both``) and the explorer's
``explorer_state.json`` (mode ``explore``) hold a :class:`RunState`: the step, the model
version, the task selectors, the engine's next seed, the random generators, the counts of
experiences written and read, the evaluations, and the buffers' states a train-only stage
keeps. A mode fills in what it has; the rest keeps its default.

``version`` says which layout wrote it. This rft reads :data:`RUN_STATE_VERSION` and the
layout before the field existed (version 1: the same keys, no ``version``; read as it
is). A state of any other version is refused with one line naming the file
(:class:`RunStateVersionError`) — checked by :func:`check_resumable` before a stage
builds anything, so a resumed run fails at once and nothing on disk is touched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from rft.checkpoint import CHECKSUMS_KEY, FILES_KEY
from rft.errors import RftError

RUN_STATE_VERSION = 2
"""The layout this rft writes."""

READABLE_VERSIONS = (1, 2)
"""Layouts this rft reads: 1 is the one before ``version`` was written (same keys)."""

EXPLORER_STATE_FILE = "explorer_state.json"
"""Mode ``explore``: the explorer's run state, in the job dir."""

CHECKPOINT_KEYS = frozenset({FILES_KEY, CHECKSUMS_KEY})
"""What :func:`rft.checkpoint.save_checkpoint` adds to a checkpoint's ``state.json``
beside the run state (its files' sizes and digests)."""

_STEP_DIR = re.compile(r"^global_step_(\d+)$")


class RunStateVersionError(RftError):
    """A run state written by a layout this rft does not read."""


@dataclass
class RunState:
    """What a resumed stage needs to go on as the uninterrupted one would have."""

    version: int = RUN_STATE_VERSION
    """The layout that wrote it (:data:`RUN_STATE_VERSION` when written by this rft)."""
    step: int = 0
    """Last step done."""
    model_version: int = 0
    """Checkpoint step whose weights the engine held (= ``step`` in a checkpoint)."""
    selectors: list[dict[str, Any]] = field(default_factory=list)
    """Task-selector states, one per training taskset."""
    experiences_written: int = 0
    """Experiences the explorer wrote to the buffer (every run of the job)."""
    experiences_read: int = 0
    """Experiences the trainer read from the buffer (every run of the job)."""
    engine_seed: int | None = None
    """The rollout engine's next sampling seed (:meth:`~rft.engines.engine.InferenceEngine.
    seed_state`; ``None``: none recorded)."""
    rng: dict[str, Any] | None = None
    """The random generators (:func:`rft.checkpoint.rng_state`) of the process that wrote
    the state: the trainer's in a checkpoint, the explorer's in ``explorer_state.json``."""
    explorer_rng: dict[str, Any] | None = None
    """Mode ``both``: the explorer actor's random generators after its step."""
    eval_before: dict[str, float] = field(default_factory=dict)
    """Evaluation of the initial model (kept for the summary)."""
    eval_after: dict[str, float] | None = None
    """Evaluation after the last step, once the stage is done."""
    auxiliary_buffers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Auxiliary buffers' states by name (mode ``colocate``)."""
    dataset: dict[str, Any] | None = None
    """A train-only stage's offline dataset state (its position)."""
    held_experiences: list[dict[str, Any]] = field(default_factory=list)
    """Experiences the trainer read but holds back until their group is complete
    (``synchronizer.streaming_batches``, :mod:`rft.buffer.streaming`), encoded
    (:func:`rft.buffer.experience_codec.experience_to_dict`)."""

    carried_tasks: list[list[Any]] = field(default_factory=list)
    """Mode ``both`` fully async (:mod:`rft.rollout.carry_over`): the tasks in flight after
    the explorer's step, ``[taskset, index, first_run, repeat_times, step, version]`` each
    (:meth:`rft.rollout.carry_over.Unit.to_state`); a resumed run submits them again first
    (their experiences were not written)."""

    def explorer_part(self) -> RunState:
        """The explorer's fields alone (mode ``both``: what its actor restores and the next
        checkpoint keeps of it); the rest at their defaults."""
        return RunState(step=self.step, selectors=self.selectors, engine_seed=self.engine_seed,
                        explorer_rng=self.explorer_rng,
                        experiences_written=self.experiences_written,
                        carried_tasks=self.carried_tasks)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written (every field)."""
        return asdict(self)

    @staticmethod
    def from_dict(saved: dict[str, Any], where: str) -> RunState:
        """Read a written state (``where``: its file, for errors). Keys of the checkpoint
        around it (:data:`CHECKPOINT_KEYS`) are left out.

        :raises RunStateVersionError: written by a layout this rft does not read.
        :raises RftError: a field of the wrong kind or unknown (one line naming it).
        """
        check_version(saved, where)
        known = {f.name for f in dataclasses.fields(RunState)}
        unknown = sorted(set(saved) - known - CHECKPOINT_KEYS)
        if unknown:
            raise RftError(f"{where}: run state has unknown field(s) {', '.join(unknown)}")
        values = {key: value for key, value in saved.items() if key in known}
        values["version"] = RUN_STATE_VERSION  # read: from now on it is this layout
        state = RunState(**values)
        if not isinstance(state.step, int) or not isinstance(state.selectors, list):
            raise RftError(f"{where}: run state has a step or selectors of the wrong kind")
        return state

    @staticmethod
    def read(path: str, what: str) -> RunState | None:
        """The state in file ``path``, ``None`` when there is none (``what`` names it in
        errors, e.g. ``explorer state``).

        :raises RftError: a corrupt file (one line naming it), or one of another layout.
        """
        if not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as handle:
                saved = json.load(handle)
        except (OSError, ValueError) as exc:
            raise RftError(f"{what} {path} is corrupt: {exc}") from exc
        if not isinstance(saved, dict):
            raise RftError(f"{what} {path} is corrupt: not a JSON object")
        return RunState.from_dict(saved, path)

    def write(self, path: str) -> None:
        """Replace file ``path`` atomically (synced to disk first).

        :raises RftError: it cannot be written (one line: the file and the cause).
        """
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(self.to_dict(), handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(path + ".tmp", path)
        except OSError as exc:
            raise RftError(f"run state {path}: cannot write: {exc.strerror or exc}") from exc


def check_version(saved: dict[str, Any], where: str) -> None:
    """Refuse a state whose ``version`` this rft does not read (none: version 1).

    :raises RunStateVersionError: ``rft: <where>: run state written by version X, this rft
        reads version Y — …``.
    """
    version = saved.get("version", 1)
    if version not in READABLE_VERSIONS:
        raise RunStateVersionError(
            f"{where}: run state written by version {version}, this rft reads version "
            f"{RUN_STATE_VERSION} — resume it with the rft that wrote it, or start afresh "
            "(continue_from_checkpoint: false, or another project/name)")


def newest_state_file(job_dir: str) -> str | None:
    """``state.json`` of the job's newest checkpoint folder that has one (``None``: no
    checkpoint)."""
    if not os.path.isdir(job_dir):
        return None
    steps = sorted((int(m.group(1)), name) for name in os.listdir(job_dir)
                   if (m := _STEP_DIR.match(name)))
    for _, name in reversed(steps):
        path = os.path.join(job_dir, name, "state.json")
        if os.path.isfile(path):
            return path
    return None


def check_resumable(job_dir: str, continuing: bool, *, explorer_file: bool = False) -> None:
    """Before a stage builds anything: when ``continuing``, the run state it will go on
    from (the newest checkpoint's, or with ``explorer_file`` the explorer's
    ``explorer_state.json``) is of a layout this rft reads. A file that does not parse is
    left to the resume itself (which skips or names it).

    :raises RunStateVersionError: one line naming the file and both versions.
    """
    if not continuing:
        return
    path = (os.path.join(job_dir, EXPLORER_STATE_FILE) if explorer_file
            else newest_state_file(job_dir))
    if path is None or not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        return
    if isinstance(saved, dict):
        check_version(saved, path)


__all__ = ["EXPLORER_STATE_FILE", "READABLE_VERSIONS", "RUN_STATE_VERSION", "RunState",
           "RunStateVersionError", "check_resumable", "check_version", "newest_state_file"]
