"""Every algorithm preset of the installed plugin distributions: one update on the tiny
model gives finite metrics and changes the parameters (real plugins, real trainer)."""

from __future__ import annotations

import math

import pytest
import torch

from rft.config import build_stages
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.trainer.torch_trainer import TorchTrainer

PRESETS = ["grpo", "ppo", "opmd", "rloo", "reinforceplusplus", "reinforceplusplus_baseline",
           "remax", "gspo", "dpo", "sft", "mix", "cispo", "sapo", "topr", "asymre", "raft",
           "dapo", "grpo_verl", "rec", "m2po", "sppo", "on_policy_distill", "jsd",
           "multi_step_grpo", "gigpo", "mix_chord"]


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


def test_every_installed_preset_is_covered(registry):
    assert sorted(registry.names("algorithm")) == sorted(PRESETS)


def experiences(preset, vocab: int) -> list[Experience]:
    """Eight sequences in the layout the preset trains on: rollouts in groups of two (with
    a reward baseline for ReMax and a teacher's log-probs for distillation),
    chosen/rejected pairs (DPO), or expert rows (mix)."""
    g = torch.Generator().manual_seed(0)
    pairs = preset.experience_format == "dpo"
    out = []
    for i in range(8):
        prompt, response = 3 + i % 2, 3 + i % 3
        exp = Experience(tokens=torch.randint(3, vocab, (prompt + response,), generator=g),
                         prompt_length=prompt, reward=float(i % 3 == 0),
                         logprobs=-torch.rand(response, generator=g) - 0.5,
                         eid=EID(batch=1, task=i // 2, run=0 if pairs else i % 2,
                                 suffix=("chosen", "rejected")[i % 2] if pairs else ""))
        exp.info["reward_baseline"] = 0.5
        if preset.sample_strategy == "mix":
            exp.info["is_expert"] = i >= 6
        # a teacher's log-probs (on_policy_distill, jsd; the other presets ignore them)
        exp.teacher_logprobs = -torch.rand(response, generator=g) - 0.5
        out.append(exp)
    return out


@pytest.mark.parametrize("name", PRESETS)
def test_one_update_is_finite_and_changes_parameters(name, registry, tiny_model_dir, tmp_path):
    plain = {
        "mode": "train", "checkpoint_root_dir": str(tmp_path),
        "algorithm": {"algorithm_type": name, "optimizer": {"lr": 1e-2},
                      **({"repeat_times": 2} if name != "dpo" else {})},
        "model": {"model_path": str(tiny_model_dir), "max_prompt_tokens": 8,
                  "max_response_tokens": 8},
        "buffer": {"batch_size": 4, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db")}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch", "trainer_config": {"torch": {"device": "cpu"}}},
        "monitor": {"monitor_type": "jsonl"},
    }
    stage = build_stages(plain, registry).stages[0]
    trainer = TorchTrainer(stage.plan.trainer_plan())
    before = {k: v.detach().clone() for k, v in trainer.actor.named_parameters()}
    vocab = trainer.vocab_size or 64
    metrics = trainer.train_step(experiences(stage.plan.preset, vocab))
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
    changed = [k for k, v in trainer.actor.named_parameters() if not torch.equal(v, before[k])]
    assert changed, f"{name}: no parameter changed"
