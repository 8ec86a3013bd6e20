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
    assert registration.distribution == "rft-framework"
    assert registration.plugin == "rft.builtin.monitors"
    assert {info.distribution for info in registry.plugins()} == {"rft-framework"}


def test_entry_point_of_a_separately_installed_distribution_is_found():
    registry = PluginRegistry.create()
    registration = registry.registration("task_selector", "shuffle")
    assert registration.distribution == "rft-plugin-selectors"
    info = {i.name: i for i in registry.plugins()}["selectors"]
    assert info.hooks == ["register_task_selectors"]
    assert info.registers == {"task_selector": ["difficulty_based", "offline_easy2hard",
                                                "random", "shuffle"]}


def test_the_default_task_selector_is_the_cores():
    """A default the user never wrote resolves with the core alone: ``pip install
    rft-framework rft-plugin-<algorithm>`` runs without rft-plugin-selectors."""
    from rft.config.schema import TaskSelectorConfig

    registry = PluginRegistry.create(autoload=False)
    default = TaskSelectorConfig().selector_type
    assert default == "sequential"
    assert registry.registration("task_selector", default).distribution == "rft-framework"


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


def test_an_extra_plugin_already_loaded_through_its_entry_point_is_not_registered_twice():
    """``rft_run(plugins=[module])`` of an installed plugin: its module is the entry point's
    object too (pluggy refused the second registration under another name)."""
    import rft_plugin_selectors

    registry = PluginRegistry.create(extra_plugins=[rft_plugin_selectors])
    assert registry.registration("task_selector", "shuffle").plugin == "selectors"


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
    assert listed["rft.builtin.monitors"]["distribution"] == "rft-framework"
    assert listed["selectors"]["distribution"] == "rft-plugin-selectors"
    assert listed["selectors"]["registers"]["task_selector"] == [
        "difficulty_based", "offline_easy2hard", "random", "shuffle"]
    assert listed["rft.builtin.selectors"]["registers"]["task_selector"] == ["sequential"]


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


def test_throwaway_distribution_is_selected_by_name_and_missed_when_uninstalled(tmp_path,
                                                                                tiny_model_dir):
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
    (tmp_path / "tasks.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    env = {**os.environ, "RFT_TEST_MODEL": str(tiny_model_dir),
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
        "'simple_workflow_v2'; did you mean 'simple_workflow' or 'simple_mm_workflow'?",
        "rft: buffer.explorer_input.taskset.default_reward_fn_type: unknown reward function "
        "'accuracy_reward_v2'; did you mean 'accuracy_reward'?",
    ]


def test_install_hints_match_what_the_plugin_distributions_register():
    """The catalog's providers (the "pip install …" hint of an unknown name) equal what
    the project's plugin distributions, all installed here, really register."""
    from rft.plugins import plugin_catalog

    registered = {(kind, name): info.distribution
                  for info in PluginRegistry.create().plugins()
                  if info.distribution.startswith("rft-plugin-")
                  for kind, names in info.registers.items() for name in names}
    assert plugin_catalog().providers == registered


# ---- plugin distributions built for another core ------------------------------------------

FAKE_PLUGIN = """
from rft import hookimpl


def reward(response, truth, args):
    return {{"accuracy": 0.0}}


@hookimpl
def register_reward_fns():
    return {{"{module}_reward": reward}}
"""


