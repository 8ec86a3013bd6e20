"""Reusable model fixtures: the tiny Qwen2 checkpoint, built once per test session.

``tests/conftest.py`` imports the fixture, so every test can ask for ``tiny_model_dir``
(``tests/conftest.py`` puts this folder on ``sys.path``). The build is cached per
session, so several modules importing the fixture share one directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.testing.runs import write_taskset
from rft.testing.tiny_model import build_tiny_model

_BUILT: dict[int, Path] = {}


def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build (once per session) and return the tiny model directory, seed 0."""
    key = id(tmp_path_factory)
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = build_tiny_model(tmp_path_factory.mktemp("tiny_qwen2"), seed=0)
    return _BUILT[key]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a tiny random Qwen2 model + ChatML BPE tokenizer (seed 0)."""
    return tiny_model_path(tmp_path_factory)


def arithmetic_tasks(directory: Path, count: int) -> Path:
    """``<directory>/tasks.jsonl``: ``count`` rows ``{"question": "i+1=", "answer": "i+1"}``
    (:func:`rft.testing.runs.write_taskset`)."""
    return write_taskset(directory / "tasks.jsonl", count)


def apply_changes(config: dict, changes: dict) -> dict:
    """Set ``config[a][b] = value`` for each ``a__b=value`` in ``changes``; return ``config``."""
    for dotted, value in changes.items():
        node = config
        *parents, last = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return config
