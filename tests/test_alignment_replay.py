"""Alignment harness (issue #6): a GRPO step of the native trainer on the tiny model,
recorded, saved, loaded, replayed through rft's trainer and recomputed with veRL 0.9.1's
``ppo_loss``; every parameter of the two updates agrees to 1e-6 in float32.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import verl.workers.utils.losses  # noqa: F401  (the reference needs veRL; always installed here)

from rft.alignment import (compare_updates, load_snapshot, parameter_changes, record_step,
                           reference_update_with_verl, replay_with_rft)
from rft.alignment.snapshot import BATCH_FILE, META_FILE, STATE_FILE
from rft.config import build_stages, deep_merge
from rft.errors import RftError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.trainer.torch_trainer import TorchTrainer

TOL = 1e-6
"""Largest allowed per-parameter difference between rft's and veRL's update (float32)."""


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()  # core built-ins + the installed grpo plugin


def grpo_trainer(registry: PluginRegistry, model_dir: Path, tmp_path: Path,
                 algorithm: dict[str, Any] | None = None, ppo_epochs: int = 1) -> TorchTrainer:
    torch.manual_seed(0)
    plain = {
        "mode": "train", "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": deep_merge({"algorithm_type": "grpo", "repeat_times": 2,
                                 "optimizer": {"lr": 1e-3}}, algorithm or {}),
        "model": {"model_path": str(model_dir), "max_prompt_tokens": 8,
                  "max_response_tokens": 10},
        "buffer": {"batch_size": 4, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db")}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch", "use_dynamic_bsz": False, "grad_clip": 1.0,
                    "trainer_config": {
                        "torch": {"device": "cpu", "dtype": "float32"},
                        # 2 prompts x 2 rollouts per update: two optimizer updates per step,
                        # so the second one is off-policy (ratio != 1) with recomputed old
                        # log-probs; micro-batches of 3 rows accumulate the gradient.
                        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 2,
                                                        "ppo_micro_batch_size_per_gpu": 3,
                                                        "ppo_epochs": ppo_epochs}}}},
        "monitor": {"monitor_type": "jsonl"},
    }
    stage = build_stages(plain, registry).stages[0]
    return TorchTrainer(stage.plan.trainer_plan())


def grpo_batch(vocab: int, seed: int, groups: int = 4, group_size: int = 2) -> list[Experience]:
    """``groups × group_size`` rollouts: prompts of 3–7 tokens, responses of 1–10 tokens
    (so both sides get padding), rewards varied within groups (one group all equal)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for task in range(groups):
        for run in range(group_size):
            prompt = int(torch.randint(3, 8, (1,), generator=g))
            response = int(torch.randint(1, 11, (1,), generator=g))
            tokens = torch.randint(3, vocab, (prompt + response,), generator=g)
            reward = 0.5 if task == groups - 1 else float(torch.rand(1, generator=g))
            out.append(Experience(tokens=tokens, prompt_length=prompt, reward=reward,
                                  logprobs=-2 * torch.rand(response, generator=g),
                                  eid=EID(batch=seed, task=task, run=run)))
    return out


