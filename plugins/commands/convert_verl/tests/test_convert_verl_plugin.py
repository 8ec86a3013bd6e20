"""rft-plugin-convert-verl as a plugin: its entry point contributes ``convert-verl`` to the
``rft`` command through ``register_commands`` and the ``verl_workflow`` that converted
configs name through ``register_workflows``, and importing it stays light."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rft.commands import Command
from rft.plugins import PluginRegistry

RFT = [sys.executable, "-m", "rft.cli"]


def test_help_lists_convert_verl_contributed_by_the_plugin() -> None:
    result = subprocess.run([*RFT, "--help"], capture_output=True, text=True, check=True)
    words = " ".join(result.stdout.split())
    assert "run an experiment from a config convert-verl convert a veRL launch script " \
        "(python -m verl.trainer.main_ppo key=value ...) into an rft config" in words
    registration = PluginRegistry.create().registration("command", "convert-verl")
    assert (registration.plugin, registration.distribution) == (
        "convert_verl", "rft-plugin-convert-verl")
    assert isinstance(registration.implementation, Command)


def test_rft_plugins_shows_the_command() -> None:
    out = subprocess.run([*RFT, "plugins", "--json"], capture_output=True, text=True,
                         check=True).stdout
    listed = {p["name"]: p for p in json.loads(out)}["convert_verl"]
    assert listed["distribution"] == "rft-plugin-convert-verl"
    assert sorted(listed["hooks"]) == ["register_commands", "register_workflows"]
    assert listed["registers"] == {"command": ["convert-verl"], "workflow": ["verl_workflow"]}


def test_the_workflow_is_registered() -> None:
    from rft_plugin_convert_verl.workflow import VerlWorkflow

    registration = PluginRegistry.create().registration("workflow", "verl_workflow")
    assert registration.distribution == "rft-plugin-convert-verl"
    assert registration.implementation is VerlWorkflow


def test_without_the_plugin_the_command_says_what_to_install(tmp_path) -> None:
    result = subprocess.run([*RFT, "convert-verl", str(tmp_path / "run.sh")],
                            capture_output=True, text=True,
                            env={**os.environ, "RFT_PLUGINS": "rft-plugin-selectors"})
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("rft: unknown command 'convert-verl' (it is provided by "
                             "rft-plugin-convert-verl: pip install rft-plugin-convert-verl)\n")


def test_entry_point_imports_neither_the_converter_nor_torch() -> None:
    code = ("import sys, rft_plugin_convert_verl as p; p.register_commands(); "
            "print(sorted(m for m in ('torch', 'yaml', 'rft.config', "
            "'rft_plugin_convert_verl.mapping') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_module_runs_stand_alone_without_warnings(tmp_path) -> None:
    result = subprocess.run([sys.executable, "-W", "error", "-m", "rft_plugin_convert_verl.cli",
                             str(tmp_path / "missing.sh")], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (2, f"rft: {tmp_path}/missing.sh: no such "
                                                     "file\n")
