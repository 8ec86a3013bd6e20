"""rft-plugin-convert-verl: the ``rft convert-verl`` command, a veRL launch
(``python -m verl.trainer.main_ppo key=value ...``) → an rft config, following the veRL
alignment guide.

Registered names:

- command ``convert-verl`` (:mod:`~rft_plugin_convert_verl.cli`);
- workflow ``verl_workflow`` (:mod:`~rft_plugin_convert_verl.workflow`): a task in veRL's
  dataset layout, rewarded as veRL's default reward manager rewards it (by
  ``data_source``, or a custom reward function) — the workflow converted configs use.

From Python::

    from rft_plugin_convert_verl import convert_text
    result = convert_text(open("run_qwen2-7b_rm.sh").read(), "run_qwen2-7b_rm.sh")
    print(result.yaml)            # the rft config, each key commented with its veRL source
    result.report.print()         # veRL settings with no equivalent, notes

Modules: :mod:`~rft_plugin_convert_verl.shell` (a launch script evaluated by bash under
stubs), :mod:`~rft_plugin_convert_verl.parse` (launch script / override list →
overrides), :mod:`~rft_plugin_convert_verl.mapping` (the rules),
:mod:`~rft_plugin_convert_verl.emit` (commented YAML),
:mod:`~rft_plugin_convert_verl.report`, :mod:`~rft_plugin_convert_verl.convert`
(:func:`convert_text`), :mod:`~rft_plugin_convert_verl.cli` (the command). docs/verl.md
lists every rule.

This module is the plugin's entry point, imported on every ``rft`` start: the command's
definition is imported when ``register_commands`` is called and the converter (which
imports rft.config and PyYAML) when the command runs or on first use of the names below;
the workflow when ``register_workflows`` is called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rft import hookimpl
from rft.commands import Command

if TYPE_CHECKING:
    from rft_plugin_convert_verl.cli import COMMAND
    from rft_plugin_convert_verl.convert import ConvertResult, convert_text
    from rft_plugin_convert_verl.emit import to_yaml
    from rft_plugin_convert_verl.parse import VerlConvertError, parse_launch

__all__ = ["COMMAND", "ConvertResult", "VerlConvertError", "convert_text", "parse_launch",
           "to_yaml"]

_LAZY: dict[str, str] = {
    "COMMAND": "rft_plugin_convert_verl.cli",
    "ConvertResult": "rft_plugin_convert_verl.convert",
    "convert_text": "rft_plugin_convert_verl.convert",
    "to_yaml": "rft_plugin_convert_verl.emit",
    "VerlConvertError": "rft_plugin_convert_verl.parse",
    "parse_launch": "rft_plugin_convert_verl.parse",
}
"""Public names imported on first access (PEP 562), with the module that defines each."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_commands() -> dict[str, Command]:
    # imported here, not at module level, so that ``python -m rft_plugin_convert_verl.cli``
    # does not find its module already imported by this package
    from rft_plugin_convert_verl.cli import COMMAND

    return {"convert-verl": COMMAND}


@hookimpl
def register_workflows() -> dict[str, Any]:
    from rft_plugin_convert_verl.workflow import VerlWorkflow

    return {"verl_workflow": VerlWorkflow}
