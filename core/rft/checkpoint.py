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
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, cast

import torch

from rft.adapter import AdapterWeights, LoraSpec, is_adapter_folder
from rft.errors import RftError
from rft.tensor_wire import NamedTensors

STEP_DIR = re.compile(r"^global_step_(\d+)$")

log = logging.getLogger("rft.checkpoint")


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
    :func:`load_extra`).

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
        files = _file_sizes(partial)
        digests = {**_written_digests(partial), **digests}
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
        written, full = _tree_bytes(partial), _disk_full(exc, job_dir)  # before the removal
        shutil.rmtree(partial, ignore_errors=True)
        if full:
            least = max(written, _tensor_bytes([trainer_state, extra]))
            writing = writing or _failed_file(exc, partial)
            raise CheckpointError(_disk_full_line(job_dir, final, writing, least)) from exc
        raise CheckpointError(f"checkpoint {final}: cannot write: {_cause(exc)}") from exc
    if max_to_keep is not None:
        for old in list_checkpoints(job_dir)[:-max_to_keep]:
            _remove(old.path)
    return final


FILES_KEY = "files"
"""``state.json``'s list of the checkpoint's other files: ``{relative path: bytes}``."""

CHECKSUMS_KEY = "sha256"
"""``state.json``'s SHA-256 of each of those files: ``{relative path: hex digest}``."""

_CHUNK = 1 << 20
"""Bytes read at a time when a file is hashed."""


class HashingFile(io.RawIOBase):
    """A file opened for writing that hashes (SHA-256) the bytes as they pass: what
    ``torch.save`` streams into it is hashed without reading the file again. An
    ``OSError`` of the write (``ENOSPC``) stays in the chain of whatever ``torch.save``
    raises (its ``unexpected pos … vs …``)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.digest = hashlib.sha256()
        self._file = open(path, "wb")  # noqa: SIM115 (closed in close())

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._file.tell()

    def fileno(self) -> int:
        return self._file.fileno()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._file.write(view)
        self.digest.update(view)
        return len(view)

    def flush(self) -> None:
        if not self._file.closed:  # (DCP closes its streams itself)
            self._file.flush()

    def close(self) -> None:
        if not self.closed:
            try:
                super().close()  # flushes
            finally:
                self._file.close()


def save_hashed(obj: Any, folder: str, name: str, writing: list[str] | None = None) -> str:
    """``torch.save(obj)`` to ``folder/name``; return the file's SHA-256 (hex), hashed as
    it was written. ``writing`` (when given) holds ``name`` while the file is written."""
    if writing is not None:
        writing[:] = [name]
    with HashingFile(os.path.join(folder, name)) as handle:
        # a raw binary stream: IO[bytes] in all but name (typeshed's RawIOBase is not one)
        torch.save(obj, cast("IO[bytes]", handle))
        handle.flush()
        return handle.digest.hexdigest()


DIGESTS_SUFFIX = ".sha256.json"
"""A file ``<anything>.sha256.json`` in a checkpoint, ``{file name: SHA-256}``, gives the
digests of files of its folder that a writer hashed as it wrote them (each rank of a
sharded trainer: :mod:`rft.trainer.sharded_checkpoint`); :func:`save_checkpoint` takes
them instead of reading those files back."""


def write_digests(folder: str, name: str, digests: dict[str, str]) -> None:
    """Write ``folder/<name>.sha256.json`` (see :data:`DIGESTS_SUFFIX`)."""
    with open(os.path.join(folder, name + DIGESTS_SUFFIX), "w", encoding="utf-8") as handle:
        json.dump(digests, handle)


def _written_digests(folder: str) -> dict[str, str]:
    """``{path relative to folder: SHA-256}`` from the digest files under ``folder``."""
    found: dict[str, str] = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            if name.endswith(DIGESTS_SUFFIX):
                with open(os.path.join(parent, name), encoding="utf-8") as handle:
                    listed = json.load(handle)
                base = os.path.relpath(parent, folder)
                found.update({os.path.normpath(os.path.join(base, n)): str(d)
                              for n, d in listed.items()})
    return found


def file_digest(path: str) -> str:
    """The SHA-256 (hex) of the file at ``path``, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _file_sizes(folder: str) -> dict[str, int]:
    """``{path relative to folder: size in bytes}`` of every file under ``folder``."""
    sizes: dict[str, int] = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            sizes[os.path.relpath(path, folder)] = os.path.getsize(path)
    return sizes


