"""Creating the folders a run writes to (``<job dir>/log``, ``<job dir>/monitor``, …) with
one line, naming the path, when that cannot be done — typically because a *file* of
that name is in the way."""

from __future__ import annotations

import os

from rft.errors import RftError


def make_folder(path: str, what: str) -> str:
    """Create the folder ``path`` (and its parents); return it.

    :param what: who needs it, the start of the error line (``monitor jsonl``, ``log``).
    :raises RftError: ``<what>: <path> is a file, not a folder (move it aside)`` when
        ``path`` or one of its parents is a file; ``<what>: cannot create <path>: <the
        OS's words>`` for any other failure.
    """
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise RftError(f"{what}: {_file_in_the_way(path)} is a file, not a folder (move it "
                       "aside)") from None
    except OSError as exc:
        raise RftError(f"{what}: cannot create {path}: {exc.strerror or exc}") from None
    return path


def _file_in_the_way(path: str) -> str:
    """The first of ``path`` and its parents (outermost first) that exists and is not a
    folder (``path`` itself when none is found)."""
    parts = os.path.abspath(path).split(os.sep)
    for end in range(2, len(parts) + 1):
        prefix = os.sep.join(parts[:end])
        if os.path.lexists(prefix) and not os.path.isdir(prefix):
            return prefix
    return path
