"""Environment variables set in this process for the length of a ``with`` block."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def scoped_environ(variables: Mapping[str, object]) -> Iterator[None]:
    """``os.environ`` updated with ``variables`` (values as strings) inside the block, and
    each of them restored (or removed, when it was unset) afterwards, however it ends."""
    saved = {key: os.environ.get(key) for key in variables}
    os.environ.update({key: str(value) for key, value in variables.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


__all__ = ["scoped_environ"]
