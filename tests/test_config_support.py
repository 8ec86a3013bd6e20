"""Every config field works or says so (:mod:`rft.config.support`).

- every field of every schema dataclass carries a support note in its
  ``field(metadata=...)`` (a new field without one fails here, naming it in one line);
- a ``Consumed`` entry cannot lie: each module it names reads an attribute of that name
  (AST); an ``Unsupported`` field with a distinctive name is read nowhere (once a module
  reads it, the entry must become ``Consumed``);
- setting an unsupported field gives exactly its one line, naming the dotted key, as a
  warning or (``severity="error"``) a problem; through ``load_config`` too;
- ``trainer.trainer_config``: an honoured key path gives nothing, any other key path a
  warning naming it; the honoured list is what the torch trainer looks up;
- the support tables of ``docs/configuration.md`` are the ones the registry renders.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal

import pytest
from config_corpus import BASE_CONFIG, prepare_environment
from rft.config import load_config, schema
from rft.config.support import (
    SUPPORT,
    TRAINER_CONFIG_HONOURED,
    TRAINER_CONFIG_REASON,
    Consumed,
    Unsupported,
    below_unsupported,
    class_sites,
    field_default,
    field_kind,
    missing_support,
    reported,
    schema_classes,
    support_messages,
    support_of,
)
from rft.config.field_support import SUPPORT_KEY, consumed
from rft.config.check import CHECKS
from rft.config.check_sections import check_support
from rft.config.findings import Findings
from rft.errors import ConfigError
from rft.plugins import PluginRegistry
from rft.testing.config_edit import replaced

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "config_support_table.py"
DOCS = ROOT / "docs" / "configuration.md"

FIELDS = [(cls, f) for cls in schema_classes() for f in dataclasses.fields(cls)]
CONSUMED = sorted(key for key, entry in SUPPORT.items() if isinstance(entry, Consumed))


def unsupported_part(entry: Any) -> Unsupported | None:
    """The unsupported field, or the unsupported values of a consumed one."""
    if isinstance(entry, Unsupported):
        return entry
    return entry.unsupported if isinstance(entry, Consumed) else None


UNSUPPORTED = [(cls, f) for cls, f in FIELDS
               if unsupported_part(support_of(cls, f.name)) is not None
               and any(site_cls is cls for _, site_cls in class_sites())]


def _id(item: tuple[type, dataclasses.Field[Any]]) -> str:
    return f"{item[0].__name__}.{item[1].name}"


# --------------------------------------------------------------------------------------
# (a) a complete registry
# --------------------------------------------------------------------------------------


def test_every_field_of_every_schema_class_has_a_support_entry():
    missing = missing_support(schema_classes())
    assert missing == [], "\n".join(missing)
    assert [_id(item) for item in FIELDS if support_of(item[0], item[1].name) is None] == []


def copy_with(cls: type, name: str, *extra: tuple[str, Any, Any]) -> type:
    """A dataclass ``name`` with the fields of the schema class ``cls`` (their notes
    included) and the ``extra`` ones after them, as a schema change would add them."""

    def again(f: dataclasses.Field[Any]) -> Any:
        if f.default_factory is not dataclasses.MISSING:
            return dataclasses.field(default_factory=f.default_factory, metadata=f.metadata)
        return dataclasses.field(default=f.default, metadata=f.metadata)

    return dataclasses.make_dataclass(
        name, [*((f.name, f.type, again(f)) for f in dataclasses.fields(cls)), *extra])


def test_a_field_added_without_a_support_note_fails_the_check():
    """The check above, run over schema classes with a field added: a bare one, or one
    whose metadata holds no typed note, is named in one line; one with a note is not."""
    buffer = copy_with(schema.BufferConfig, "BufferConfig",
                       ("prefetch", int, dataclasses.field(default=0)),
                       ("noted", int, dataclasses.field(
                           default=0, metadata=consumed("rft.modes.builders"))))
    log = copy_with(schema.LogConfig, "LogConfig", ("label", str, dataclasses.field(
        default="", metadata={SUPPORT_KEY: "consumed"})))
    classes = [{"BufferConfig": buffer, "LogConfig": log}.get(cls.__name__, cls)
               for cls in schema_classes()]
    missing = missing_support(classes)
    assert [line.split(":")[0] for line in missing] == ["BufferConfig.prefetch",
                                                        "LogConfig.label"]
    assert all("\n" not in line and "no support note" in line for line in missing)
    assert support_of(buffer, "batch_size") == support_of(schema.BufferConfig, "batch_size")

    subclass = dataclasses.make_dataclass("Subclass", [], bases=(buffer,))
    assert [line.split(":")[0] for line in missing_support([subclass])] == [
        "BufferConfig.prefetch"]  # inherited: named after the class that declares it


def test_no_entry_names_a_field_that_does_not_exist():
    fields = {_id(item) for item in FIELDS}
    assert sorted(set(SUPPORT) - fields) == []


def test_a_subclass_redeclares_a_field_to_note_it_its_own_way():
    """``AuxiliaryModelConfig.engine_num`` has a note of its own; the field keeps its place
    among the shared fields and its default."""
    aux, shared = schema.AuxiliaryModelConfig, schema.InferenceModelConfig
    assert support_of(aux, "engine_num") != support_of(shared, "engine_num")
    assert support_of(schema.RolloutModelConfig, "engine_num") == support_of(shared,
                                                                            "engine_num")
    names = [f.name for f in dataclasses.fields(aux)]
    assert names[:len(dataclasses.fields(shared))] == [f.name for f in dataclasses.fields(shared)]
    assert aux().engine_num == shared().engine_num == 1


def test_the_registry_covers_the_whole_schema():
    assert len(schema_classes()) >= 34 and len(FIELDS) >= 330
    reachable = {cls for _, cls in class_sites()}
    assert set(schema_classes()) - reachable == {schema.InferenceModelConfig}  # a base class


# --------------------------------------------------------------------------------------
# (b) consumers really read the field
# --------------------------------------------------------------------------------------


@cache
def module_path(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, f"no module {name}"
    return Path(spec.origin)


@cache
def attributes_read(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute))


@pytest.mark.parametrize("key", CONSUMED)
def test_each_consumer_module_reads_the_field(key):
    entry = SUPPORT[key]
    assert isinstance(entry, Consumed) and entry.modules, key
    name = key.split(".", 1)[1]
    liars = [m for m in entry.modules if name not in attributes_read(module_path(m))]
    assert liars == [], f"{key}: {', '.join(liars)} read no attribute {name!r}"


SHARED_NAMES = {
    "name", "path", "seed", "rank", "enable", "ratio", "base_url", "port", "group", "n",
    "logprobs", "chat_template", "top_k", "operators", "output", "max_retry_times",
    "reply_prefix", "engine_num", "format", "inputs",
}
"""Unsupported fields whose names are also attributes of other objects (a taskset's
``name``, a sampling ``seed``, a regex match's ``group``, ...): the scan below cannot
tell those reads apart, so it leaves them out."""

READ_WITHOUT_EFFECT = {
    "ulysses_sequence_parallel_size": {"rft.trainer.options"},  # token budget only
}
"""Unsupported fields that a module reads without giving them their effect."""


def _source_modules() -> dict[str, Path]:
    modules = {}
    for root, base in ((ROOT / "core", ROOT / "core"), (ROOT / "plugins", None)):
        for path in sorted(root.rglob("*.py")):
            if "tests" in path.parts or path.name.startswith("test_"):
                continue
            parts = path.relative_to(base).parts if base is not None else ()
            if base is None:  # plugins/<kind>/[<dist>/]rft_plugin_<name>/...
                package = next((i for i, part in enumerate(path.parts)
                                if part.startswith("rft_plugin_")), None)
                if package is None:
                    continue
                parts = path.parts[package:]
            modules[".".join(parts).removesuffix(".py").removesuffix(".__init__")] = path
    modules.pop("rft.config.schema", None)
    modules.pop("rft.config.support", None)
    # convert-verl mirrors both configs' names on its own objects by design
    return {name: path for name, path in modules.items()
            if not name.startswith("rft_plugin_convert_verl")}


def test_unsupported_fields_are_read_nowhere():
    """A field marked unsupported whose name a module starts reading has probably been
    implemented: its entry must say so (Consumed, with that module)."""
    modules = _source_modules()
    found = []
    for cls, f in FIELDS:
        if not isinstance(SUPPORT.get(f"{cls.__name__}.{f.name}"), Unsupported):
            continue
        if f.name in SHARED_NAMES:
            continue
        allowed = READ_WITHOUT_EFFECT.get(f.name, set())
        readers = sorted(m for m, path in modules.items()
                         if m not in allowed and f.name in attributes_read(path))
        if readers:
            found.append(f"{cls.__name__}.{f.name} (read by {', '.join(readers)})")
    assert found == [], "marked Unsupported but read: " + "; ".join(found)


# --------------------------------------------------------------------------------------
# (c) setting an unsupported field gives exactly its line
# --------------------------------------------------------------------------------------


def example_value(tp: Any, default: Any) -> Any:
    """A value of type ``tp`` other than ``default``."""
    kind, inner = field_kind(tp)
    if kind == "list":
        return [example_value(inner, None)]
    if kind == "dict":
        return {"x": example_value(inner, None)}
    if typing.get_origin(inner) is Literal:
        return next(v for v in typing.get_args(inner) if v != default)
    if dataclasses.is_dataclass(inner):
        first = dataclasses.fields(inner)[0]
        return inner(**{first.name: example_value(first.type, field_default(first))})
    if inner is bool:
        return not default
    if inner is int:
        return (default or 0) + 1
    if inner is float:
        return (default or 0.0) + 0.5
    if inner is str:
        return "x" if default != "x" else "y"
    return 1  # Any


def materialize(config: schema.RftConfig, path: str) -> tuple[Any, str]:
    """The object at a :func:`class_sites` path of a config built from ``config`` with the
    sections on the way created (absent lists, mappings and ``None`` sections filled), and
    its dotted key as a config writes it."""
    obj: Any = config
    key = ""
    for segment in path.split(".") if path else ():
        if segment == "<name>":
            continue
        name = segment.removesuffix("[0]")
        kind, inner = field_kind({f.name: f for f in dataclasses.fields(obj)}[name].type)
        value = getattr(obj, name)
        if kind == "list":
            obj, key = (value or [inner()])[0], f"{key}{name}[0]."
        elif kind == "dict":
            obj, key = {"x": inner(), **(value or {})}["x"], f"{key}{name}.x."
        else:
            obj, key = (inner() if value is None else value), f"{key}{name}."
    return obj, key


def with_field(config: schema.RftConfig, path: str, name: str, value: Any) -> schema.RftConfig:
    """``config`` with field ``name`` of the object at the :func:`class_sites` path ``path``
    set to ``value`` (the config is frozen: new sections on the way, created as
    :func:`materialize` does)."""
    return _with_field(config, path.split(".") if path else [], name, value)


def _with_field(obj: Any, segments: list[str], name: str, value: Any) -> Any:
    if not segments:
        return dataclasses.replace(obj, **{name: value})
    segment, rest = segments[0], segments[1:]
    if segment == "<name>":
        return _with_field(obj, rest, name, value)
    attr = segment.removesuffix("[0]")
    kind, inner = field_kind({f.name: f for f in dataclasses.fields(obj)}[attr].type)
    current = getattr(obj, attr)
    if kind == "list":
        items = list(current) or [inner()]
        new: Any = [_with_field(items[0], rest, name, value), *items[1:]]
    elif kind == "dict":
        entries = {"x": inner(), **(current or {})}
        new = {**entries, "x": _with_field(entries["x"], rest, name, value)}
    else:
        new = _with_field(inner() if current is None else current, rest, name, value)
    return dataclasses.replace(obj, **{attr: new})


def _site_of(cls: type) -> str:
    sites = [path for path, site_cls in class_sites() if site_cls is cls]
    return next((p for p in sites if not below_unsupported(p)), sites[0])


def _reporting(path: str, field_key: str, entry: Unsupported) -> tuple[str, Unsupported]:
    """The key and entry whose line covers a field at ``path``: the outermost unsupported
    field on the way (its message covers what is below it), else the field's own."""
    cls: type = schema.RftConfig
    key = ""
    for segment in path.split(".") if path else ():
        if segment == "<name>":
            key += "x."
            continue
        name = segment.removesuffix("[0]")
        outer = support_of(cls, name)
        if isinstance(outer, Unsupported):
            return key + name, outer
        key += segment + "."
        cls = field_kind({f.name: f for f in dataclasses.fields(cls)}[name].type)[1]
    return field_key, entry


def test_a_default_config_gives_no_support_messages():
    assert support_messages(schema.RftConfig()) == ([], [])


@pytest.mark.parametrize("item", UNSUPPORTED, ids=[_id(i) for i in UNSUPPORTED])
def test_setting_an_unsupported_field_gives_exactly_its_line(item):
    cls, f = item
    entry = unsupported_part(support_of(cls, f.name))
    assert entry is not None
    assert "\n" not in entry.reason and entry.reason
    if isinstance(support_of(cls, f.name), Consumed):
        assert entry.when is not None and entry.example is not None, \
            "the unsupported values of a consumed field need when= and example="
    path = _site_of(cls)
    _, prefix = materialize(schema.RftConfig(), path)
    value = entry.example if entry.example is not None else example_value(
        f.type, field_default(f))
    assert reported(entry, value, field_default(f)), f"example {value!r} is not reported"
    config = with_field(schema.RftConfig(), path, f.name, value)
    key, covering = _reporting(path, prefix + f.name, entry)
    problems, warnings = support_messages(config)
    line = f"{key}: {covering.reason}"
    if covering.severity == "error":
        assert (problems, warnings) == ([line], [])
    else:
        assert (problems, warnings) == ([], [line])


def test_keys_name_list_items_and_mapping_entries():
    second = schema.TasksetConfig(name="b", format=schema.FormatConfig(reply_prefix="<think>"))
    config = replaced(schema.RftConfig(), {
        "buffer.explorer_input.tasksets": [schema.TasksetConfig(name="a"), second],
        "explorer.auxiliary_models": [schema.AuxiliaryModelConfig(use_v1=False)]})
    _, warnings = support_messages(config)
    assert [w.split(":")[0] for w in warnings] == [
        "buffer.explorer_input.tasksets[1].format.reply_prefix",
        "explorer.auxiliary_models[0].use_v1"]


def test_an_unsupported_value_that_matches_when_only():
    config = replaced(schema.RftConfig(), {
        "model.logprobs": 0,  # only the sampled token's: what rft does
        "model.lora_configs": []})  # empty: full fine-tuning, as written
    assert support_messages(config) == ([], [])


@pytest.fixture
def env(tmp_path, monkeypatch):
    prepare_environment(tmp_path, monkeypatch)
    monkeypatch.setenv("RFT_PLUGINS", "rft-plugin-grpo,rft-plugin-workflows,rft-plugin-rewards,"
                       "rft-plugin-selectors")  # what base.yaml uses
    return tmp_path


def test_lora_validates_and_two_adapters_fail_naming_the_key(env):
    load_config(BASE_CONFIG, ["model.lora_configs=[{lora_rank: 16}]"])  # trained (test_lora)
    with pytest.raises(ConfigError) as caught:
        load_config(BASE_CONFIG, ["model.lora_configs=[{lora_rank: 16}, {lora_rank: 8}]"])
    assert [p.split(": ")[0] for p in caught.value.problems] == ["model.lora_configs"]


def test_tinker_fails_validation_naming_the_key(env):
    with pytest.raises(ConfigError) as caught:
        load_config(BASE_CONFIG, ["model.tinker.enable=true"])
    assert caught.value.problems == [
        f"model.tinker.enable: {SUPPORT['TinkerConfig.enable'].reason}"]


def test_over_rollout_needs_a_dynamic_sync_style_and_dynamic_timeout_a_positive_ratio(env):
    """As in Trinity-RFT: a step that may go on without some of its tasks needs a dynamic
    synchronizer.sync_style; each bad value is named in one line."""
    load_config(BASE_CONFIG, ["explorer.over_rollout.ratio=0.25",
                              "synchronizer.sync_style=explorer_driven",
                              "explorer.dynamic_timeout.enable=true"])
    with pytest.raises(ConfigError) as caught:
        load_config(BASE_CONFIG, ["explorer.over_rollout.ratio=0.25",
                                  "explorer.dynamic_timeout.enable=true",
                                  "explorer.dynamic_timeout.ratio=0"])
    assert [p.split(": ")[0] for p in caught.value.problems] == [
        "explorer.over_rollout.ratio", "explorer.dynamic_timeout.ratio"]


def test_an_unsupported_field_is_a_warning_of_load_config(env):
    loaded = load_config(BASE_CONFIG, ["buffer.explorer_input.taskset.format.image_key=null",
                                       "explorer.rollout_model.use_v1=false",
                                       "model.logprobs=5"])
    assert loaded.warnings == [
        f"model.logprobs: {SUPPORT['ModelConfig.logprobs'].reason}",
        f"explorer.rollout_model.use_v1: {SUPPORT['InferenceModelConfig.use_v1'].reason}"]


# --------------------------------------------------------------------------------------
# (d) trainer.trainer_config
# --------------------------------------------------------------------------------------


def _nested(paths: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in paths.items():
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def test_honoured_trainer_config_keys_give_no_warning():
    config = replaced(schema.RftConfig(), {"trainer.trainer_config": _nested(
        {path: 1 for path in TRAINER_CONFIG_HONOURED})})
    assert support_messages(config) == ([], [])


def test_other_trainer_config_keys_warn_by_name():
    config = replaced(schema.RftConfig(), {"trainer.trainer_config": _nested({
        "actor_rollout_ref.actor.ppo_epochs": 2,
        "actor_rollout_ref.actor.strategy": "fsdp",
        "actor_rollout_ref.rollout.n": 8,
        "trainer.balance_batch": True,
        "trainer.resume_from_path": None,  # null: unset
        "critic.model.override_config": {},  # empty mapping: nothing set
    })})
    assert support_messages(config) == ([], [
        f"trainer.trainer_config.actor_rollout_ref.actor.strategy: {TRAINER_CONFIG_REASON}",
        f"trainer.trainer_config.actor_rollout_ref.rollout.n: {TRAINER_CONFIG_REASON}",
        f"trainer.trainer_config.trainer.balance_batch: {TRAINER_CONFIG_REASON}",
    ])
    assert TRAINER_CONFIG_REASON == "not honoured by the torch trainer; it has no effect"


def test_trainer_config_of_another_trainer_is_left_to_it():
    config = replaced(schema.RftConfig(), {
        "trainer.trainer_type": "verl",
        "trainer.trainer_config": _nested({"trainer.balance_batch": True})})
    assert support_messages(config) == ([], [])


def test_trainer_config_warning_through_load_config(env):
    key = "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params"
    loaded = load_config(BASE_CONFIG, [f"{key}=0"])
    assert len(loaded.warnings) == 1  # one line, whichever check says it
    assert loaded.warnings[0].startswith(f"{key}: not honoured by the torch trainer")


def test_a_key_an_earlier_check_reported_is_not_reported_again():
    config = replaced(schema.RftConfig(), {"model.logprobs": 5,
                                           "explorer.rollout_model.use_v1": False})
    found = Findings(PluginRegistry.create())
    found.warnings.append("model.logprobs: said before")
    check_support(config, found)
    assert found.warnings == [
        "model.logprobs: said before",
        f"explorer.rollout_model.use_v1: {SUPPORT['InferenceModelConfig.use_v1'].reason}"]
    assert check_support in CHECKS and CHECKS[-1] is check_support


def _string(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string(node.left, constants), _string(node.right, constants)
        return None if left is None or right is None else left + right
    return None


def trainer_lookups() -> set[str]:
    """Every key path the trainer passes to ``options.lookup``."""
    found: set[str] = set()
    for path in sorted((ROOT / "core" / "rft" / "trainer").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {t.id: node.value.value for node in tree.body
                     if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                     and isinstance(node.value.value, str)
                     for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "lookup" and len(node.args) >= 2):
                key = _string(node.args[1], constants)
                assert key is not None, f"{path.name}: lookup key not a literal string"
                found.add(key)
    return found


def test_honoured_keys_are_the_ones_the_torch_trainer_looks_up():
    lookups = trainer_lookups()
    assert sorted(lookups - set(TRAINER_CONFIG_HONOURED)) == [], \
        "read by the trainer but missing from rft.config.support.TRAINER_CONFIG_HONOURED"
    assert sorted(set(TRAINER_CONFIG_HONOURED) - lookups) == [], \
        "listed as honoured but never looked up by the trainer"


# --------------------------------------------------------------------------------------
# docs
# --------------------------------------------------------------------------------------


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("config_support_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_support_tables_are_in_sync_with_the_registry():
    script = _script()
    text = DOCS.read_text(encoding="utf-8")
    assert script.replace_block(text, script.render()) == text, (
        "docs/configuration.md is out of date: run python scripts/config_support_table.py "
        "--write")


def test_docs_tables_have_a_row_for_every_field():
    block = _script().render()
    for cls, f in FIELDS:
        if cls is schema.InferenceModelConfig or cls is schema.AuxiliaryModelConfig:
            continue  # the rollout model's table lists the shared fields
        assert f"| `{f.name}` |" in block, _id((cls, f))
    for path in TRAINER_CONFIG_HONOURED:
        assert f"| `{path}` |" in block
