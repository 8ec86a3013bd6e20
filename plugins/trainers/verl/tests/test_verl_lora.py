"""LoRA (``model.lora_configs``) with ``trainer_type: verl``: veRL 0.9.1's real engine
workers (its peft path in the FSDP2 engine, gloo, one rank) behind rft's CPU platform shim
(:mod:`rft_plugin_verl.cpu_platform`, registered through veRL's own ``PlatformRegistry`` /
``EngineRegistry``; veRL has no CPU path of its own), real peft, the real ``hf`` engine.
veRL's GPU behaviour (bf16 adapters, FlashAttention, vLLM's LoRA kernels) is not exercised.

- the same batches through veRL's LoRA actor and the native trainer's: the same initial
  adapter, the same adapter after each step (fp32, within 1e-5), the same metrics; veRL's
  base weights bit-identical; the reference is veRL's ``ref_in_actor`` (no second engine);
- the trainer state holds the adapter only and resumes; the export is peft's folder (and
  the merged model), what ``adapter_weights`` / ``named_weights`` hand out;
- ``rft run`` in mode ``colocate``: the adapter alone reaches the ``hf`` engine after each
  step, whose log-probs then equal the trainer's.

Skipped, with the reason, where veRL's workers cannot run (as ``test_verl_trainer.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from rft.adapter import AdapterWeights, is_adapter_folder
from rft.checkpoint import Checkpoint, load_sync_weights
from rft.config import build_stages
from rft.plugins import PluginRegistry
from rft_plugin_verl.lora import AdapterDisabledRef
from test_verl_trainer import (  # noqa: F401  (runnable_verl: an autouse fixture)
    assert_metrics_close,
    full_state,
    plain,
    rollouts,
    runnable_verl,
    trainers,
)

pytestmark = pytest.mark.slow

torch.set_num_threads(1)

TOLERANCE = 1e-5
"""Largest adapter difference allowed between the two backends (fp32)."""

LORA = [{"lora_rank": 4, "lora_alpha": 8}]


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


def lora_config(model: Path, tmp: Path, **overrides: Any) -> dict[str, Any]:
    """``plain`` GRPO (k2 KL loss against the reference) with a rank-4 adapter at lr 1e-4.

    The lr: a fresh adapter's ``B`` is zero, so ``A``'s first gradients are tiny (∝ B);
    AdamW's first step moves a coordinate by ``lr · g / (|g| + 1e-8)``, which turns the
    rounding noise of a gradient of ~1e-8 into a difference of lr scale (measured here: the
    worst coordinate 1.3e-5 apart at lr 1e-3 — 2–3 of the 256 in one matrix beyond 1e-6 —
    and 2.7e-7 at lr 1e-4)."""
    return plain(model, tmp, "grpo", **{"model.lora_configs": LORA,
                                        "algorithm.optimizer.lr": 1e-4, **overrides})


def adapter(trainer: Any) -> dict[str, torch.Tensor]:
    weights = trainer.adapter_weights()
    assert isinstance(weights, AdapterWeights)
    return dict(weights.tensors)


def max_difference(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> float:
    assert left.keys() == right.keys(), left.keys() ^ right.keys()
    return max((left[k] - right[k]).abs().max().item() for k in left)


def base_weights(trainer: Any) -> dict[str, torch.Tensor]:
    """veRL's actor, every tensor but the adapter's (peft names)."""
    return {n: t.clone() for n, t in full_state(trainer.actor_engine.module).items()
            if ".lora_" not in n}


def test_lora_grpo_steps_equal_the_native_trainers(registry, rft_tiny_model, tmp_path) -> None:
    """Two GRPO steps on the same batches: veRL's LoRA actor and the native trainer's start
    from the same adapter (bit for bit: rft's seeded draw, handed to veRL as
    ``lora_adapter_path``) and stay within 1e-5 (reached: ~3e-7 while each step moves the
    adapter by ~1e-4); the KL loss against the adapter-disabled reference agrees; veRL's
    base weights do not change."""
    verl, native = trainers(registry, lora_config(rft_tiny_model, tmp_path))
    try:
        assert isinstance(verl.ref_worker, AdapterDisabledRef)  # ref_in_actor: one engine
        trainable = [n for n, p in verl.actor_engine.module.named_parameters()
                     if p.requires_grad]
        assert trainable and all(".lora_" in n for n in trainable)
        start = adapter(verl)
        assert verl.adapter_weights().spec == native.adapter_weights().spec
        assert max_difference(start, adapter(native)) == 0.0
        frozen = base_weights(verl)
        for step in range(2):
            batch = rollouts(seed=step)
            got, expected = verl.train_step(batch), native.train_step(batch)
            assert_metrics_close(got, expected, "actor/pg_loss", "actor/kl_loss",
                                 "actor/entropy_loss", "actor/grad_norm",
                                 "critic/advantages/mean")
            assert max_difference(adapter(verl), adapter(native)) < TOLERANCE
        assert got["actor/kl_loss"] > 0  # the reference is the base: the adapter moved away
        assert max_difference(adapter(verl), start) > 10 * TOLERANCE
        after = base_weights(verl)
        assert frozen.keys() == after.keys()
        assert all(torch.equal(frozen[n], after[n]) for n in frozen)  # bit-identical
        # the Hugging Face weights (merged) agree as well
        merged, native_merged = dict(verl.named_weights()), dict(native.named_weights())
        assert max_difference(merged, native_merged) < TOLERANCE
    finally:
        verl.close()


def test_lora_state_resumes_and_exports_the_adapter(registry, rft_tiny_model, tmp_path) -> None:
    """A checkpoint in veRL's layout (``write_checkpoint``, through rft's atomic
    ``save_checkpoint``) and ``state_dict`` (its ``actor`` the adapter alone, ``lora`` its
    spec) both resume: the next step gives the same adapter; the checkpoint's ``hf/``
    export is what a checkpoint-synced engine loads (the adapter); ``save_pretrained``
    writes peft's folder holding ``adapter_weights`` and, with ``save_hf_merged``, the
    merged model holding ``named_weights``."""
    from peft import PeftModel
    from rft.checkpoint import newest_readable_checkpoint, save_checkpoint
    from transformers import AutoModelForCausalLM

    config = lora_config(rft_tiny_model, tmp_path, **{"trainer.save_hf_merged": True})
    plan = build_stages(config, registry).stages[0].plan
    job = tmp_path / "job"
    first = plan.trainer.implementation(plan.trainer_plan())
    try:
        first.train_step(rollouts(seed=0))
        state = copy.deepcopy(first.state_dict())  # as torch.save writes it (one CPU rank:
        # the full state may share the live tensors)
        names = sorted(n for n, p in first.actor_engine.module.named_parameters()
                       if p.requires_grad)
        assert sorted(state["actor"]) == names and state["lora"]["rank"] == 4
        folder = save_checkpoint(str(job), 1, first.write_checkpoint, {},
                                 save_hf=first.save_pretrained)
        synced = load_sync_weights(Checkpoint(1, folder))  # sync_method: checkpoint
        assert isinstance(synced, AdapterWeights)
        assert max_difference(dict(synced.tensors), adapter(first)) == 0.0
        first.train_step(rollouts(seed=1))
        expected, merged = adapter(first), dict(first.named_weights())
        first.save_pretrained(str(tmp_path / "hf"))
    finally:
        first.close()
    export = tmp_path / "hf"
    assert is_adapter_folder(str(export))
    assert max_difference(dict(AdapterWeights.load(str(export)).tensors), expected) == 0.0
    saved = AutoModelForCausalLM.from_pretrained(export / "merged", dtype=torch.float32)
    assert max_difference({k: saved.state_dict()[k] for k in merged}, merged) == 0.0
    ids = torch.arange(3, 15)[None]
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(rft_tiny_model, dtype=torch.float32), export)
    assert torch.allclose(peft_model(input_ids=ids).logits, saved(input_ids=ids).logits,
                          atol=1e-5)

    for resume in ("state_dict", "verl_layout"):
        second = plan.trainer.implementation(plan.trainer_plan())
        try:
            if resume == "state_dict":
                second.load_state_dict(state)
            else:
                loaded = newest_readable_checkpoint(str(job))
                assert loaded is not None and loaded.step == 1
                second.read_checkpoint(loaded.checkpoint.path, loaded.trainer_state)
            assert second.global_steps == 1
            second.train_step(rollouts(seed=1))
            assert max_difference(adapter(second), expected) < 1e-7, resume
        finally:
            second.close()


def test_colocate_lora_run_syncs_the_adapter_to_the_hf_engine(rft_run) -> None:
    """``rft run``, mode ``colocate`` (``hf`` engine, weights handed over in memory) with
    ``trainer_type: verl`` and a LoRA adapter, 2 steps: each sync moves the adapter only
    (``sync/bytes``, 6 % of the model); two PPO epochs make the trainer recompute the
    log-probs the engine sampled with — on the synced adapter they agree (≤ 1e-5); the
    final export is peft's adapter folder."""
    outcome = rft_run({"trainer.trainer_type": "verl", "model.lora_configs": LORA,
                       "trainer.trainer_config": {"actor_rollout_ref": {"actor": {
                           "ppo_epochs": 2}}}}, steps=2)
    export = outcome.job_dir / "global_step_2" / "hf"
    assert is_adapter_folder(str(export))
    adapter_bytes = AdapterWeights.load(str(export)).nbytes
    assert [m["sync/bytes"] for m in outcome.metrics] == [float(adapter_bytes)] * 2
    for metrics in outcome.metrics:
        assert metrics["training/rollout_logprobs_diff_max"] < 1e-5
