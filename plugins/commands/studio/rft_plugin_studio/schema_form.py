"""The config generator's form, generated from the schema.

:func:`build_form` walks the frozen dataclasses of :mod:`rft.config.schema` (their field
types, defaults, attribute docstrings and support notes from
:mod:`rft.config.field_support`) beside the user's values (a plain YAML mapping) and
returns a tree of :class:`FormNode`: a section per nested dataclass, one item per list
entry of sections (``stages[0]``, ``eval_tasksets[1]``), one input per leaf. A field naming
a plugin offers the registry's names of its kind, and its ``*_args`` sibling becomes a
section built from the chosen plugin's ``Args`` dataclass. A stage's section overrides
(``stages[i].buffer``, raw mappings in the schema) get the form of the global section they
override. Nothing here lists schema fields: a new field appears by itself.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import sys
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from rft.config import schema
from rft.config.convert import field_types, join_key
from rft.config.field_support import Unsupported, entry_of
from rft.config.support import field_default, field_kind, support_label, support_note
from rft.plugins import PluginRegistry, args_type_of
from rft_plugin_studio.schema_form_tables import BEGINNER, args_field_of, plugin_field

Kind = Literal["bool", "int", "float", "str", "choice", "yaml", "section", "sections"]
Mode = Literal["beginner", "expert"]


@dataclass(frozen=True)
class FormNode:
    """One field of the form (a leaf input, a section, or a list of sections)."""

    key: str
    """Dotted key in the config, e.g. ``stages[1].buffer.batch_size``."""
    name: str
    """The field's name (``[i]`` for a list item)."""
    kind: Kind
    doc: str = ""
    """The field's attribute docstring."""
    support: str = ""
    """The support label (``yes``, ``no (warning)``, ``partly (error)``, ``derived``)."""
    note: str = ""
    """The support note (for an unsupported field: the line validation reports)."""
    unsupported: bool = False
    default: str = ""
    """The default as YAML text (empty: none / derived)."""
    value: str = ""
    """The user's value as YAML text (empty: unset, the default applies)."""
    is_set: bool = False
    choices: tuple[str, ...] = ()
    """Offered values: a plugin kind's registered names, or a ``Literal``'s values."""
    plugin_kind: str = ""
    """The plugin kind a name field selects (changing it rebuilds its ``*_args`` form)."""
    beginner: bool = False
    children: tuple[FormNode, ...] = ()


def yaml_text(value: Any) -> str:
    """``value`` as one line of YAML (a string as itself)."""
    if isinstance(value, str):
        return value
    text = str(yaml.safe_dump(value, default_flow_style=True, width=1 << 20, sort_keys=False))
    return text.removesuffix("\n").removesuffix("\n...").strip()


@functools.cache
def _module_tree(module: str) -> ast.Module | None:
    """The parsed source of ``module`` (once per module)."""
    try:
        return ast.parse(inspect.getsource(sys.modules[module]))
    except (KeyError, OSError, TypeError, SyntaxError):
        return None


def _class_def(klass: type) -> ast.ClassDef | None:
    """The ``class`` statement of ``klass`` found by its qualified name in its module."""
    tree = _module_tree(klass.__module__)
    scope: list[ast.stmt] = tree.body if tree is not None else []
    found: ast.ClassDef | None = None
    for name in klass.__qualname__.split("."):
        found = next((node for node in scope
                      if isinstance(node, ast.ClassDef) and node.name == name), None)
        if found is None:
            break
        scope = found.body
    if found is None:  # a class defined in a function: its own source
        try:
            parsed = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            return None
        first = parsed.body[0] if parsed.body else None
        found = first if isinstance(first, ast.ClassDef) else None
    return found


