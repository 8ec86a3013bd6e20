"""The config generator's document: a plain YAML mapping edited by dotted key.

The page keeps the user's config as YAML text; each edit sets or clears one dotted key
(``stages[1].buffer.batch_size``), or adds / removes an item of a list of sections. Values
typed into an input are read as ``rft validate``'s ``key=value`` overrides read theirs
(OmegaConf's YAML), so ``3e-3`` is a float and ``${oc.env:VAR}`` stays as written.
Interpolations in an imported file are kept as text: the export resolves like the import.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rft.config.load import read_yaml
from rft.errors import ConfigError, RftError

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def key_parts(key: str) -> list[str | int]:
    """``"a.b[2].c"`` -> ``["a", "b", 2, "c"]``.

    :raises RftError: ``key`` is empty or malformed."""
    parts: list[str | int] = []
    position = 0
    for match in _PART.finditer(key):
        if match.start() != position and key[position:match.start()] != ".":
            break
        parts.append(int(match.group(2)) if match.group(2) is not None else match.group(1))
        position = match.end()
    if not parts or position != len(key):
        raise RftError(f"{key!r}: not a dotted config key")
    return parts


def parse_document(text: str, source: str = "imported YAML") -> dict[str, Any]:
    """The mapping a YAML config text holds, interpolations kept as written.

    :raises ConfigError: one line each (YAML syntax with line and column, as
        ``rft validate`` reports it, the file named ``source``)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            loaded = read_yaml(path)
        except ConfigError as exc:
            raise ConfigError([line.replace(str(path), source) for line in exc.problems]) \
                from exc
    plain = OmegaConf.to_container(loaded, resolve=False)
    assert isinstance(plain, dict)  # read_yaml returns a mapping
    return {str(k): v for k, v in plain.items()}


def dump_document(document: dict[str, Any]) -> str:
    """The document as YAML text (keys in the user's order)."""
    if not document:
        return ""
    return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100))


def parse_value(key: str, text: str) -> Any:
    """A value typed for ``key``, read as ``rft validate key=value`` reads it.

    :raises RftError: the text is no valid YAML value (one line naming ``key``)."""
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]))
    except (OmegaConfBaseException, yaml.YAMLError, ValueError) as exc:
        raise RftError(f"{key}: {str(exc).splitlines()[0]}") from exc
    assert isinstance(parsed, dict)
    return parsed["value"]


def set_value(document: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` to ``value``, creating the mappings on the way (a ``null`` section
    becomes a mapping). :raises RftError: a list index past the list's end."""
    parts = key_parts(key)
    node: Any = document
    for part, following in zip(parts, parts[1:]):
        node = _child(node, part, key, {} if isinstance(following, str) else [])
    _assign(node, parts[-1], value, key)


def unset_value(document: dict[str, Any], key: str) -> None:
    """Remove ``key`` (its default applies again), then the mappings it leaves empty."""
    parts = key_parts(key)
    trail: list[tuple[Any, str | int]] = []
    node: Any = document
    for part in parts[:-1]:
        if not _has(node, part):
            return
        trail.append((node, part))
        node = node[part]
    last = parts[-1]
    if isinstance(node, dict) and isinstance(last, str):
        node.pop(last, None)
    for parent, part in reversed(trail):
        child = parent[part]
        if isinstance(child, dict) and not child and isinstance(part, str):
            del parent[part]
        else:
            break


def add_item(document: dict[str, Any], key: str) -> None:
    """Append an empty section to the list at ``key`` (created when missing)."""
    parts = key_parts(key)
    node: Any = document
    for part, following in zip(parts, parts[1:]):
        node = _child(node, part, key, {} if isinstance(following, str) else [])
    items = node.get(parts[-1]) if isinstance(node, dict) else None
    if not isinstance(items, list):
        items = []
        _assign(node, parts[-1], items, key)
    items.append({})


def remove_item(document: dict[str, Any], key: str) -> None:
    """Remove the list item at ``key`` (``...[i]``); an emptied list is removed too."""
    parts = key_parts(key)
    index = parts[-1]
    if not isinstance(index, int):
        raise RftError(f"{key}: not a list item")
    parent_key = key[:key.rindex("[")]
    node: Any = document
    for part in key_parts(parent_key):
        if not _has(node, part):
            return
        node = node[part]
    if isinstance(node, list) and index < len(node):
        del node[index]
        if not node:
            unset_value(document, parent_key)


def _has(node: Any, part: str | int) -> bool:
    if isinstance(part, int):
        return isinstance(node, list) and part < len(node)
    return isinstance(node, dict) and part in node


def _child(node: Any, part: str | int, key: str, empty: Any) -> Any:
    if isinstance(part, int):
        if not isinstance(node, list) or part >= len(node):
            raise RftError(f"{key}: no list item [{part}] (add the item first)")
        if node[part] is None:
            node[part] = empty
        return node[part]
    if not isinstance(node, dict):
        raise RftError(f"{key}: {part!r} is below a value that is not a section")
    if not isinstance(node.get(part), (dict, list)):
        node[part] = empty
    return node[part]


def _assign(node: Any, part: str | int, value: Any, key: str) -> None:
    if isinstance(part, int):
        if not isinstance(node, list) or part >= len(node):
            raise RftError(f"{key}: no list item [{part}] (add the item first)")
        node[part] = value
    elif isinstance(node, dict):
        node[part] = value
    else:
        raise RftError(f"{key}: {part!r} is below a value that is not a section")
