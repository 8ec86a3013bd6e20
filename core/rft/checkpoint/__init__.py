"""Checkpoints of a run: ``<job dir>/global_step_<N>/`` written atomically.

A checkpoint folder holds ``trainer.pt`` (the trainer's state, or a marker of the files a
backend with its own layout wrote next to it:
:meth:`rft.trainer.base.Trainer.write_checkpoint`), ``state.json`` (step, model version,
task-selector states, counters, random-generator states, and the size of every other file
of the folder), optionally
``<name>.pt`` files for what the mode keeps besides (e.g. ``buffer.pt``: the experience
buffer's contents) and optionally ``hf/`` (the actor in Hugging Face format). It is
written under a temporary name, every file synced to disk, and renamed when complete, so
a crash (``kill -9``, a full disk) never leaves a half-written ``global_step_N`` and
another process (an ``explore`` or ``bench`` run) never sees one; a failed save removes
its temporary folder and raises one :class:`CheckpointError` line naming the folder and
the cause ("No space left on device"). ``max_checkpoints_to_keep`` prunes the oldest.

``state.json`` lists every other file of the folder with its size (``files``) and its
SHA-256 (``sha256``). The files rft writes itself (``trainer.pt``, ``<name>.pt``) are
hashed as their bytes stream to disk (:class:`HashingFile`), and so are the DCP files of a
sharded trainer (each rank lists its digests in a ``*.sha256.json`` file,
:data:`DIGESTS_SUFFIX`); the other files a trainer or the Hugging Face export wrote
(veRL's folders, ``hf/``) are read back once, from the page cache, right after they were
written.

Resuming takes the newest checkpoint that is complete *and readable*
(:func:`newest_readable_checkpoint`: every file there with the size and the SHA-256
``state.json`` lists, ``trainer.pt`` and ``state.json`` readable): one that cannot be read
— truncated, or changed in place with its size kept — is moved aside to
``global_step_<N>.corrupt`` with a warning naming it, and the next older one is used.

A save that fills the disk is one line naming the checkpoint, the file it was writing and
the bytes it needs (the size of the previous checkpoint, which the same trainer wrote),
whatever layer noticed it (torch's ``unexpected pos … vs …`` is such a disk-full error).

:func:`rng_state` / :func:`set_rng_state` capture and restore every process-wide random
generator (Python's ``random``, NumPy's, torch's CPU and CUDA ones) as JSON, so a resumed
run draws the same numbers as an uninterrupted one.

:func:`load_actor_weights` reads the actor's weights of a checkpoint for an inference
engine: from ``hf/`` when it is there (safetensors, sharded or not), else from the
``actor`` entry of ``trainer.pt``. :func:`load_sync_weights` is what an engine loads: the
LoRA adapter of a LoRA run (``hf/`` in peft's format, else ``trainer.pt``'s ``actor`` and
``lora`` entries), else the actor's weights.

The package's modules, one job each: :mod:`~rft.checkpoint.layout` (the folders of a job,
:class:`CheckpointError`), :mod:`~rft.checkpoint.hashing` (file sizes and SHA-256),
:mod:`~rft.checkpoint.save` (the atomic write), :mod:`~rft.checkpoint.disk_full` (the line
of a failed save), :mod:`~rft.checkpoint.load` (reading back, the newest readable one),
:mod:`~rft.checkpoint.rng` (random generators) and :mod:`~rft.checkpoint.weights` (what an
engine loads). Every public name is importable from :mod:`rft.checkpoint` itself.
"""

from __future__ import annotations

from rft.checkpoint.hashing import (
    CHECKSUMS_KEY,
    DIGESTS_SUFFIX,
    FILES_KEY,
    HashingFile,
    file_digest,
    save_hashed,
    write_digests,
)
from rft.checkpoint.layout import (
    STEP_DIR,
    Checkpoint,
    CheckpointError,
    check_writable,
    list_checkpoints,
    newest_checkpoint,
)
from rft.checkpoint.load import (
    LoadedCheckpoint,
    load_checkpoint,
    load_extra,
    newest_readable_checkpoint,
)
from rft.checkpoint.rng import rng_state, set_rng_state
from rft.checkpoint.save import save_checkpoint
from rft.checkpoint.weights import (
    SHARDED_FORMAT,
    load_actor_weights,
    load_sync_weights,
    read_sharded_actor,
)

__all__ = ["CHECKSUMS_KEY", "DIGESTS_SUFFIX", "FILES_KEY", "SHARDED_FORMAT", "STEP_DIR",
           "Checkpoint", "CheckpointError", "HashingFile", "LoadedCheckpoint",
           "check_writable", "file_digest", "list_checkpoints", "load_actor_weights",
           "load_checkpoint", "load_extra", "load_sync_weights", "newest_checkpoint",
           "newest_readable_checkpoint", "read_sharded_actor", "rng_state", "save_checkpoint",
           "save_hashed", "set_rng_state", "write_digests"]
