"""The error of reading data (tasksets, datasets): one line naming the file and the row."""

from __future__ import annotations

from rft.errors import RftError


class TasksetError(RftError):
    """A taskset or dataset cannot be read or a row lacks what its format needs."""


__all__ = ["TasksetError"]