def fake_distribution(site: Path, dist: str, module: str, requires: list[str]) -> Path:
    """A plugin distribution as importlib.metadata sees an installed one: ``module``, and a
    ``*.dist-info`` with METADATA (``Requires-Dist`` lines) and entry_points.txt, written
    into ``site`` (put it on ``sys.path`` / ``PYTHONPATH``); returns the dist-info folder."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(FAKE_PLUGIN.format(module=module))
    info = site / f"{dist.replace('-', '_')}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n"
        + "".join(f"Requires-Dist: {line}\n" for line in requires))
    (info / "entry_points.txt").write_text(f"[rft]\n{module} = {module}\n")
    return info


@pytest.mark.parametrize("requires, compatible, requires_core", [
    (["rft-framework>=0.1,<0.2"], True, "rft-framework>=0.1,<0.2"),
    (["rft_framework<0.2,>=0.1", "numpy"], True, "rft_framework>=0.1,<0.2"),
    (["rft-framework<0.1"], False, "rft-framework<0.1"),
    (["rft-framework>=0.2,<0.3"], False, "rft-framework>=0.2,<0.3"),
    (["numpy", 'rft-framework<0.1; extra == "old"'], True, None),
    ([], True, None),
    (["rft"], False, "rft"),
    (["rft>=0.1", "rft-framework>=0.1"], False, "rft>=0.1"),
])
def test_core_requirement_is_checked_against_the_core_version(tmp_path, requires, compatible,
                                                              requires_core):
    from importlib.metadata import PathDistribution

    from rft.plugins import core_requirement

    info = fake_distribution(tmp_path, "rft-plugin-fake", "rft_plugin_fake", requires)
    found = core_requirement(PathDistribution(info), "0.1.3")
    assert (found.distribution, found.compatible, found.requires_core) == (
        "rft-plugin-fake", compatible, requires_core)
    assert (found.warning is None) == compatible


def test_core_requirement_messages(tmp_path):
    from importlib.metadata import PathDistribution

    from rft.plugins import core_requirement

    old = fake_distribution(tmp_path, "rft-plugin-new", "rft_plugin_new", ["rft-framework<0.1"])
    found = core_requirement(PathDistribution(old), "0.1.0")
    assert found.problem == "needs rft-framework<0.1"
    assert found.warning == ("plugin distribution rft-plugin-new requires rft-framework<0.1 "
                             "(installed: rft-framework 0.1.0); it was built for another core "
                             "version and may not work")
    renamed = fake_distribution(tmp_path, "rft-plugin-old", "rft_plugin_old", ["rft"])
    found = core_requirement(PathDistribution(renamed), "0.3.1")
    assert found.warning == (
        "plugin distribution rft-plugin-old depends on 'rft', the unrelated PyPI project 'rft' "
        "(not this framework); it should depend on 'rft-framework>=0.3,<0.4' "
        "(installed: rft-framework 0.3.1)")


def test_compatible_core_bound():
    from rft.plugins import compatible_core_bound

    assert compatible_core_bound("0.1.0") == ">=0.1,<0.2"
    assert compatible_core_bound("0.12.3.dev1") == ">=0.12,<0.13"
    assert compatible_core_bound("1.4.0") == ">=1,<2"


def test_incompatible_plugin_is_loaded_and_flagged(tmp_path, monkeypatch):
    fake_distribution(tmp_path, "rft-plugin-stale", "rft_plugin_stale", ["rft-framework<0.1"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rft_plugin_stale", raising=False)
    registry = PluginRegistry.create()
    assert registry.has("reward_fn", "rft_plugin_stale_reward")  # a warning, not an error
    infos = {info.name: info for info in registry.plugins()}
    stale = infos["rft_plugin_stale"]
    assert (stale.compatible, stale.requires_core) == (False, "rft-framework<0.1")
    assert stale.as_dict()["compatible"] is False
    assert infos["selectors"].compatible and infos["rft.builtin.kl"].compatible
    sys.modules.pop("rft_plugin_stale", None)


def test_every_installed_project_plugin_declares_the_core_bound():
    """The distributions of plugins/ (installed in this venv) all accept this core."""
    from rft.plugins import _core_version, compatible_core_bound

    plugins = json.loads(subprocess.run([*RFT, "plugins", "--json"], capture_output=True,
                                        text=True, check=True).stdout)
    assert all(p["compatible"] for p in plugins)
    bound = "rft-framework" + compatible_core_bound(_core_version())
    assert {p["requires_core"] for p in plugins
            if p["distribution"].startswith("rft-plugin-")} == {bound}
    assert {p["requires_core"] for p in plugins if p["distribution"] == "rft-framework"} == {
        None}


def test_plugin_pyprojects_follow_the_core_bound_rule():
    """Each plugins/**/pyproject.toml depends on ``rft-framework>=0.N,<0.N+1`` for the core
    version 0.N of the root pyproject.toml, and never on ``rft`` (an unrelated PyPI project)."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from rft.plugins import compatible_core_bound

    core = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert core["name"] == "rft-framework"
    bound = SpecifierSet(compatible_core_bound(core["version"]))
    projects = sorted((REPO / "plugins").rglob("pyproject.toml"))
    assert len(projects) >= 14
    for path in projects:
        project = tomllib.loads(path.read_text())["project"]
        assert project["name"].startswith("rft-plugin-"), path
        on_core = [(r.name, r.specifier) for r in map(Requirement, project["dependencies"])
                   if r.name in ("rft", "rft-framework")]
        assert on_core == [("rft-framework", bound)], path


