"""Every config in examples/ validates with the installed plugins.

Examples that train on a CPU point ``model.model_path`` at a tiny model that
``make quickstart`` builds; here a freshly built tiny model stands in at that path (the
override is the only change), so the rest of each example is validated as shipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from rft.config import load_config
from rft.config.validate import local_looking

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_validates(path, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(path.parents[1])  # examples use paths relative to the repo root
    plain = yaml.safe_load(path.read_text())
    overrides = [f"checkpoint_root_dir={tmp_path}"]
    model_path = str((plain.get("model") or {}).get("model_path", ""))
    if model_path and local_looking(model_path) and not os.path.exists(model_path):
        overrides.append(f"model.model_path={tiny_model_dir}")
    loaded = load_config(path, overrides)
    assert loaded.stages


ALL_EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").rglob("*.yaml"))


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=[p.name for p in ALL_EXAMPLES])
def test_examples_resume_by_default(path):
    """Running an example's command again after a crash goes on from its checkpoints."""
    assert yaml.safe_load(path.read_text()).get("continue_from_checkpoint", True) is True


def test_there_are_examples():
    assert any(p.name == "quickstart.yaml" for p in EXAMPLES)
