"""Data-Juicer recipes: a YAML file (``config_path``) or an inline ``process`` list.

A recipe is Data-Juicer's config form: a mapping whose ``process`` key lists operators,
each a one-key mapping ``{op_name: {arg: value}}``. Only ``process`` is read here (the
server runs those operators in order over the rows it receives); Data-Juicer's other
global keys (``project_name``, ``np``, export paths, ...) have no effect and are ignored.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from rft.errors import RftError

Process = list[dict[str, dict[str, Any]]]
"""A recipe's ``process`` list: ``[{op_name: {arg: value}}, ...]``."""


def normalise(process: Any, where: str) -> Process:
    """``process`` in its one form (an op given as a bare name gets empty args).

    :raises RftError: one line naming ``where`` when it is not a list of one-key mappings.
    """
    if not isinstance(process, list) or not process:
        raise RftError(f"{where}: a Data-Juicer recipe needs a non-empty 'process' list of "
                       "operators, e.g. [{text_length_filter: {min_len: 5}}]")
    ops: Process = []
    for i, entry in enumerate(process):
        if isinstance(entry, str):
            entry = {entry: {}}
        if not isinstance(entry, dict) or len(entry) != 1:
            raise RftError(f"{where}.process[{i}]: expected one operator as {{name: args}}, "
                           f"got {entry!r}")
        ((name, args),) = entry.items()
        if args is None:
            args = {}
        if not isinstance(name, str) or not isinstance(args, dict):
            raise RftError(f"{where}.process[{i}]: expected {{name: {{arg: value}}}}, "
                           f"got {entry!r}")
        ops.append({name: dict(args)})
    return ops


def parse_recipe_text(text: str, where: str) -> Process:
    """The ``process`` list of a recipe written as YAML.

    :raises RftError: one line naming ``where`` when the text does not parse or has no
        ``process`` list.
    """
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()
        raise RftError(f"{where}: the Data-Juicer recipe does not parse as YAML: "
                       f"{' '.join(line.strip() for line in first[:3])}") from exc
    if not isinstance(loaded, dict):
        raise RftError(f"{where}: a Data-Juicer recipe is a mapping with a 'process' list, "
                       f"got {type(loaded).__name__}")
    return normalise(loaded.get("process"), where)


def load_recipe(config_path: str | None, process: Any, key: str) -> Process:
    """The recipe of an operator: its inline ``process`` when given, else the file at
    ``config_path`` (relative paths from the working directory).

    :param key: the operator's dotted config key, for messages.
    """
    if process:
        return normalise(process, f"{key}.process")
    if not config_path:
        raise RftError(f"{key}: set config_path (a Data-Juicer recipe file) or process "
                       "(its operators inline)")
    try:
        with open(config_path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise RftError(f"{key}.config_path: cannot read {config_path!r}: "
                       f"{exc.strerror or exc}") from exc
    return parse_recipe_text(text, f"{key}.config_path ({os.path.abspath(config_path)})")


def op_names(process: Process) -> list[str]:
    """The operator names of a recipe, in order."""
    return [next(iter(entry)) for entry in process]


__all__ = ["Process", "load_recipe", "normalise", "op_names", "parse_recipe_text"]
