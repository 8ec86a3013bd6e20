"""The one line of a failed checkpoint save: whether it ran out of disk (whatever layer
noticed it), the file it was writing and the bytes it needs, else the cause."""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any

import torch

from rft.checkpoint.hashing import file_sizes
from rft.checkpoint.layout import first_line, newest_checkpoint

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


def disk_full(exc: BaseException, job_dir: str) -> bool:
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


def failed_file(exc: BaseException, partial: str) -> list[str]:
    """The file under ``partial`` an ``OSError`` in the chain names (relative), if any."""
    for link in _chain(exc):
        name = getattr(link, "filename", None) if isinstance(link, OSError) else None
        if isinstance(name, str) and os.path.abspath(name).startswith(
                os.path.abspath(partial) + os.sep):
            return [os.path.relpath(os.path.abspath(name), os.path.abspath(partial))]
    return []


def tree_bytes(folder: str) -> int:
    """Bytes in the files under ``folder`` (0 when it is not there)."""
    return sum(file_sizes(folder).values()) if os.path.isdir(folder) else 0


def tensor_bytes(obj: Any) -> int:
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


def disk_full_line(job_dir: str, final: str, writing: list[str], least: int) -> str:
    """The one line of a save that filled the disk: the checkpoint, the file being
    written (when rft was writing it), the bytes needed — the previous checkpoint's size
    (the same trainer writes the same files), else ``least`` (what was written before the
    disk filled, or the tensors to save if more) — and the bytes free now (the partial
    checkpoint removed)."""
    previous = newest_checkpoint(job_dir)
    if previous is not None:
        needed = f"needs about {human(tree_bytes(previous.path))}"
    else:
        needed = f"needs at least {human(least)}"
    try:
        free = f", {human(shutil.disk_usage(job_dir).free)} free"
    except OSError:
        free = ""
    what = f" {writing[0]}" if writing else ""
    return (f"checkpoint {final}: cannot write{what}: {_DISK_FULL_TEXT} "
            f"(the checkpoint {needed}{free})")


def human(size: int) -> str:
    """``size`` bytes as ``812 bytes`` / ``3.4 KB`` / ``2.1 MB`` / ``1.5 GB`` (powers of 1024)."""
    if size < 1024:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def cause(exc: BaseException) -> str:
    """One line for a failed write: the OS's words for an ``OSError`` anywhere in the chain
    ("No space left on device"), else the exception's first line."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.strerror or os.strerror(seen.errno)
        seen = seen.__cause__ or seen.__context__
    return f"{type(exc).__name__}: {first_line(exc)}"
