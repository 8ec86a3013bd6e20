"""The size and SHA-256 of every file of a checkpoint: hashed as rft writes it
(:class:`HashingFile`), listed by writers that hashed their own (:data:`DIGESTS_SUFFIX`),
and checked again before a checkpoint is read."""

from __future__ import annotations

import hashlib
import io
import json
import os
from typing import IO, Any, cast

import torch

from rft.checkpoint.layout import Checkpoint, CheckpointError

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
sharded trainer: :mod:`rft.trainer.sharded_checkpoint`);
:func:`rft.checkpoint.save.save_checkpoint` takes them instead of reading those files back."""


def write_digests(folder: str, name: str, digests: dict[str, str]) -> None:
    """Write ``folder/<name>.sha256.json`` (see :data:`DIGESTS_SUFFIX`)."""
    with open(os.path.join(folder, name + DIGESTS_SUFFIX), "w", encoding="utf-8") as handle:
        json.dump(digests, handle)


def written_digests(folder: str) -> dict[str, str]:
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


def file_sizes(folder: str) -> dict[str, int]:
    """``{path relative to folder: size in bytes}`` of every file under ``folder``."""
    sizes: dict[str, int] = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            sizes[os.path.relpath(path, folder)] = os.path.getsize(path)
    return sizes


def check_file_sizes(checkpoint: Checkpoint, files: dict[str, Any]) -> None:
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


def check_file_digests(checkpoint: Checkpoint, checksums: dict[str, Any]) -> None:
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