def _check_file_sizes(checkpoint: Checkpoint, files: dict[str, Any]) -> None:
    """Every file ``state.json`` lists is there with its size (a trainer's own files, the
    ``hf/`` export, DCP shards: a truncated or missing one makes the checkpoint
    unreadable before anything reads it)."""
    for name, size in sorted(files.items()):
        path = os.path.join(checkpoint.path, name)
        try:
            found = os.path.getsize(path)
        except OSError:
            raise CheckpointError(f"checkpoint {path} is corrupt: missing") from None
        if found != size:
            raise CheckpointError(f"checkpoint {path} is corrupt: {found} bytes, {size} "
                                  "written (truncated or overwritten)")


def _check_file_digests(checkpoint: Checkpoint, checksums: dict[str, Any]) -> None:
    """Every file ``state.json`` hashed has that SHA-256 still (a file changed in place,
    its size kept — a bad sector, a stray write — is found before anything loads it)."""
    for name, expected in sorted(checksums.items()):
        path = os.path.join(checkpoint.path, name)
        try:
            found = file_digest(path)
        except OSError as exc:
            raise CheckpointError(f"checkpoint {path} is corrupt: cannot read: "
                                  f"{exc.strerror or exc}") from None
        if found != expected:
            raise CheckpointError(f"checkpoint {path} is corrupt: its content changed since "
                                  f"it was written (sha256 {found[:12]}…, {str(expected)[:12]}… "
                                  "written)")


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


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes / contexts, outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


_DISK_FULL_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"
_TORCH_SHORT_WRITE = "unexpected pos"
"""What torch's zip writer says when a write to a path came up short (its C++ stream
hides the ``errno``)."""

_LOW_SPACE_BYTES = 1 << 20
"""Free bytes under which a short write (:data:`_TORCH_SHORT_WRITE`) means a full disk."""


def _disk_full(exc: BaseException, job_dir: str) -> bool:
    """Whether a failed save ran out of disk: ``ENOSPC`` anywhere in the chain, its words
    in a message (safetensors' ``IoError``, a rank's error), or torch's short write with
    (nearly) no space left on the job's file system (checked before the partial
    checkpoint is removed)."""
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno == errno.ENOSPC:
            return True
        if _DISK_FULL_TEXT in str(link):  # safetensors' "… (os error 28)", DCP's ranks
            return True
    if any(_TORCH_SHORT_WRITE in str(link) for link in _chain(exc)):
        try:
            return shutil.disk_usage(job_dir).free < _LOW_SPACE_BYTES
        except OSError:
            return False
    return False


def _failed_file(exc: BaseException, partial: str) -> list[str]:
    """The file under ``partial`` an ``OSError`` in the chain names (relative), if any."""
    for link in _chain(exc):
        name = getattr(link, "filename", None) if isinstance(link, OSError) else None
        if isinstance(name, str) and os.path.abspath(name).startswith(
                os.path.abspath(partial) + os.sep):
            return [os.path.relpath(os.path.abspath(name), os.path.abspath(partial))]
    return []


def _tree_bytes(folder: str) -> int:
    """Bytes in the files under ``folder`` (0 when it is not there)."""
    return sum(_file_sizes(folder).values()) if os.path.isdir(folder) else 0


def _tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors in ``obj`` (nested dicts, lists, tuples), each storage once:
    a lower bound of what ``torch.save`` writes."""
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


def _disk_full_line(job_dir: str, final: str, writing: list[str], least: int) -> str:
    """The one line of a save that filled the disk: the checkpoint, the file being
    written (when rft was writing it), the bytes needed — the previous checkpoint's size
    (the same trainer writes the same files), else ``least`` (what was written before the
    disk filled, or the tensors to save if more) — and the bytes free now (the partial
    checkpoint removed)."""
    previous = newest_checkpoint(job_dir)
    if previous is not None:
        needed = f"needs about {_human(_tree_bytes(previous.path))}"
    else:
        needed = f"needs at least {_human(least)}"
    try:
        free = f", {_human(shutil.disk_usage(job_dir).free)} free"
    except OSError:
        free = ""
    what = f" {writing[0]}" if writing else ""
    return (f"checkpoint {final}: cannot write{what}: {_DISK_FULL_TEXT} "
            f"(the checkpoint {needed}{free})")


def _human(size: int) -> str:
    """``size`` bytes as ``812 bytes`` / ``3.4 KB`` / ``2.1 MB`` / ``1.5 GB`` (powers of 1024)."""
    if size < 1024:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def _cause(exc: BaseException) -> str:
    """One line for a failed write: the OS's words for an ``OSError`` anywhere in the chain
    ("No space left on device"), else the exception's first line."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.strerror or os.strerror(seen.errno)
        seen = seen.__cause__ or seen.__context__
    return f"{type(exc).__name__}: {_first_line(exc)}"


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
        _check_file_sizes(checkpoint, state[FILES_KEY])
    if isinstance(state.get(CHECKSUMS_KEY), dict):  # (nor, before 0.x, checksums)
        _check_file_digests(checkpoint, state[CHECKSUMS_KEY])
    try:
        trainer_state = torch.load(trainer_path, weights_only=False, map_location="cpu")
    except Exception as exc:  # torch raises several types for truncated files
        raise CheckpointError(f"checkpoint {trainer_path} is corrupt or unreadable: "
                              f"{type(exc).__name__}: {_first_line(exc)}") from exc
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
                              f"{type(exc).__name__}: {_first_line(exc)}") from exc


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