@functools.cache
def field_docs(cls: type) -> Mapping[str, str]:
    """``{field: attribute docstring}`` of ``cls`` and its bases (the string literal right
    below each annotated field); empty where the source is unavailable."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        definition = _class_def(klass) if dataclasses.is_dataclass(klass) else None
        body = definition.body if definition is not None else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


_INDEX = re.compile(r"\[\d+\]")
_STAGE = re.compile(r"^stages\[\d+\]\.")
BEGINNER_PATHS = frozenset(setting.path for setting in BEGINNER)


def is_beginner(key: str) -> bool:
    """Whether the dotted ``key`` is a beginner setting (inside a stage, its path without
    the ``stages[i].`` prefix counts too)."""
    return (_INDEX.sub("", key) in BEGINNER_PATHS
            or _INDEX.sub("", _STAGE.sub("", key)) in BEGINNER_PATHS)


def holds_beginner(key: str) -> bool:
    """Whether a beginner setting lies below the section or list at ``key``."""
    paths = {_INDEX.sub("", key) + ".", _INDEX.sub("", _STAGE.sub("", key)) + "."}
    return any(p.startswith(prefix) for p in BEGINNER_PATHS for prefix in paths)


def stage_overlays() -> dict[str, type]:
    """``{section: dataclass}`` of the global sections a stage may override: the fields of
    :class:`~rft.config.schema.StageConfig` that name a dataclass section of
    :class:`~rft.config.schema.RftConfig`."""
    stage_fields = {f.name for f in dataclasses.fields(schema.StageConfig)}
    found: dict[str, type] = {}
    for f in dataclasses.fields(schema.RftConfig):
        kind, inner = field_kind(f.type)
        if f.name in stage_fields and kind == "one" and dataclasses.is_dataclass(inner):
            assert isinstance(inner, type)
            found[f.name] = inner
    return found


def _leaf_kind(tp: Any) -> tuple[Kind, tuple[str, ...]]:
    kind, inner = field_kind(tp)
    if kind != "one":
        return "yaml", ()
    if typing.get_origin(inner) is Literal:
        return "choice", tuple(str(v) for v in typing.get_args(inner))
    for simple, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if inner is simple:
            return typing.cast(Kind, name), ()
    return "yaml", ()


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


class FormBuilder:
    """Builds the form of a config's values with the plugin names of ``registry``."""

    def __init__(self, registry: PluginRegistry, root: type | None = None) -> None:
        """:param root: the config's dataclass (default: the schema's ``RftConfig`` as it
            is when the builder is made)."""
        self.registry = registry
        self.root = schema.RftConfig if root is None else root
        self.overlays = stage_overlays()

    def build(self, values: Mapping[str, Any], mode: Mode = "expert") -> tuple[FormNode, ...]:
        """The form of ``values`` (a plain config mapping); beginner mode keeps only the
        beginner settings and the sections holding them."""
        nodes = self._section(self.root, values, "", depth=0)
        return nodes if mode == "expert" else _beginner_only(nodes)

    def _section(self, cls: type, values: Any, prefix: str, depth: int,
                 with_support: bool = True) -> tuple[FormNode, ...]:
        values = values if isinstance(values, Mapping) else {}
        docs = field_docs(cls)
        types = _types(cls)
        return tuple(self._field(cls, f, types.get(f.name, f.type), values, prefix,
                                 docs.get(f.name, ""), depth, with_support)
                     for f in dataclasses.fields(cls))

    def _field(self, cls: type, f: dataclasses.Field[Any], tp: Any, values: Mapping[str, Any],
               prefix: str, doc: str, depth: int, with_support: bool) -> FormNode:
        key = join_key(prefix, f.name)
        entry = entry_of(f) if with_support else None
        default = field_default(f)
        present = f.name in values
        value = values.get(f.name)
        common: dict[str, Any] = dict(
            key=key, name=f.name, doc=doc, beginner=is_beginner(key),
            support=support_label(entry) if entry is not None else "",
            note=support_note(entry) if entry is not None else "",
            unsupported=isinstance(entry, Unsupported))
        kind, inner = field_kind(tp)
        if kind == "one" and _is_section(inner) and depth < 8:
            return FormNode(kind="section", is_set=present,
                            children=self._section(inner, value, key, depth + 1,
                                                   with_support), **common)
        if kind == "list" and _is_section(inner) and depth < 8:
            items = value if isinstance(value, list) else []
            return FormNode(kind="sections", is_set=present, children=tuple(
                FormNode(key=join_key(key, i), name=f"[{i}]", kind="section", is_set=True,
                         beginner=common["beginner"],
                         children=self._section(inner, item, join_key(key, i), depth + 1,
                                                with_support))
                for i, item in enumerate(items)), **common)
        if cls is schema.StageConfig and f.name in self.overlays:
            return FormNode(kind="section", is_set=present, children=self._section(
                self.overlays[f.name], value, key, depth + 1), **common)
        args_of = args_field_of(cls, f.name)
        if args_of is not None:
            args_type = self._args_type(args_of.kind, values.get(args_of.name),
                                        _field_default(cls, args_of.name))
            if args_type is not None:
                return FormNode(kind="section", is_set=present, children=self._section(
                    args_type, value, key, depth + 1, with_support=False), **common)
        shown_default = "" if default is None or default is dataclasses.MISSING \
            else yaml_text(default)
        leaf = dict(default=shown_default, value=yaml_text(value) if present else "",
                    is_set=present, **common)
        named = plugin_field(cls, f.name)
        if named is not None:
            return FormNode(kind="choice", plugin_kind=named.kind.name,
                            choices=tuple(self.registry.names(named.kind)), **leaf)
        leaf_kind, choices = _leaf_kind(tp)
        return FormNode(kind=leaf_kind, choices=choices, **leaf)

    def _args_type(self, kind: Any, chosen: Any, default: Any) -> type | None:
        """The ``Args`` dataclass of the plugin named ``chosen`` (else ``default``)."""
        name = chosen if isinstance(chosen, str) and chosen else default
        if not isinstance(name, str) or not self.registry.has(kind, name):
            return None
        args_type = args_type_of(self.registry.get(kind, name))
        return args_type if _is_section(args_type) else None


def _types(cls: type) -> dict[str, Any]:
    """The resolved field types of ``cls`` (a plugin's ``Args`` may postpone its
    annotations); ``{}`` where they do not resolve (each field's own ``type`` is used)."""
    try:
        return dict(field_types(cls))
    except (NameError, TypeError):
        return {}


def _field_default(cls: type, name: str) -> Any:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return field_default(f)
    return None


def _beginner_only(nodes: tuple[FormNode, ...]) -> tuple[FormNode, ...]:
    kept: list[FormNode] = []
    for node in nodes:
        children = _beginner_only(node.children)
        if node.kind in ("section", "sections") and (children or node.beginner
                                                     or holds_beginner(node.key)):
            kept.append(dataclasses.replace(node, children=children))
        elif node.beginner:
            kept.append(node)
    return tuple(kept)


def walk(nodes: tuple[FormNode, ...]) -> list[FormNode]:
    """Every node of a form, depth first."""
    found: list[FormNode] = []
    for node in nodes:
        found.append(node)
        found.extend(walk(node.children))
    return found
