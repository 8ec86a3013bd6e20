"""The config generator's checks: exactly ``rft validate``'s, on the page's document.

:func:`check_document` writes the document to a file and runs what ``rft validate`` runs
(:func:`rft.config.load_config`: load, convert, derive, check every stage; then the
model-folder and data-file checks of :mod:`rft.modes.preflight`), so each finding is the
line ``rft validate`` prints (without its ``rft: `` prefix), starting with its dotted key.
Relative paths resolve against the studio's working directory, as ``rft validate``'s
against the shell's.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rft.config import load_config
from rft.errors import ConfigError, RftError
from rft.modes.preflight import data_problems, model_file_problems
from rft.plugins import PluginRegistry
from rft_plugin_studio.schema_form_values import dump_document

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Checked:
    """What ``rft validate`` says of a document."""

    problems: tuple[str, ...]
    """One line each, ``dotted.key: message``; empty when the config is valid."""
    warnings: tuple[str, ...]
    resolved: tuple[tuple[str | None, dict[str, Any]], ...] = ()
    """``(stage name, resolved config)`` of each stage (valid configs only)."""

    @property
    def valid(self) -> bool:
        return not self.problems


def check_document(document: dict[str, Any], registry: PluginRegistry) -> Checked:
    """``rft validate`` of ``document`` (a plain config mapping)."""
    with tempfile.TemporaryDirectory() as folder, _LOCK:
        path = Path(folder) / "config.yaml"
        path.write_text(dump_document(document), encoding="utf-8")
        try:
            loaded = load_config(path, registry=registry)
        except ConfigError as exc:
            return Checked(tuple(exc.problems), ())
        except RftError as exc:
            return Checked(tuple(str(exc).splitlines()), ())
        problems = list(dict.fromkeys(problem for stage in loaded.stages
                                      for problem in (*model_file_problems(stage.plan),
                                                      *data_problems(stage.plan))))
        resolved = tuple((stage.name, dataclasses.asdict(stage.config))
                         for stage in loaded.stages)
        return Checked(tuple(problems), tuple(loaded.warnings),
                       () if problems else resolved)
