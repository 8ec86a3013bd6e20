"""The plugin catalog: names rft knows of that may not be installed (``plugin_catalog.toml``).

The catalog is data shipped beside this module: which of the project's official plugin
distributions provides a name (the "pip install …" hint of an unknown name), and which
Trinity-RFT names need a third-party package that no project distribution wraps (what the
message says instead). :func:`load_catalog` reads and checks it; a bad entry is one
:class:`~rft.errors.PluginError` line naming the file and the entry.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from rft.errors import PluginError

CATALOG_PATH = Path(__file__).with_name("plugin_catalog.toml")
"""The catalog shipped with the core (package data of the wheel)."""

_EXTERNAL_FIELDS = ("kind", "names", "reason")


@dataclass(frozen=True)
class PluginCatalog:
    """The catalog's two tables, keyed by ``(kind, name)``."""

    providers: Mapping[tuple[str, str], str]
    """``(kind, name) -> distribution`` of the project's official plugin distributions."""
    external: Mapping[tuple[str, str], str]
    """``(kind, name) -> why it is not provided``; a name ending with ``*`` is a prefix."""

    def provider(self, kind: str, name: str) -> str | None:
        """The official distribution that registers ``name`` for ``kind``, or ``None``."""
        return self.providers.get((kind, name))

    def distributions(self) -> list[str]:
        """The official distributions the catalog names, sorted."""
        return sorted(set(self.providers.values()))

    def external_reason(self, kind: str, name: str) -> str | None:
        """What the catalog says about an external ``name`` (the exact name first, then the
        longest matching ``prefix*``), or ``None``."""
        if (kind, name) in self.external:
            return self.external[(kind, name)]
        prefixes = [(pattern, reason) for (of, pattern), reason in self.external.items()
                    if of == kind and pattern.endswith("*") and name.startswith(pattern[:-1])]
        return max(prefixes, key=lambda item: len(item[0]))[1] if prefixes else None


def load_catalog(path: Path, kinds: Collection[str]) -> PluginCatalog:
    """Read and check the catalog at ``path``; ``kinds`` are the plugin kinds it may name.

    :raises PluginError: one line ``<path>: <entry>: <what is wrong>`` (``<entry>`` a
        dotted key such as ``providers.rft-plugin-grpo.algorithm`` or ``external[2].names``).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PluginError(f"{path}: cannot read the plugin catalog: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PluginError(f"{path}: not a valid TOML file: {exc}") from None
    unknown = sorted(set(data) - {"providers", "external"})
    if unknown:
        _fail(path, unknown[0], "unknown table (the catalog has providers and external)")
    providers = _providers(path, data.get("providers", {}), kinds)
    external = _external(path, data.get("external", []), kinds)
    return PluginCatalog(providers, external)


def _providers(path: Path, table: Any, kinds: Collection[str]) -> dict[tuple[str, str], str]:
    """``[providers."<distribution>"]`` tables of ``kind = [names]``."""
    if not isinstance(table, dict):
        _fail(path, "providers", "must be a table of distributions")
    found: dict[tuple[str, str], str] = {}
    for distribution, by_kind in table.items():
        entry = f"providers.{distribution}"
        if not isinstance(by_kind, dict):
            _fail(path, entry, "must be a table of kind = [names]")
        for kind, names in by_kind.items():
            _check_kind(path, f"{entry}.{kind}", kind, kinds)
            for name in _names(path, f"{entry}.{kind}", names):
                if (kind, name) in found:
                    _fail(path, f"{entry}.{kind}", f"{name!r} is also listed under "
                          f"providers.{found[(kind, name)]}")
                found[(kind, name)] = distribution
    return found


def _external(path: Path, entries: Any, kinds: Collection[str]) -> dict[tuple[str, str], str]:
    """``[[external]]`` entries: ``kind``, ``names``, ``reason``."""
    if not isinstance(entries, list):
        _fail(path, "external", "must be an array of tables ([[external]])")
    found: dict[tuple[str, str], str] = {}
    for index, item in enumerate(entries):
        entry = f"external[{index}]"
        if not isinstance(item, dict):
            _fail(path, entry, "must be a table with kind, names and reason")
        missing = [key for key in _EXTERNAL_FIELDS if key not in item]
        extra = sorted(set(item) - set(_EXTERNAL_FIELDS))
        if missing or extra:
            _fail(path, f"{entry}.{(missing or extra)[0]}",
                  "missing" if missing else "unknown field (fields: kind, names, reason)")
        kind, reason = item["kind"], item["reason"]
        _check_kind(path, f"{entry}.kind", kind, kinds)
        if not isinstance(reason, str) or not reason.strip():
            _fail(path, f"{entry}.reason", "must be a non-empty string")
        for name in _names(path, f"{entry}.names", item["names"]):
            found[(kind, name)] = reason
    return found


def _names(path: Path, entry: str, names: Any) -> list[str]:
    """``names`` checked to be a non-empty list of non-empty strings."""
    if not isinstance(names, list) or not names:
        _fail(path, entry, f"must be a non-empty list of names, got {names!r}")
    for name in names:
        if not isinstance(name, str) or not name.strip():
            _fail(path, entry, f"{name!r} is not a name")
    return list(names)


def _check_kind(path: Path, entry: str, kind: Any, kinds: Collection[str]) -> None:
    if kind not in kinds:
        _fail(path, entry, f"unknown plugin kind {kind!r}; kinds: {', '.join(kinds)}")


def _fail(path: Path, entry: str, problem: str) -> NoReturn:
    raise PluginError(f"{path}: {entry}: {problem}")