SETTINGS: dict[str, tuple[dict[str, Any], int]] = {
    # name: (algorithm section, ppo_epochs)
    "kl0_ent0": ({"kl_loss_fn": "low_var_kl", "kl_loss_fn_args": {"kl_coef": 0.0},
                  "entropy_loss_fn_args": {"entropy_coef": 0.0}}, 1),
    "kl_ent": ({"kl_loss_fn": "low_var_kl", "kl_loss_fn_args": {"kl_coef": 0.001},
                "entropy_loss_fn_args": {"entropy_coef": 0.001}}, 1),
    # Two epochs (four updates): later ratios leave [1 - 0.2, 1 + 0.28], clipping binds.
    "kl_ent_clip_seq_mean": ({"kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.01},
                              "entropy_loss_fn_args": {"entropy_coef": 0.01},
                              "policy_loss_fn_args": {"clip_range_high": 0.28},
                              "loss_agg_mode": "seq-mean-token-mean"}, 2),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_rft_update_matches_verl_reference(registry, tiny_model_dir, tmp_path, name) -> None:
    algorithm, epochs = SETTINGS[name]
    trainer = grpo_trainer(registry, tiny_model_dir, tmp_path, algorithm, epochs)
    vocab = trainer.vocab_size
    trainer.train_step(grpo_batch(vocab, seed=1))  # Adam moments and actor != reference
    metrics, recorded = record_step(trainer, grpo_batch(vocab, seed=2), tmp_path / "snap")
    assert trainer.global_steps == 2 and "_update_actor" not in vars(trainer)
    assert metrics["actor/ppo_kl"] != 0.0  # the second update of the step is off-policy
    assert (metrics["actor/pg_clipfrac"] > 0) == (epochs > 1)

    snapshot = load_snapshot(tmp_path / "snap")
    assert torch.equal(snapshot.tensors["input_ids"], recorded.tensors["input_ids"])
    assert {"old_log_prob", "advantages"} <= set(snapshot.tensors)
    # a zero KL coefficient: no reference model is held or run (issue #23)
    kl_coef = algorithm["kl_loss_fn_args"]["kl_coef"]
    assert ("ref_log_prob" in snapshot.tensors) == (kl_coef != 0)
    assert (trainer.ref is not None) == (kl_coef != 0)
    assert snapshot.settings.kl_coef == algorithm["kl_loss_fn_args"]["kl_coef"]
    assert snapshot.settings.entropy_coef == algorithm["entropy_loss_fn_args"]["entropy_coef"]

    ours = replay_with_rft(snapshot, registry=registry)
    theirs = reference_update_with_verl(snapshot)

    # The replay is the recorded step, and it agrees with veRL parameter by parameter.
    assert max(compare_updates(ours, snapshot.actor_after).values()) <= TOL
    diffs = compare_updates(ours, theirs)
    worst = max(diffs, key=diffs.get)
    print(f"{name}: max |rft - verl| = {diffs[worst]:.3g} ({worst}); "
          f"max |update| = {max(parameter_changes(snapshot, ours).values()):.3g}; "
          f"clipfrac {metrics['actor/pg_clipfrac']:.3g}")
    assert all(d <= TOL for d in diffs.values()), {k: v for k, v in diffs.items() if v > TOL}
    # ... and the update is real: every parameter moved, some by far more than the tolerance.
    changes = parameter_changes(snapshot, ours)
    assert max(changes.values()) > 100 * TOL
    assert all(c > 0 for c in changes.values()), [k for k, c in changes.items() if c == 0]
    if snapshot.settings.kl_coef or snapshot.settings.entropy_coef:
        # Negative control: a reference without the KL and entropy terms is told apart.
        plain = dataclasses.replace(snapshot.settings, kl_loss="none", entropy_loss="none")
        without = reference_update_with_verl(dataclasses.replace(snapshot, settings=plain))
        assert max(compare_updates(ours, without).values()) > 10 * TOL


def test_snapshot_errors_name_the_file(registry, tiny_model_dir, tmp_path) -> None:
    trainer = grpo_trainer(registry, tiny_model_dir, tmp_path)
    record_step(trainer, grpo_batch(trainer.vocab_size, seed=3), tmp_path / "snap",
                keep_result=False)
    assert load_snapshot(tmp_path / "snap").actor_after is None

    state = tmp_path / "snap" / STATE_FILE
    state.write_bytes(state.read_bytes()[:100])  # truncated
    with pytest.raises(RftError, match=rf"^alignment snapshot {re.escape(str(state))} is "
                                       r"corrupt or unreadable: [^\n]+$"):
        load_snapshot(tmp_path / "snap")

    batch = tmp_path / "snap" / BATCH_FILE
    batch.unlink()
    with pytest.raises(RftError,
                       match=rf"^alignment snapshot {re.escape(str(batch))}: missing [^\n]+$"):
        load_snapshot(tmp_path / "snap")

    meta = tmp_path / "snap" / META_FILE
    meta.write_text('{"format": 1}')
    with pytest.raises(RftError, match=rf"^alignment snapshot {re.escape(str(meta))} is "
                                       r"corrupt: lacks settings, config, model_config$"):
        load_snapshot(tmp_path / "snap")

    with pytest.raises(RftError, match=r"^alignment snapshot \S+meta\.json: missing"):
        load_snapshot(tmp_path / "nowhere")