def rng_state() -> dict[str, Any]:
    """Every process-wide random generator's state, JSON-able (see the module docstring)."""
    import numpy as np

    version, internal, gauss = random.getstate()
    numpy_state = np.random.get_state()
    assert isinstance(numpy_state, tuple)  # legacy=True, the default: the tuple form
    kind, keys, pos, has_gauss, cached = numpy_state
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": _b64(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s result (parts it lacks are left as they are)."""
    import numpy as np

    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "torch" in state:
        torch.set_rng_state(_unb64(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


def _b64(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.numpy().tobytes()).decode("ascii")


def _unb64(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


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
    if isinstance(trainer_state, dict) and trainer_state.get("format") == SHARDED_FORMAT:
        return read_sharded_actor(os.path.join(checkpoint.path, str(trainer_state["dir"])))
    actor = trainer_state.get("actor") if isinstance(trainer_state, dict) else None
    if not isinstance(actor, dict):
        raise CheckpointError(f"checkpoint {checkpoint.path}: neither hf/ nor an 'actor' entry "
                              "in trainer.pt holds the actor's weights")
    return actor


SHARDED_FORMAT = "rft-sharded"
"""``trainer.pt``'s ``format`` when a sharded trainer wrote the checkpoint: its state is in
DCP files (:mod:`rft.trainer.sharded_checkpoint`)."""


def read_sharded_actor(directory: str) -> dict[str, torch.Tensor]:
    """The actor's whole tensors (Hugging Face naming) from the DCP files a sharded trainer
    wrote to ``directory``, read in this process (an engine loading a checkpoint that has
    no ``hf/`` export).

    :raises CheckpointError: unreadable files, or a LoRA run's state (its DCP files hold
        the adapter only: the explorer needs the ``hf/`` export).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    try:
        metadata = dcp.FileSystemReader(directory).read_metadata()
        actor = {name.removeprefix("actor."): torch.empty(meta.size, dtype=meta.properties.dtype)
                 for name, meta in metadata.state_dict_metadata.items()
                 if name.startswith("actor.") and isinstance(meta, TensorStorageMetadata)}
        if any(".lora_" in name for name in actor):
            raise CheckpointError(f"checkpoint {directory}: a LoRA run's sharded state holds "
                                  "the adapter only; the engine needs the hf/ export")
        dcp.load({"actor": actor}, checkpoint_id=directory, no_dist=True)
    except CheckpointError:
        raise
    except (Exception, dcp.api.CheckpointException) as exc:  # (the latter: a BaseException)
        raise CheckpointError(f"checkpoint {directory}: cannot read the sharded actor: "
                              f"{type(exc).__name__}: {_first_line(exc)}") from exc
    return actor


def load_sync_weights(checkpoint: Checkpoint) -> dict[str, torch.Tensor] | AdapterWeights:
    """What an engine loads from a checkpoint: the adapter of a LoRA run, else the actor's
    weights (:func:`load_actor_weights`).

    :raises CheckpointError: nothing readable (one line naming the folder).
    """
    hf_dir = os.path.join(checkpoint.path, "hf")
    try:
        if is_adapter_folder(hf_dir):
            return AdapterWeights.load(hf_dir, key=f"checkpoint {checkpoint.path}")
        if not os.path.isdir(hf_dir):
            trainer_state = torch.load(os.path.join(checkpoint.path, "trainer.pt"),
                                       weights_only=False, map_location="cpu")
            if isinstance(trainer_state, dict) and isinstance(trainer_state.get("lora"), dict):
                spec = LoraSpec.from_plain(trainer_state["lora"])
                actor = trainer_state.get("actor") or {}
                return AdapterWeights(spec, NamedTensors(
                    (name.replace(".default.", "."), tensor) for name, tensor in actor.items()))
    except RftError as exc:
        raise CheckpointError(str(exc)) from exc
    except Exception as exc:  # missing (pruned meanwhile), truncated or foreign files
        raise CheckpointError(f"checkpoint {checkpoint.path}: cannot read the actor's weights: "
                              f"{type(exc).__name__}: {_first_line(exc)}") from exc
    return load_actor_weights(checkpoint)


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
