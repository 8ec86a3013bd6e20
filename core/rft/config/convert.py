"""Typed conversion of plain data (resolved YAML) onto dataclasses.

``to_dataclass(cls, data, key, problems)`` builds an instance of ``cls`` from nested dicts
and lists and appends one line per problem to ``problems`` instead of stopping at the
first: unknown keys (with did-you-mean), wrong types, values outside a ``Literal``. Each
line starts with the dotted key of the culprit, e.g.
``algorithm.optimizer.lr: expected a number, got 'fast'``.

Supported field types: ``int``, ``float``, ``bool``, ``str``, ``Any``, ``X | None``,
``list[X]``, ``dict[str, X]``, ``Literal[...]`` and nested dataclasses. As in OmegaConf's
typed configs, a string is taken for a number or a boolean when it spells one
(``${oc.env:NODE_NUM,2}`` resolves to the string ``'2'``).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union

from rft.errors import RftError
from rft.suggest import closest, did_you_mean

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")



class _Invalid:
    """Marker returned for a value that failed conversion (its problem is recorded)."""

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Any = _Invalid()
"""Returned by :func:`convert_value` on failure; callers fall back to the default."""

_INTEGER = re.compile(r"[+-]?\d+")
"""A string that is an integer (environment variables and their defaults are strings)."""
_BOOL_WORDS = {"true": True, "false": False, "yes": True, "no": False, "on": True,
               "off": False}
"""Strings read as booleans, as OmegaConf's typed configs read them."""


def join_key(parent: str, child: str | int) -> str:
    """Dotted key of ``child`` under ``parent``: ``a.b`` or ``a[0]`` for list items."""
    if isinstance(child, int):
        return f"{parent}[{child}]"
    return f"{parent}.{child}" if parent else child


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return f"{value!r} ({type(value).__name__})"


def type_name(tp: Any) -> str:
    """Readable name of a field type for error messages."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return "anything"
    if tp is bool:
        return "a boolean"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if origin is list:
        return "a list"
    if origin is dict:
        return "a mapping"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def convert_value(tp: Any, value: Any, key: str, problems: list[str]) -> Any:
    """Convert ``value`` to type ``tp``; on failure append a problem and return ``INVALID``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        non_none = [o for o in options if o is not type(None)]
        if len(non_none) == 1:
            return convert_value(non_none[0], value, key, problems)
        for option in non_none:  # first option that converts cleanly wins
            trial: list[str] = []
            converted = convert_value(option, value, key, trial)
            if not trial:
                return converted
        problems.append(f"{key}: expected {type_name(tp)}, got {_describe(value)}")
        return INVALID
    if value is None:
        problems.append(f"{key}: expected {type_name(tp)}, got null")
        return INVALID
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {_describe(value)}")
            return INVALID
        return to_dataclass(tp, value, key, problems)
    if origin is list:
        (item_type,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            problems.append(f"{key}: expected a list, got {_describe(value)}")
            return INVALID
        items = [convert_value(item_type, item, join_key(key, i), problems)
                 for i, item in enumerate(value)]
        return [item for item in items if item is not INVALID]
    if origin is dict:
        _key_type, item_type = typing.get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {_describe(value)}")
            return INVALID
        entries = {str(k): convert_value(item_type, v, join_key(key, str(k)), problems)
                   for k, v in value.items()}
        return {k: v for k, v in entries.items() if v is not INVALID}
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value in allowed and type(value) in {type(a) for a in allowed}:
            return value
        message = f"{key}: {_describe(value)} is not allowed; expected {type_name(tp)}"
        close = closest(str(value), [str(a) for a in allowed], n=1)
        if close:
            message += f" (did you mean {close[0]!r}?)"
        problems.append(message)
        return INVALID
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]  # e.g. ${oc.env:X,true}: a string
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
            return int(value.strip())  # e.g. ${oc.env:NODE_NUM,2}: the default is a string
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    problems.append(f"{key}: expected {type_name(tp)}, got {_describe(value)}")
    return INVALID


def field_types(cls: type) -> dict[str, Any]:
    """Resolved field types of a dataclass (works with postponed annotations)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _empty_section(tp: Any) -> bool:
    """Whether a null value of a field typed ``tp`` is an empty section (YAML reads
    ``algorithm:`` followed only by comments as null): a section, list or mapping that
    has no null meaning of its own (not ``Optional``)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return False
    return dataclasses.is_dataclass(tp) or origin in (list, dict)


def unknown_key_message(key: str, name: str, value: Any, known: list[str]) -> str:
    """One line for the unknown key ``name`` under ``key``: the closest known keys
    (:func:`rft.suggest.did_you_mean`, case-insensitive), else the known keys. A key
    written ``name:value`` without a space (YAML reads ``{epsilon:1e-6}`` as the key
    ``'epsilon:1e-6'`` with no value) is told to write ``key: value``."""
    where = join_key(key, name)
    head, colon, rest = name.partition(":")
    if colon and value is None and head.strip():
        head = head.strip()
        message = (f"{where}: unknown key {name!r}; write `key: value` with a space after "
                   f"the colon (`{head}: {rest.strip()}`)")
        if head not in known:
            message += did_you_mean(head, known, n=1) or f"; known keys: {', '.join(known)}"
        return message
    hint = did_you_mean(name, known, n=1)
    if hint:
        return f"{where}: unknown key{hint}"
    return (f"{where}: unknown key {'in ' + key if key else 'at the top level'}; known "
            f"keys: {', '.join(known)}")


def to_dataclass(cls: type[T], data: dict[str, Any], key: str, problems: list[str]) -> T:
    """Build ``cls`` from ``data``; unknown keys and bad values are appended to ``problems``.

    Fields missing from ``data`` keep their dataclass defaults; a field without a default
    that is missing is a problem.
    """
    types_by_name = field_types(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        name = str(name)
        if name not in types_by_name:
            problems.append(unknown_key_message(key, name, value, list(types_by_name)))
            continue
        if value is None and _empty_section(types_by_name[name]):
            continue  # `section:` with nothing (or only comments) under it: its defaults
        converted = convert_value(types_by_name[name], value, join_key(key, name), problems)
        if converted is not INVALID:  # an invalid value keeps the default
            kwargs[name] = converted
    for f in dataclasses.fields(cls):
        missing_default = (f.default is dataclasses.MISSING
                           and f.default_factory is dataclasses.MISSING)
        if f.init and missing_default and f.name not in kwargs:
            problems.append(f"{join_key(key, f.name)}: required key is missing")
            return INVALID
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # a __post_init__ check of the dataclass
        problems.append(f"{key or cls.__name__}: {exc}")
        return INVALID


def to_dataclass_checked(cls: type[T], data: dict[str, Any] | None, key: str) -> T:
    """:func:`to_dataclass`, its problems (an unknown key, a bad value) raised as one
    :class:`~rft.errors.RftError` line naming ``key``."""
    problems: list[str] = []
    built = to_dataclass(cls, dict(data or {}), key, problems)
    if problems or built is INVALID:
        raise RftError("; ".join(problems) or f"{key}: invalid")
    return built
