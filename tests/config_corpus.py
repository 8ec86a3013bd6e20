"""Helpers for the config tests: the valid base config and the malformed corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rft.config import deep_merge

CONFIGS = Path(__file__).parent / "data" / "configs"
BASE_CONFIG = CONFIGS / "base.yaml"
CORPUS = yaml.safe_load((CONFIGS / "bad_configs.yaml").read_text())


def prepare_environment(tmp_path: Path, monkeypatch: Any, model: Path | None = None) -> None:
    """Set the variables base.yaml reads: a model dir (``model``, else an empty folder:
    enough for config validation, not for ``rft validate``'s model files check), a task
    file, a checkpoint root."""
    if model is None:
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "tasks.jsonl").write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    monkeypatch.setenv("RFT_TEST_MODEL", str(model))
    monkeypatch.setenv("RFT_TEST_DATA", str(data))
    monkeypatch.setenv("RFT_TEST_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.delenv("RFT_SURELY_UNSET_VARIABLE", raising=False)


def write_case(case: dict[str, Any], tmp_path: Path) -> Path:
    """Write the config file of one corpus case; return its path."""
    path = tmp_path / f"{case['id']}.yaml"
    if case.get("missing_file"):
        return path
    if "text" in case:
        path.write_text(case["text"])
        return path
    base = yaml.safe_load(BASE_CONFIG.read_text())
    path.write_text(yaml.safe_dump(deep_merge(base, case.get("patch", {})), sort_keys=False))
    return path
