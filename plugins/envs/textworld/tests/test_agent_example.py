"""The agent example (examples/agent_textworld.py + .yaml), shortened: a few games, two SFT
steps, one GRPO step; the whole pipeline runs and writes the success-rate table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.slow
def test_the_agent_example_runs_end_to_end_and_writes_the_table(tmp_path):
    out = tmp_path / "agent"
    command = [sys.executable, str(ROOT / "examples" / "agent_textworld.py"),
               "--out", str(out), "--games", "6", "--heldout", "2", "--hidden-size", "64",
               f"checkpoint_root_dir={tmp_path / 'ckpt'}",
               "stages.0.buffer.total_steps=2", "stages.0.buffer.batch_size=4",
               "stages.1.buffer.total_steps=1", "stages.1.buffer.batch_size=2",
               "stages.1.algorithm.repeat_times=2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((out / "games" / "train.jsonl").read_text().splitlines()) == 4
    assert len((out / "sft.jsonl").read_text().splitlines()) == 4
    table = (out / "results.md").read_text()
    rates = re.findall(r"^\| (before SFT|after SFT|after RL \(GRPO\)) \| (\d\.\d{3}) \|$",
                       table, re.MULTILINE)
    assert [name for name, _ in rates] == ["before SFT", "after SFT", "after RL (GRPO)"]
    assert all(0.0 <= float(rate) <= 1.0 for _, rate in rates)
    assert float(rates[0][1]) == 0.0  # a random model wins no game
    assert table in done.stdout
