"""Writing the converted config as YAML with a trailing comment per key.

PyYAML cannot write comments and ruamel.yaml is not a dependency, so the emitter is
hand-written for the shapes a conversion produces: nested mappings, lists of mappings,
lists of scalars and scalars. Keys are ordered as in the schema (:mod:`rft.config.schema`)
so every converted file reads the same way; free-form mappings (``*_args``,
``trainer_config``) keep the order of the launch. Scalars are written so that both
``yaml.safe_load`` and OmegaConf read them back as the same value.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from typing import Any, Union

import yaml
from rft.config.schema import RftConfig

INDENT = "  "
_PLAIN = re.compile(r"[A-Za-z0-9_./${}:@+\-~=,]+")
_NUMBER_LIKE = re.compile(r"[-+]?(\.\d+|\d[\d_]*(\.\d*)?)([eE][-+]?\d+)?|[-+]?\.?(inf|nan)",
                          re.IGNORECASE)


def _dataclass_of(tp: Any) -> tuple[type | None, bool]:
    """The dataclass inside ``tp`` (``X``, ``X | None``, ``list[X]``) and whether in a list."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            found = _dataclass_of(arg)
            if found[0] is not None:
                return found
        return None, False
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        inner, _ = _dataclass_of(item)
        return inner, True
    if dataclasses.is_dataclass(tp):
        return tp, False  # type: ignore[return-value]
    return None, False


def order_like_schema(data: Any, cls: type = RftConfig) -> Any:
    """``data`` with the keys of every schema section in the schema's field order."""
    if not isinstance(data, dict) or not dataclasses.is_dataclass(cls):
        return data
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    ordered: dict[str, Any] = {}
    for key in sorted(data, key=lambda k: names.index(k) if k in names else len(names)):
        value = data[key]
        inner, is_list = _dataclass_of(hints[key]) if key in hints else (None, False)
        if inner is not None and is_list and isinstance(value, list):
            value = [order_like_schema(item, inner) for item in value]
        elif inner is not None:
            value = order_like_schema(value, inner)
        ordered[key] = value
    return ordered


def scalar(value: Any) -> str:
    """One YAML scalar that reads back as ``value`` (with PyYAML and with OmegaConf)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # 1e-06 → 1.0e-06 (YAML 1.1)
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    text = str(value)
    if (_PLAIN.fullmatch(text) and not _NUMBER_LIKE.fullmatch(text)
            and text[0] not in "-:{}[],&*#?|<>=!%@`'\"~" and ": " not in text
            and yaml.safe_load(text) == text):
        return text
    if "\n" not in text and "'" not in text:
        return f"'{text}'"
    return json.dumps(text)


def _flow(value: Any) -> str | None:
    """A list of scalars (or an empty container) in flow style; None when not possible."""
    if isinstance(value, dict) and not value:
        return "{}"
    if isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    return None


def _with_comment(text: str, comment: str | None) -> str:
    return f"{text}  # {comment}" if comment else text


def _child_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _emit_mapping(data: dict[str, Any], path: str, comments: dict[str, str], depth: int,
                  out: list[str], first_prefix: str | None = None) -> None:
    """Write ``data``'s keys at ``depth``; the first line may start with ``first_prefix``
    (``- `` of a list item) instead of the indentation."""
    for i, (key, value) in enumerate(data.items()):
        indent = first_prefix if (i == 0 and first_prefix is not None) else INDENT * depth
        child = _child_path(path, key)
        comment = comments.get(child)
        flow = _flow(value) if isinstance(value, (dict, list)) else None
        if isinstance(value, (dict, list)) and flow is None:
            out.append(_with_comment(f"{indent}{scalar(key)}:", comment))
            if isinstance(value, dict):
                _emit_mapping(value, child, comments, depth + 1, out)
            else:
                _emit_list(value, child, comments, depth + 1, out)
        else:
            text = flow if flow is not None else scalar(value)
            out.append(_with_comment(f"{indent}{scalar(key)}: {text}", comment))
        if depth == 0 and i < len(data) - 1 and isinstance(value, dict):
            out.append("")  # a blank line between top-level sections


def _emit_list(items: list[Any], path: str, comments: dict[str, str], depth: int,
               out: list[str]) -> None:
    for i, item in enumerate(items):
        child = _child_path(path, i)
        prefix = INDENT * depth + "- "
        if isinstance(item, dict) and item:
            _emit_mapping(item, child, comments, depth + 1, out, first_prefix=prefix)
        elif isinstance(item, list) and _flow(item) is None:
            out.append(_with_comment(prefix.rstrip(), comments.get(child)))
            _emit_list(item, child, comments, depth + 1, out)
        else:
            text = _flow(item) if isinstance(item, (dict, list)) else scalar(item)
            out.append(_with_comment(f"{prefix}{text}", comments.get(child)))


def check_interpolations(config: Any, path: str = "") -> list[tuple[str, str]]:
    """Make every string of ``config`` safe for OmegaConf (in place): a ``${`` that does not
    start a valid interpolation (an unbalanced quote or brace from the launch) is escaped
    as ``\\${`` so the value is read literally. Returns ``(path, problem)`` per change."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    found: list[tuple[str, str]] = []
    items: Any = (config.items() if isinstance(config, dict)
                  else enumerate(config) if isinstance(config, list) else ())
    for key, value in list(items):
        child = _child_path(path, key)
        if isinstance(value, (dict, list)):
            found.extend(check_interpolations(value, child))
        elif isinstance(value, str) and "${" in value:
            try:
                OmegaConf.create({"value": value})
            except OmegaConfBaseException as exc:
                config[key] = re.sub(r"(?<!\\)\$\{", r"\\${", value)
                reason = str(exc).splitlines()[0]
                found.append((child, (f"{value!r} is not a valid OmegaConf interpolation "
                                      f"({reason}); written literally")))
    return found


def env_variables(config: Any) -> list[str]:
    """Environment variables the config reads through ``${oc.env:NAME}``, in order."""
    names: list[str] = []
    if isinstance(config, dict):
        values: Any = config.values()
    elif isinstance(config, list):
        values = config
    else:
        values = [config]
    for value in values:
        if isinstance(value, (dict, list)):
            found = env_variables(value)
        elif isinstance(value, str):
            found = re.findall(r"(?<!\\)\$\{oc\.env:(\w+)", value)
        else:
            found = []
        names.extend(name for name in found if name not in names)
    return names


def to_yaml(config: dict[str, Any], comments: dict[str, str] | None = None,
            header: list[str] | None = None) -> str:
    """The config as YAML text; ``comments`` maps dotted paths (``a.b[0].c``) to the
    trailing comment of that key; ``header`` lines (already ``#``-prefixed) come first."""
    out = list(header or [])
    if out:
        out.append("")
    _emit_mapping(order_like_schema(config), "", comments or {}, 0, out)
    return "\n".join(out) + "\n"
