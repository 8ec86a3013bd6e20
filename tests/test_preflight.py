"""Before a stage loads a model: a model path that is neither a local folder nor reachable
on the Hub is one line within seconds (not a minute of Hub retries and a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fixtures_models import arithmetic_tasks
from test_embedded_run import write_config

from rft.modes import preflight
from rft.modes.preflight import model_source_problem

RFT = [str(Path(sys.executable).with_name("rft"))]


def test_missing_relative_model_folder_is_one_line_within_seconds(tmp_path):
    config = write_config(tmp_path, Path("runs/no-such-model"), arithmetic_tasks(tmp_path, 4))
    started = time.monotonic()
    done = subprocess.run([*RFT, "run", str(config)], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"rft: model.model_path: 'runs/no-such-model' is not a local folder "
        f"({tmp_path}/runs/no-such-model does not exist) and the Hugging Face Hub cannot be "
        "reached (HF_HUB_OFFLINE is set); point it at a local model folder (`rft tiny-model "
        "DIR` builds a tiny one)"]
    assert elapsed < 30, elapsed  # the import of the stack included; no Hub retries


def test_unreachable_hub_endpoint_is_named(monkeypatch, tmp_path):
    for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9
    preflight.hub_unreachable.cache_clear()
    try:
        problem = model_source_problem("model.model_path", "org/model-not-here")
    finally:
        preflight.hub_unreachable.cache_clear()
    assert problem is not None and "(127.0.0.1:9: " in problem


def test_local_folders_and_local_looking_paths_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    preflight.hub_unreachable.cache_clear()
    assert model_source_problem("model.model_path", str(tmp_path)) is None
    # a missing ./path is config validation's problem ("path ... does not exist")
    assert model_source_problem("model.model_path", "./missing") is None
    assert model_source_problem("model.model_path", "org/name") is not None
    preflight.hub_unreachable.cache_clear()


def test_missing_data_path_warns_at_validation_and_stops_a_run_in_one_line(tmp_path,
                                                                           tiny_model_dir):
    """A config written for another machine validates here with a warning naming the data
    path; ``rft run`` stops before anything starts, in one line naming the key."""
    config = write_config(tmp_path, tiny_model_dir, Path("/no/such/data/train.jsonl"))
    validated = subprocess.run([*RFT, "validate", str(config)], capture_output=True, text=True,
                               cwd=tmp_path)
    assert validated.returncode == 0, validated.stderr
    assert ("rft: warning: buffer.explorer_input.taskset.path: path "
            "'/no/such/data/train.jsonl' does not exist here; `rft run` stops at start unless "
            "it exists where it runs") in validated.stderr.splitlines()
    ran = subprocess.run([*RFT, "run", str(config)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr.splitlines()[-1] == (
        "rft: buffer.explorer_input.taskset.path: path '/no/such/data/train.jsonl' does not "
        "exist")
    assert not (tmp_path / "ck").exists()  # nothing started, nothing written
