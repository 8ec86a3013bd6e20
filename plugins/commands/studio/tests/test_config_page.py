"""The config generator without a browser: the form is the schema's (a new field appears
by itself), plugin names and ``*_args`` forms come from the registry, the checks are
``rft validate``'s, and import -> export keeps every example's resolved config."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient

from rft import cli, hookimpl
from rft.config import schema
from rft.config.field_support import Unsupported, consumed, entry_of
from rft.config.support import class_sites, field_kind, schema_classes
from rft.errors import ConfigError, RftError
from rft.plugins import PluginRegistry, create_plugin_manager
from rft_plugin_studio.app import build_app
from rft_plugin_studio.config_page import config_page
from rft_plugin_studio.config_page_checks import check_document
from rft_plugin_studio.page import StudioContext
from rft_plugin_studio.schema_form import FormBuilder, stage_overlays, walk
from rft_plugin_studio.schema_form_tables import BEGINNER, PLUGIN_FIELDS
from rft_plugin_studio.schema_form_values import (
    add_item, dump_document, parse_document, parse_value, remove_item, set_value,
    unset_value)

REPO = Path(__file__).resolve().parents[4]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


def _client(tmp_path: Path, registry: PluginRegistry) -> TestClient:
    context = StudioContext(tmp_path)
    return TestClient(build_app(context, [config_page(context, registry)]))


def test_expert_form_holds_every_schema_field_with_doc_default_and_support(
        registry: PluginRegistry) -> None:
    nodes = {n.key: n for n in walk(FormBuilder(registry).build({}, "expert"))}
    for path, cls in class_sites():
        if "[0]" in path or "<name>" in path:
            continue  # list items appear once added; mappings of sections are YAML
        for f in dataclasses.fields(cls):
            key = f"{path}.{f.name}" if path else f.name
            assert key in nodes, key
            entry = entry_of(f)
            assert nodes[key].unsupported == isinstance(entry, Unsupported), key
    lr = nodes["algorithm.optimizer.lr"]
    assert (lr.kind, lr.default, lr.support) == ("float", "1.0e-06", "yes")
    assert lr.doc == "Peak learning rate of the actor."
    unsupported = [n for n in nodes.values() if n.unsupported]
    assert unsupported and all(n.support.startswith("no (") and n.note for n in unsupported)


def test_a_field_added_to_the_schema_appears_without_a_studio_change(
        tmp_path: Path, registry: PluginRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclass(frozen=True)
    class ProbeConfig(schema.RftConfig):
        studio_probe_knob: int = field(default=7, metadata=consumed("rft.studio_probe"))
        """A knob only this test declares."""

    monkeypatch.setattr(schema, "RftConfig", ProbeConfig)
    page = _client(tmp_path, registry).get("/config?mode=expert").text
    assert 'data-key="studio_probe_knob"' in page
    assert "A knob only this test declares." in page and 'placeholder="7"' in page


class _ProbeReward:
    """A reward function registered by this test only."""

    @dataclass
    class Args:
        bonus_weight: float = 0.5
        """How much the bonus counts."""

    def __call__(self, **kwargs: Any) -> dict[str, float]:
        return {"probe": 0.0}


class _ProbePlugin:
    @hookimpl
    def register_reward_fns(self) -> dict[str, Any]:
        return {"studio_probe_reward": _ProbeReward}


def test_a_users_plugin_is_offered_and_its_args_get_a_form(tmp_path: Path) -> None:
    registry = PluginRegistry(create_plugin_manager(extra_plugins=[_ProbePlugin()]))
    client = _client(tmp_path, registry)
    key = "buffer.explorer_input.taskset.default_reward_fn_type"
    document = {"buffer": {"explorer_input": {"taskset": {
        "default_reward_fn_type": "studio_probe_reward"}}}}
    html = client.post("/config/api/form", json={"yaml": dump_document(document),
                                                 "mode": "expert"}).json()["html"]
    assert f'data-key="{key}"' in html and '<option value="studio_probe_reward">' in html
    args_key = "buffer.explorer_input.taskset.reward_fn_args.bonus_weight"
    assert f'data-key="{args_key}"' in html and "How much the bonus counts." in html
    nodes = {n.key: n for n in walk(FormBuilder(registry).build(document))}
    assert nodes[args_key].kind == "float" and nodes[args_key].default == "0.5"
    assert nodes[key].plugin_kind == "reward_fn"


def _schema_path_exists(path: str) -> bool:
    cls: type = schema.RftConfig
    parts = path.split(".")
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            return False
        kind, inner = field_kind(fields[part].type)
        if cls is schema.StageConfig and part in stage_overlays():
            inner = stage_overlays()[part]
        if i < len(parts) - 1:
            if not dataclasses.is_dataclass(inner):
                return False
            assert isinstance(inner, type)
            cls = inner
    return True


def test_every_beginner_setting_and_plugin_field_is_a_real_field() -> None:
    assert [s.path for s in BEGINNER if not _schema_path_exists(s.path)] == []
    for entry in PLUGIN_FIELDS:
        names = {f.name for f in dataclasses.fields(entry.section)}
        assert entry.name in names and (entry.args is None or entry.args in names), entry
    # every free-form plugin-arguments mapping beside a name field is listed
    for cls in schema_classes():
        for f in dataclasses.fields(cls):
            if f.name.endswith("_args") and field_kind(f.type)[0] == "dict" \
                    and f.name.removesuffix("_args") in {g.name for g in dataclasses.fields(cls)}:
                assert any(e.args == f.name and issubclass(cls, e.section)
                           for e in PLUGIN_FIELDS), f"{cls.__name__}.{f.name}"


def test_beginner_mode_keeps_the_essential_settings_only(registry: PluginRegistry) -> None:
    beginner = {n.key for n in walk(FormBuilder(registry).build({}, "beginner"))}
    assert {"project", "model.model_path", "algorithm.algorithm_type",
            "buffer.explorer_input.taskset.path", "stages"} <= beginner
    assert "trainer.grad_clip" not in beginner and "log.level" not in beginner
    staged = FormBuilder(registry).build({"stages": [{"stage_name": "sft"}]}, "beginner")
    assert "stages[0].buffer.batch_size" in {n.key for n in walk(staged)}


def test_document_edits_by_dotted_key() -> None:
    document: dict[str, Any] = {}
    set_value(document, "buffer.explorer_input.taskset.path", "a.jsonl")
    set_value(document, "algorithm.optimizer.lr", parse_value("algorithm.optimizer.lr", "3e-3"))
    assert document["algorithm"]["optimizer"]["lr"] == pytest.approx(0.003)
    add_item(document, "stages")
    set_value(document, "stages[0].buffer.batch_size", 8)
    assert document["stages"] == [{"buffer": {"batch_size": 8}}]
    unset_value(document, "buffer.explorer_input.taskset.path")
    assert "buffer" not in document  # emptied sections go too: unset means the default
    remove_item(document, "stages[0]")
    assert "stages" not in document
    with pytest.raises(RftError, match=r"^stages\[3\]\.mode: no list item \[3\]"):
        set_value(document, "stages[3].mode", "train")
    with pytest.raises(RftError, match=r"^model\.model_path: ") as caught:
        parse_value("model.model_path", "[unclosed")
    assert "\n" not in str(caught.value)


def test_a_broken_import_is_one_line_with_its_position() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_document("model:\n  model_path: [unclosed\n", "pasted.yaml")
    assert caught.value.problems[0].startswith("pasted.yaml:") and len(caught.value.problems) == 1


def test_live_check_gives_rft_validates_line_for_the_key(
        tmp_path: Path, registry: PluginRegistry, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    bad = dict(yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text()))
    bad["buffer"] = {"batch_size": "many"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert cli.main(["validate", str(path)]) != 0
    printed = [line.removeprefix("rft: ") for line in capsys.readouterr().err.splitlines()
               if line.startswith("rft: buffer.batch_size:")]
    found = _client(tmp_path, registry).post("/config/api/check",
                                             json={"yaml": path.read_text()}).json()
    assert printed and [p for p in found["problems"] if p.startswith("buffer.batch_size:")] \
        == printed


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_import_then_export_keeps_the_resolved_config(
        path: Path, tmp_path: Path, registry: PluginRegistry,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the examples' paths are relative to the repository root
    client = _client(tmp_path, registry)
    imported = client.post("/config/api/form", json={"yaml": path.read_text(),
                                                     "mode": "expert"}).json()
    exported = client.post("/config/api/export", json={"yaml": imported["yaml"]}).json()
    original = check_document(parse_document(path.read_text()), registry)
    again = check_document(parse_document(exported["yaml"]), registry)
    assert exported["valid"] == original.valid
    assert again.problems == original.problems and again.resolved == original.resolved
    if original.valid:
        assert again.resolved  # a valid example has its stages resolved