def test_cli_flags_incompatible_and_misnamed_plugins(tmp_path, tiny_model_dir):
    from config_corpus import BASE_CONFIG
    from rft.plugins import _core_version

    site = tmp_path / "site"
    fake_distribution(site, "rft-plugin-stale", "rft_plugin_stale", ["rft-framework<0.1"])
    fake_distribution(site, "rft-plugin-renamed", "rft_plugin_renamed", ["rft>=0.1"])
    env = {**os.environ, "PYTHONPATH": str(site),
           "RFT_TEST_MODEL": str(tiny_model_dir), "RFT_TEST_DATA": str(tmp_path),
           "RFT_TEST_CHECKPOINTS": str(tmp_path / "ck")}
    table = subprocess.run([*RFT, "plugins"], capture_output=True, text=True, env=env,
                           check=True).stdout.splitlines()
    flagged = sorted(row.split()[0] for row in table if "incompatible" in row)
    assert flagged == ["rft_plugin_renamed", "rft_plugin_stale"]
    assert next(row for row in table if row.startswith("rft_plugin_stale ")).endswith(
        "reward_fn: rft_plugin_stale_reward  [incompatible: needs rft-framework<0.1]")

    listed = {p["name"]: p for p in json.loads(subprocess.run(
        [*RFT, "plugins", "--json"], capture_output=True, text=True, env=env,
        check=True).stdout)}
    assert (listed["rft_plugin_stale"]["compatible"],
            listed["rft_plugin_stale"]["requires_core"]) == (False, "rft-framework<0.1")
    assert (listed["rft_plugin_renamed"]["compatible"],
            listed["rft_plugin_renamed"]["requires_core"]) == (False, "rft>=0.1")

    (tmp_path / "tasks.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    config = tmp_path / "config.yaml"
    config.write_text(BASE_CONFIG.read_text())
    validated = subprocess.run([*RFT, "validate", str(config)], capture_output=True,
                               text=True, env=env)
    assert validated.returncode == 0, validated.stderr  # a warning, not an error
    version = _core_version()
    assert sorted(line for line in validated.stderr.splitlines()
                  if "plugin distribution" in line) == [
        "rft: warning: plugin distribution rft-plugin-renamed depends on 'rft>=0.1', the "
        "unrelated PyPI project 'rft' (not this framework); it should depend on "
        f"'rft-framework>=0.1,<0.2' (installed: rft-framework {version})",
        "rft: warning: plugin distribution rft-plugin-stale requires rft-framework<0.1 "
        f"(installed: rft-framework {version}); it was built for another core version and "
        "may not work",
    ]
    filtered = subprocess.run([*RFT, "validate", str(config)], capture_output=True, text=True,
                              env={**env, "RFT_PLUGINS": "rft-plugin-stale"})
    assert [line for line in filtered.stderr.splitlines() if "plugin distribution" in line
            ] == [line for line in validated.stderr.splitlines() if "rft-plugin-stale" in line]


def test_trinity_names_that_need_a_third_party_package_say_which():
    registry = PluginRegistry.create()
    message = registry.unknown_name_message("workflow", "agentscope_v1_react_search_workflow",
                                            key="buffer.explorer_input.taskset."
                                                "default_workflow_type")
    assert message.startswith("buffer.explorer_input.taskset.default_workflow_type: unknown "
                              "workflow 'agentscope_v1_react_search_workflow' (Trinity-RFT's "
                              "AgentScope web-search agent: its tool searches the web")
    assert "did you mean" not in message
    assert "alfworld" in registry.unknown_name_message("workflow", "alfworld_workflow")
