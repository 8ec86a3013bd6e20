"""The plugin manager: built-ins, entry points, environment switches, lookups, errors."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rft import hookimpl, hookspecs
from rft.errors import DuplicateNameError, PluginError, UnknownNameError
from rft.plugins import KINDS, PluginRegistry, args_type_of

REPO = Path(__file__).resolve().parents[1]
RFT = [sys.executable, "-m", "rft.cli"]


def test_builtins_are_registered_as_ordinary_plugins():
    registry = PluginRegistry.create(autoload=False)
    registration = registry.registration("monitor", "jsonl")
    assert registration.distribution == "rft"
    assert registration.plugin == "rft.builtin.monitors"
    assert {info.distribution for info in registry.plugins()} == {"rft"}


def test_entry_point_of_a_separately_installed_distribution_is_found():
    registry = PluginRegistry.create()
    registration = registry.registration("task_selector", "shuffle")
    assert registration.distribution == "rft-plugin-selectors"
    info = {i.name: i for i in registry.plugins()}["selectors"]
    assert info.hooks == ["register_task_selectors"]
    assert info.registers == {"task_selector": ["difficulty_based", "offline_easy2hard",
                                                "random", "sequential", "shuffle"]}


def test_disable_autoload_keeps_only_builtins(monkeypatch):
    monkeypatch.setenv("RFT_DISABLE_PLUGIN_AUTOLOAD", "1")
    registry = PluginRegistry.create()
    assert not registry.has("task_selector", "shuffle")
    assert registry.has("monitor", "console")


def test_allow_list_filters_distributions(monkeypatch):
    monkeypatch.setenv("RFT_PLUGINS", "some-other-distribution")
    assert not PluginRegistry.create().has("task_selector", "shuffle")
    monkeypatch.setenv("RFT_PLUGINS", "rft-plugin-selectors")
    assert PluginRegistry.create().has("task_selector", "shuffle")


def test_trace_prints_hook_calls(monkeypatch, capsys):
    monkeypatch.setenv("RFT_TRACE_PLUGINS", "1")
    PluginRegistry.create()
    err = capsys.readouterr().err
    assert ("rft-trace: rft.builtin.monitors.register_monitors() -> ['console', 'jsonl', "
            "'mlflow', 'tensorboard', 'wandb']") in err
    assert "rft-trace: selectors.register_task_selectors()" in err


def test_a_fresh_manager_per_registry():
    class Extra:
        @hookimpl
        def register_monitors(self):
            return {"extra_monitor": object()}

    with_extra = PluginRegistry.create(extra_plugins=[Extra()])
    assert with_extra.has("monitor", "extra_monitor")
    assert not PluginRegistry.create().has("monitor", "extra_monitor")


def test_unknown_name_suggests_close_names():
    registry = PluginRegistry.create()
    with pytest.raises(UnknownNameError) as caught:
        registry.get("task_selector", "shufle", key="buffer.explorer_input.taskset."
                                                   "task_selector.selector_type")
    assert str(caught.value) == (
        "buffer.explorer_input.taskset.task_selector.selector_type: unknown task selector "
        "'shufle'; did you mean 'shuffle'?")


def test_unknown_name_names_the_providing_package():
    registry = PluginRegistry.create(autoload=False)
    message = registry.unknown_name_message("task_selector", "shuffle", key="k")
    assert message == ("k: unknown task selector 'shuffle' (it is provided by "
                       "rft-plugin-selectors: pip install rft-plugin-selectors)")


def test_unknown_name_without_close_match_lists_registered_names():
    registry = PluginRegistry.create()
    assert registry.unknown_name_message("monitor", "zzz") == (
        "unknown monitor 'zzz'; registered: console, jsonl, mlflow, tensorboard, wandb")


def test_duplicate_names_name_both_plugins():
    class Twin:
        @hookimpl
        def register_task_selectors(self):
            return {"shuffle": object()}

    with pytest.raises(DuplicateNameError) as caught:
        PluginRegistry.create(extra_plugins=[Twin()])
    message = str(caught.value)
    assert "task selector 'shuffle' is registered twice" in message
    assert "rft-plugin-selectors" in message and "plugin 'selectors'" in message


def test_hook_returning_a_non_dict_is_a_plugin_error():
    class Broken:
        @hookimpl
        def register_workflows(self):
            return ["not", "a", "dict"]

    with pytest.raises(PluginError, match=r"register_workflows\(\) must return a dict"):
        PluginRegistry.create(extra_plugins=[Broken()])


def test_hook_raising_is_a_plugin_error_naming_the_plugin():
    class Raising:
        @hookimpl
        def register_reward_fns(self):
            raise RuntimeError("boom")

    with pytest.raises(PluginError, match=r"register_reward_fns\(\) raised RuntimeError: boom"):
        PluginRegistry.create(extra_plugins=[Raising()])


def test_args_type_is_read_from_the_implementation():
    registry = PluginRegistry.create()
    jsonl = registry.get("monitor", "jsonl")
    assert args_type_of(jsonl).__name__ == "JsonlArgs"
    assert args_type_of(object()) is None


def test_every_hook_is_documented_and_has_a_kind():
    specs = {name: fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
             if hasattr(fn, "rft_spec")}
    assert set(specs) == {kind.hook for kind in KINDS.values()}
    docs = (REPO / "docs" / "plugins.md").read_text()
    for name, fn in specs.items():
        doc = inspect.getdoc(fn) or ""
        assert ":return:" in doc and "Example::" in doc, f"{name} lacks its return contract"
        assert f"`{name}`" in docs, f"{name} is missing from docs/plugins.md"


def test_cli_plugins_json_lists_builtins_and_installed_distribution():
    out = subprocess.run([*RFT, "plugins", "--json"], capture_output=True, text=True,
                         check=True).stdout
    listed = {p["name"]: p for p in json.loads(out)}
    assert listed["rft.builtin.monitors"]["distribution"] == "rft"
    assert listed["selectors"]["distribution"] == "rft-plugin-selectors"
    assert listed["selectors"]["registers"]["task_selector"] == [
        "difficulty_based", "offline_easy2hard", "random", "sequential", "shuffle"]


def test_cli_plugins_table():
    out = subprocess.run([*RFT, "plugins"], capture_output=True, text=True, check=True).stdout
    header, *rows = out.splitlines()
    assert header.split() == ["plugin", "distribution", "version", "registers"]
    assert any(row.startswith("selectors ") and "rft-plugin-selectors" in row for row in rows)


def test_broken_entry_point_names_its_distribution(tmp_path):
    target = _install_distribution(tmp_path, "rft-plugin-broken", "rft_plugin_broken",
                                   "raise ImportError('missing dependency xyz')\n")
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run([*RFT, "plugins"], capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "rft: plugin 'rft_plugin_broken' from distribution 'rft-plugin-broken' failed to "
        "import: ImportError: missing dependency xyz")


def _install_distribution(tmp_path: Path, dist: str, module: str, source: str) -> Path:
    """Build and pip-install a real distribution into ``tmp_path/site``; return that dir."""
    project = tmp_path / dist
    (project / module).mkdir(parents=True)
    (project / module / "__init__.py").write_text(source)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{dist}"\nversion = "0.0.1"\n'
        f'[project.entry-points.rft]\n{module} = "{module}"\n'
        f'[tool.setuptools]\npackages = ["{module}"]\n')
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "--target",
                    str(target), str(project)], check=True, capture_output=True)
    return target


install_distribution = _install_distribution


THROWAWAY = '''
from dataclasses import dataclass
from rft import hookimpl
from rft.workflow import Workflow


class EchoWorkflow(Workflow):
    def run(self):
        return []


@dataclass
class ScaleArgs:
    scale: float = 1.0
    """Multiplier."""


def scaled_accuracy(response, truth, args):
    return {"accuracy": args.scale * float(response.strip() == str(truth))}


scaled_accuracy.Args = ScaleArgs


@hookimpl
def register_workflows():
    return {"simple_workflow_v2": EchoWorkflow}


@hookimpl
def register_reward_fns():
    return {"accuracy_reward_v2": scaled_accuracy}
'''


def test_throwaway_distribution_is_selected_by_name_and_missed_when_uninstalled(tmp_path):
    import yaml

    from config_corpus import BASE_CONFIG

    target = _install_distribution(tmp_path, "rft-plugin-throwaway", "rft_plugin_throwaway",
                                   THROWAWAY)
    config = yaml.safe_load(BASE_CONFIG.read_text())
    taskset = config["buffer"]["explorer_input"]["taskset"]
    taskset.update(default_workflow_type="simple_workflow_v2",
                   default_reward_fn_type="accuracy_reward_v2", reward_fn_args={"scale": 2.0})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "model").mkdir()
    (tmp_path / "tasks.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    env = {**os.environ, "RFT_TEST_MODEL": str(tmp_path / "model"),
           "RFT_TEST_DATA": str(tmp_path), "RFT_TEST_CHECKPOINTS": str(tmp_path / "ck")}

    installed = subprocess.run([*RFT, "validate", str(path)], capture_output=True, text=True,
                               env={**env, "PYTHONPATH": str(target)})
    assert installed.returncode == 0, installed.stderr
    resolved = yaml.safe_load(installed.stdout)["buffer"]["explorer_input"]["taskset"]
    assert resolved["default_workflow_type"] == "simple_workflow_v2"
    assert resolved["reward_fn_args"] == {"scale": 2.0}

    uninstalled = subprocess.run([*RFT, "validate", str(path)], capture_output=True, text=True,
                                 env=env)
    assert uninstalled.returncode == 2
    assert uninstalled.stderr.splitlines() == [
        "rft: buffer.explorer_input.taskset.default_workflow_type: unknown workflow "
        "'simple_workflow_v2'; did you mean 'simple_workflow'?",
        "rft: buffer.explorer_input.taskset.default_reward_fn_type: unknown reward function "
        "'accuracy_reward_v2'; did you mean 'accuracy_reward'?",
    ]


def test_install_hints_match_what_the_plugin_distributions_register():
    """``KNOWN_PROVIDERS`` (the "pip install …" hint of an unknown name) equals what the
    project's plugin distributions, all installed here, really register."""
    from rft.plugins import KNOWN_PROVIDERS

    registered = {(kind, name): info.distribution
                  for info in PluginRegistry.create().plugins()
                  if info.distribution.startswith("rft-plugin-")
                  for kind, names in info.registers.items() for name in names}
    assert KNOWN_PROVIDERS == registered
