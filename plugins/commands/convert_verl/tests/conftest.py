"""Fixtures of the convert-verl tests: validating a converted config as a user would, with
its dataset files in a temporary ``HOME`` and ``model.model_path`` on the tiny model."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf


def make_dataset_files(yaml_text: str) -> list[Path]:
    """Create (empty) the files the tasksets of ``yaml_text`` read; return them."""
    config = OmegaConf.to_container(OmegaConf.create(yaml_text), resolve=True)
    explorer_input = config.get("buffer", {}).get("explorer_input", {})  # type: ignore[union-attr]
    made: list[Path] = []
    for taskset in explorer_input.get("tasksets", []) + explorer_input.get("eval_tasksets", []):
        path = Path(os.path.expanduser(taskset["path"]))
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            file = path
        else:
            path.mkdir(parents=True, exist_ok=True)
            file = path / f"{taskset.get('split', 'train')}.parquet"
        if not file.exists():
            file.touch()
        made.append(file)
    return made


ELSEWHERE = "cluster.ray_address=10.0.0.1:6379"
"""The converted launches are written for GPU nodes: validated as runs on a Ray cluster
elsewhere (no connection is made), not on this CPU machine, which validation would refuse
(``cluster.gpu_per_node`` above this machine's GPUs)."""


@pytest.fixture
def cluster_elsewhere() -> str:
    """The override :data:`ELSEWHERE`, for a test that calls ``load_config`` itself."""
    return ELSEWHERE


@pytest.fixture
def validate_converted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       rft_tiny_model: Path) -> Callable[..., Any]:
    """``validate(yaml_text)`` → the loaded config (``LoadedConfig``), or raises
    ``ConfigError``: ``HOME`` is a temporary directory holding the dataset files, ``USER``
    is set, and ``model.model_path`` is the tiny model."""
    from rft.config import load_config

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", "tester")
    monkeypatch.chdir(tmp_path)

    def validate(yaml_text: str, overrides: tuple[str, ...] = ()) -> Any:
        make_dataset_files(yaml_text)
        path = tmp_path / "converted.yaml"
        path.write_text(yaml_text)
        return load_config(path, [f"model.model_path={rft_tiny_model}", ELSEWHERE, *overrides])

    return validate
