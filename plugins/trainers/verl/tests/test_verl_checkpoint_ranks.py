"""Checkpoints in veRL's layout written and read by ``trainer.ranks: 2`` (veRL's worker
groups over ``RayResourcePool(use_gpu=False)`` on this CPU, rft's CPU shim in each rank:
see ``test_verl_ranks.py``): every rank writes its own files
(``model_world_size_2_rank_<r>.pt``, …) through the groups' ``save_checkpoint``, a fresh
2-rank trainer reads them back through ``load_checkpoint`` and takes the next step
bit-identically; a one-rank trainer refuses them in one line (veRL's FSDP files are per
rank).

Skipped like ``test_verl_trainer.py`` where veRL's workers cannot run (fails instead
under ``RFT_REQUIRE_VERL_WORKERS=1``); its fixtures and helpers are shared.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from rft.checkpoint import newest_readable_checkpoint, save_checkpoint
from rft.config import build_stages
from rft.errors import RftError
from rft.plugins import PluginRegistry


def _shared() -> Any:
    """``test_verl_trainer.py`` loaded from next to this file (``--import-mode=importlib``)."""
    path = Path(__file__).with_name("test_verl_trainer.py")
    spec = importlib.util.spec_from_file_location("rft_verl_trainer_tests_ckpt", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shared = _shared()
runnable_verl = shared.runnable_verl  # autouse: skipped / failed as in the shared module
ray_local = shared.ray_local  # a private Ray cluster of 2 CPUs on the loopback

pytestmark = pytest.mark.slow


def test_two_ranks_write_and_resume_verls_layout(ray_local, rft_tiny_model, tmp_path) -> None:
    """PPO with a critic, LR warm-up, 2 ranks (micro-batches of 3 rows: 3 rows a rank):
    a step, a checkpoint, a step; a fresh 2-rank trainer resumed from the checkpoint takes
    the same step: actor weights and step metrics bit-identical (tolerance 0)."""
    registry = PluginRegistry.create()
    config = shared.plain(rft_tiny_model, tmp_path, "ppo", **{
        "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3,
        "trainer.cpu_ranks": 2, "algorithm.optimizer.lr_warmup_steps": 5,
        "trainer.trainer_config.critic": {"optim": {"lr": 1e-4}}})
    plan = build_stages(config, registry).stages[0].plan
    assert plan.trainer_plan().trainer.ranks == 2
    job = tmp_path / "job"
    first = plan.trainer.implementation(plan.trainer_plan())
    try:
        first.train_step(shared.rollouts(seed=0))
        folder = Path(save_checkpoint(str(job), 1, first.write_checkpoint, {}))
        expected_metrics = first.train_step(shared.rollouts(seed=1))
        expected = dict(first.named_weights())
    finally:
        first.close()
    for role in ("actor", "critic"):
        for rank in (0, 1):
            for kind in ("model", "optim", "extra_state"):
                assert (folder / role / f"{kind}_world_size_2_rank_{rank}.pt").is_file()

    second = plan.trainer.implementation(plan.trainer_plan())
    try:
        loaded = newest_readable_checkpoint(str(job))
        assert loaded is not None
        second.read_checkpoint(loaded.checkpoint.path, loaded.trainer_state)
        assert second.global_steps == 1
        got_metrics = second.train_step(shared.rollouts(seed=1))
        got = dict(second.named_weights())
    finally:
        second.close()
    assert shared.max_difference(got, expected) == 0.0
    for name in ("actor/lr", "actor/pg_loss", "critic/vf_loss"):
        assert got_metrics[name] == expected_metrics[name], name

    one_rank = build_stages(shared.apply_overrides(config, {"trainer.cpu_ranks": 1}),
                            registry).stages[0].plan
    single = one_rank.trainer.implementation(one_rank.trainer_plan())
    try:
        with pytest.raises(RftError) as info:
            single.read_checkpoint(loaded.checkpoint.path, loaded.trainer_state)
    finally:
        single.close()
    assert str(info.value) == (f"checkpoint {folder}: written by 2 trainer rank(s); veRL's "
                               "FSDP checkpoint is read by as many ranks (this run: 1)")
