"""Changed copies of frozen config values for tests: the schema's dataclasses are frozen
(``rft.config.schema``), so a test that needs a config other than the loaded one builds a
new one with :func:`dataclasses.replace`, one section at a time; :func:`replaced` does that
for dotted keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def replaced(obj: T, changes: Mapping[str, Any]) -> T:
    """``obj`` with the value at each dotted key of ``changes`` replaced (``"model.logprobs"``:
    a new ``model`` section in a new config); ``obj`` itself is left as it is.

    :raises AttributeError: a key that names no field on the way.
    """
    for key, value in changes.items():
        obj = _replaced_at(obj, key.split("."), value)
    return obj


def _replaced_at(obj: T, names: list[str], value: Any) -> T:
    head, *rest = names
    if head not in {f.name for f in dataclasses.fields(obj)}:
        raise AttributeError(f"{type(obj).__name__} has no field {head!r}")
    new = _replaced_at(getattr(obj, head), rest, value) if rest else value
    return dataclasses.replace(obj, **{head: new})


__all__ = ["replaced"]
