"""The quickstart (``make quickstart`` = ``rft run examples/quickstart.yaml``), shortened.

The shipped config runs 35 SFT steps then 400 GRPO steps (about 1.5 min on 2 CPU cores).
Here ``trainer.total_steps=35`` caps both stages at 35 steps — the full SFT warm-up and a
short GRPO stage — on the same tiny model (``rft tiny-model``'s defaults, seed 0), data
and held-out set, so the whole two-stage run takes ~20 s. The learning result of the
full run (held-out accuracy 0.385 after SFT → 1.0 after GRPO) is in the README.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.cli import main
from rft.config import load_config
from rft.launcher import run

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "examples" / "quickstart.yaml"
DATA = REPO / "examples" / "data" / "max_digit"
STEPS = 35
ACCURACY = "eval/heldout/accuracy"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_quickstart_data_is_disjoint_and_balanced():
    sets = {name: read_jsonl(DATA / f"{name}.jsonl") for name in ("heldout", "sft", "rl")}
    assert {k: len(v) for k, v in sets.items()} == {"heldout": 200, "sft": 512, "rl": 2048}
    questions = {name: {row["question"] for row in rows} for name, rows in sets.items()}
    assert sum(map(len, questions.values())) == len(set().union(*questions.values()))
    for rows in sets.values():
        for row in rows:
            assert row["answer"] == max(row["question"].split()[1])
        counts = [sum(row["answer"] == str(m) for row in rows) for m in range(2, 10)]
        assert max(counts) - min(counts) <= 1


def test_quickstart_config_validates(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["validate", str(CONFIG), f"model.model_path={tiny_model_dir}",
                 f"checkpoint_root_dir={tmp_path}"]) == 0
    loaded = load_config(CONFIG, [f"model.model_path={tiny_model_dir}"])
    assert [(s.name, s.config.mode, s.config.algorithm.algorithm_type) for s in loaded.stages] \
        == [("sft", "train", "sft"), ("grpo", "colocate", "grpo")]


@pytest.mark.slow
def test_quickstart_shortened_end_to_end(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the config's data paths are relative to the repository root
    loaded = load_config(CONFIG, [f"model.model_path={tiny_model_dir}",
                                  f"checkpoint_root_dir={tmp_path}",
                                  f"trainer.total_steps={STEPS}"])
    assert run(loaded) == 0

    summary_path = tmp_path / "quickstart" / "quickstart" / "summary.json"  # resumable name
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    sft, grpo = summary["stages"]
    assert (sft["name"], grpo["name"]) == ("sft", "grpo")
    for stage in (sft, grpo):
        assert stage["steps"] == STEPS
        assert ACCURACY in stage["eval_before"] and ACCURACY in stage["eval_after"]
        final = Path(stage["final_model_path"])
        assert final == summary_path.parent / stage["name"] / f"global_step_{STEPS}" / "hf"
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            assert (final / name).is_file(), f"{final / name} is missing"

    # SFT lowers its loss and teaches part of the rule on problems it never saw
    losses = [r["metrics"]["actor/pg_loss"]
              for r in read_jsonl(summary_path.parent / "sft" / "monitor" / "trainer.jsonl")]
    assert len(losses) == STEPS
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    assert sft["eval_after"][ACCURACY] >= sft["eval_before"][ACCURACY] + 0.2
    # GRPO starts from the SFT model: same held-out score (greedy) before as SFT's after
    assert grpo["eval_before"][ACCURACY] == sft["eval_after"][ACCURACY]
    rollouts = read_jsonl(summary_path.parent / "grpo" / "monitor" / "explorer.jsonl")
    rewards = [r["metrics"]["rollout/reward/mean"] for r in rollouts
               if "rollout/reward/mean" in r["metrics"]]
    assert len(rewards) == STEPS and 0 < sum(rewards) / STEPS < 1
