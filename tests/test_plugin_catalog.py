"""The plugin catalog (``core/rft/plugin_catalog.toml``, read by :mod:`rft.plugin_catalog`):
what it says about names that are not installed, and one line for a bad entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.errors import PluginError
from rft.plugin_catalog import CATALOG_PATH, load_catalog
from rft.plugins import KINDS, PluginRegistry, plugin_catalog

GOOD = '''
[providers."rft-plugin-x"]
algorithm = ["x"]
advantage_fn = ["x", "x_plus"]

[[external]]
kind = "workflow"
names = ["thing*", "thing_exact"]
reason = "needs the thing package"

[[external]]
kind = "workflow"
names = ["thing_long*"]
reason = "needs the long thing"
'''


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "catalog.toml"
    path.write_text(text)
    return load_catalog(path, KINDS)


def test_a_catalog_reads_into_providers_and_external_reasons(tmp_path: Path) -> None:
    path = tmp_path / "catalog.toml"
    path.write_text(GOOD)
    catalog = load_catalog(path, KINDS)
    assert catalog.provider("advantage_fn", "x_plus") == "rft-plugin-x"
    assert catalog.provider("algorithm", "x_plus") is None
    assert catalog.distributions() == ["rft-plugin-x"]
    assert catalog.external_reason("workflow", "thing_exact") == "needs the thing package"
    assert catalog.external_reason("workflow", "thing_other") == "needs the thing package"
    assert catalog.external_reason("workflow", "thing_long_v2") == "needs the long thing"
    assert catalog.external_reason("reward_fn", "thing_other") is None


@pytest.mark.parametrize("text, line", [
    ('[providers."rft-plugin-x"]\nalgorithms = ["x"]\n',
     "providers.rft-plugin-x.algorithms: unknown plugin kind 'algorithms'"),
    ('[providers."rft-plugin-x"]\nalgorithm = "x"\n',
     "providers.rft-plugin-x.algorithm: must be a non-empty list of names, got 'x'"),
    ('[providers."rft-plugin-x"]\nalgorithm = ["x", 3]\n',
     "providers.rft-plugin-x.algorithm: 3 is not a name"),
    ('[providers.a]\nalgorithm = ["x"]\n[providers.b]\nalgorithm = ["x"]\n',
     "providers.b.algorithm: 'x' is also listed under providers.a"),
    ('[[external]]\nkind = "workflow"\nnames = ["w"]\nreason = "r"\n'
     '[[external]]\nkind = "workflow"\nnames = ["v"]\n',
     "external[1].reason: missing"),
    ('[[external]]\nkind = "workflow"\nnames = ["w"]\nreason = "r"\nwhy = "?"\n',
     "external[0].why: unknown field (fields: kind, names, reason)"),
    ('[[external]]\nkind = "workflows"\nnames = ["w"]\nreason = "r"\n',
     "external[0].kind: unknown plugin kind 'workflows'"),
    ('[provider."rft-plugin-x"]\nalgorithm = ["x"]\n',
     "provider: unknown table (the catalog has providers and external)"),
])
def test_a_bad_catalog_entry_is_one_line_naming_the_file_and_the_entry(
        tmp_path: Path, text: str, line: str) -> None:
    with pytest.raises(PluginError) as raised:
        _load(tmp_path, text)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'catalog.toml'}: {line}")


def test_a_catalog_that_is_not_toml_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"catalog\.toml: not a valid TOML file: .*line 1"):
        _load(tmp_path, "[providers\n")


def test_the_shipped_catalog_loads_and_drives_the_unknown_name_message() -> None:
    """The catalog in the core is valid, and the unknown-name line says what it holds: an
    install hint for a name of an official distribution, the reason for a Trinity name."""
    catalog = load_catalog(CATALOG_PATH, KINDS)
    assert catalog == plugin_catalog()
    assert catalog.provider("trainer", "verl") == "rft-plugin-verl"
    registry = PluginRegistry.create(kinds=("workflow",), autoload=False)
    assert registry.unknown_name_message("workflow", "math_boxed_workflow", key="k") == (
        "k: unknown workflow 'math_boxed_workflow' (it is provided by rft-plugin-workflows: "
        "pip install rft-plugin-workflows)")
    assert registry.unknown_name_message("workflow", "agentscope_workflow_adapter_v2") == (
        "unknown workflow 'agentscope_workflow_adapter_v2' (" +
        catalog.external["workflow", "agentscope_workflow_adapter*"] + ")")
