"""The derived ``trainer.max_token_len_per_gpu`` does not shred a small batch (issue #28,
item 18): Trinity-RFT's ``2 · max_model_len`` cut the quickstart's 128 rows into 64
micro-batches."""

from __future__ import annotations

from pathlib import Path

import torch

from rft.config import load_config
from rft.config.token_budget import budget_line, derived_budget
from rft.trainer.batching import split_by_tokens

ROOT = Path(__file__).resolve().parents[1]


def micro_batches(rows: int, tokens_per_row: int, budget: int) -> int:
    units = [[row] for row in range(rows)]
    return len(split_by_tokens(units, torch.full((rows,), tokens_per_row), budget))


def test_the_quickstart_batch_is_one_micro_batch():
    # GRPO stage: 16 tasks x 8 samples, max_model_len 24 + 3, rows of ~22 real tokens
    budget = derived_budget(max_model_len=27, rows=128)
    assert budget.tokens == 128 * 27
    assert micro_batches(128, 22, budget.tokens) == 1
    assert micro_batches(128, 22, budget.trinity_tokens) == 64  # Trinity's rule: 2 x 27


def test_trinity_rule_kept_for_long_contexts_and_large_batches_are_cut_at_16384():
    assert derived_budget(max_model_len=32768, rows=256).tokens == 65536  # 2 x L
    assert derived_budget(max_model_len=16384, rows=8, sequence_parallel=2).tokens == 16384
    large = derived_budget(max_model_len=1024, rows=256)
    assert large.tokens == 16384 and large.max_micro_batches == 16
    assert derived_budget(max_model_len=1024, rows=4).tokens == 4096  # the whole batch


def quickstart(tiny_model_dir, monkeypatch, *overrides: str):
    monkeypatch.chdir(ROOT)  # the example's paths are relative to the repository root
    return load_config(str(ROOT / "examples" / "quickstart.yaml"),
                       [f"model.model_path={tiny_model_dir}", *overrides])


def test_quickstart_stages_state_their_derived_budget(tiny_model_dir, monkeypatch):
    loaded = quickstart(tiny_model_dir, monkeypatch)
    lines = {s.name: budget_line(s.plan) for s in loaded.stages}
    grpo = next(s for s in loaded.stages if s.name == "grpo").config.trainer
    assert grpo.max_token_len_per_gpu == 3456
    assert lines["grpo"].startswith("trainer.max_token_len_per_gpu: 3456 tokens per micro-batch")
    assert "1 micro-batch per mini-batch of 128 rows" in lines["grpo"]


def test_no_line_when_the_budget_is_set(tiny_model_dir, monkeypatch):
    loaded = quickstart(tiny_model_dir, monkeypatch, "trainer.max_token_len_per_gpu=3456")
    assert all(budget_line(s.plan) is None for s in loaded.stages)
