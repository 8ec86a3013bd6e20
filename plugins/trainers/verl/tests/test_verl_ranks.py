"""``trainer_type: verl`` with ``trainer.ranks > 1`` on this CPU: veRL's own single
controller (``RayWorkerGroup`` over a ``RayResourcePool(use_gpu=False)`` placement, one
fused worker per rank holding actor / reference / critic) with rft's CPU platform shim
(:mod:`rft_plugin_verl.cpu_platform`) activated in each rank process and a gloo group
among the ranks. veRL dispatches each batch over the data-parallel ranks and gathers the
outputs itself. veRL on GPUs (NCCL, CUDA placement) is not exercised here.

- the same batches on 2 ranks and on 1 rank (veRL's workers in the trainer's process)
  leave the same parameters (fp32, within 1e-5), for GRPO (reference model, KL loss) and
  PPO (critic);
- the state gathered from the ranks restores a one-rank trainer; the Hugging Face export
  written by rank 0 is what ``named_weights`` hands out (checkpoints in veRL's layout on 2
  ranks: ``test_verl_checkpoint_ranks.py``);
- LoRA on 2 ranks: the same adapter as on 1 rank after each step, the reference the actor
  with its adapter disabled, the gathered state and rank 0's peft export;
- a rank that dies is one line naming it;
- ``rft run`` in mode ``both`` trains on 2 ranks and syncs the explorer.

Skipped like ``test_verl_trainer.py`` where veRL's workers cannot run (fails instead
under ``RFT_REQUIRE_VERL_WORKERS=1``); its fixtures and helpers are shared (this folder is
importable: ``conftest.py``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from rft.config import build_stages
from rft.errors import RftError
from rft.plugins import PluginRegistry
from rft.testing.runs import apply_overrides
from rft.trainer.torch_trainer import TorchTrainer
from test_verl_trainer import (  # noqa: F401  (runnable_verl: a fixture)
    CORRECTION,
    assert_metrics_close,
    full_state,
    max_difference,
    off_policy,
    plain,
    rollouts,
    runnable_verl,
)

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
"""Largest parameter difference allowed between 2 ranks and 1 (fp32)."""


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


@pytest.fixture(scope="module")
def ray_cluster():
    """A private Ray cluster on the loopback with 4 logical CPUs: 2 for the ranks, the
    rest for a run's explorer and trainer actors (mode ``both``)."""
    import ray
    from rft.distributed.cluster import loopback_only

    restore = loopback_only()
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-verl-ranks-tests", runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()
    restore()


def config_of(model: Path, tmp: Path, algorithm: str, **overrides: Any) -> dict[str, Any]:
    """``test_verl_trainer.plain`` (6 rows a step, one mini-batch) with micro-batches of 3
    rows: each of 2 ranks gets 3 rows of the mini-batch (veRL needs whole micro-batches
    there), one rank 2 micro-batches of 3."""
    micro = {"trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 3}
    return plain(model, tmp, algorithm, **micro, **overrides)


def one_and_two_ranks(registry: PluginRegistry, config: dict[str, Any]) -> tuple[Any, Any]:
    """``(trainer on 1 rank, trainer on 2 ranks)`` of the same config."""
    one = build_stages(config, registry).stages[0].plan
    two = build_stages(apply_overrides(config, {"trainer.cpu_ranks": 2}),
                       registry).stages[0].plan
    assert one.trainer_plan().trainer.ranks == 1 and two.trainer_plan().trainer.ranks == 2
    single = one.trainer.implementation(one.trainer_plan())
    try:
        return single, two.trainer.implementation(two.trainer_plan())
    except BaseException:
        single.close()
        raise


@pytest.mark.usefixtures("ray_cluster")
def test_grpo_steps_on_two_ranks_equal_one_rank(registry, rft_tiny_model, tmp_path,
                                                capfd) -> None:
    """GRPO (reference model, k2 KL loss): two steps on the same 6-row batches, split 3 + 3
    over the ranks by veRL's dispatch: actor parameters within 1e-5 of one rank's (each
    step moves them ~1e-3), same loss metrics; then the state gathered from the 2 ranks
    restores a one-rank trainer exactly, and rank 0's Hugging Face export holds the
    weights ``named_weights`` hands out."""
    from transformers import AutoModelForCausalLM

    single, ranked = one_and_two_ranks(registry, config_of(rft_tiny_model, tmp_path, "grpo"))
    try:
        assert ranked.groups is not None and single.groups is None
        assert ranked.ref_worker is not None and ranked.critic_worker is None
        line = capfd.readouterr().err
        assert "rft: trainer 'trainer': 2 veRL ranks (actor+ref in each) over 1 node(s), gloo; " \
               "node 127.0.0.1" in line and "ranks 0, 1 (1 CPU each)" in line, line
        before = {k: v.clone() for k, v in single.named_weights()}
        for step in range(2):
            batch = rollouts(seed=step)
            got, expected = ranked.train_step(batch), single.train_step(batch)
            assert_metrics_close(got, expected, "actor/pg_loss", "actor/kl_loss",
                                 "actor/grad_norm", "critic/advantages/mean")
            weights = dict(ranked.named_weights())
            apart = max_difference(weights, dict(single.named_weights()))
            print(f"grpo step {step + 1}: 2 ranks vs 1 rank, largest difference {apart:.3g}")
            assert apart < TOLERANCE
        assert max_difference(weights, before) > 100 * TOLERANCE  # the steps did move them
        state = ranked.state_dict()
        ranked.save_pretrained(str(tmp_path / "hf"))
    finally:
        ranked.close()
        single.close()
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    assert max_difference({k: saved.state_dict()[k] for k in weights}, weights) == 0.0
    plan = build_stages(config_of(rft_tiny_model, tmp_path, "grpo"), registry).stages[0].plan
    restored = plan.trainer.implementation(plan.trainer_plan())
    try:
        restored.load_state_dict(state)
        assert restored.global_steps == 2
        assert max_difference(dict(restored.named_weights()), weights) == 0.0
    finally:
        restored.close()


@pytest.mark.usefixtures("ray_cluster")
def test_rollout_correction_on_two_ranks_equals_one_rank(registry, rft_tiny_model,
                                                         tmp_path) -> None:
    """``algorithm.rollout_correction`` (truncated token IS, ``seq_mean_k3`` rejection) on
    off-policy rows: each rank's loss hook gets its rows' weights and rejection mask from
    veRL's dispatch; the step's loss, grad norm and ``rollout_corr/…`` metrics equal one
    rank's (which equals the native trainer's:
    ``test_verl_trainer.py::test_rollout_correction_equals_the_native_trainer``), the
    parameters within 1e-5."""
    config = config_of(rft_tiny_model, tmp_path, "grpo",
                       **{"algorithm.rollout_correction": CORRECTION})
    native = TorchTrainer(build_stages(apply_overrides(config, {"trainer.trainer_type": "torch"}),
                                       registry).stages[0].plan.trainer_plan())
    batch = off_policy(native, rollouts(seed=0), {0: -3.0, 1: 0.5, 3: -1.0})
    single, ranked = one_and_two_ranks(registry, config)
    try:
        got, expected = ranked.train_step(batch), single.train_step(batch)
        corr = sorted(k for k in expected if k.startswith("rollout_corr/"))
        assert corr and sorted(k for k in got if k.startswith("rollout_corr/")) == corr
        assert got["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 6)
        assert_metrics_close(got, expected, *corr, "actor/pg_loss", "actor/grad_norm",
                             "actor/kl_loss")
        apart = max_difference(dict(ranked.named_weights()), dict(single.named_weights()))
        print(f"rollout correction: 2 ranks vs 1 rank, largest difference {apart:.3g}")
        assert apart < TOLERANCE
    finally:
        ranked.close()
        single.close()


@pytest.mark.usefixtures("ray_cluster")
def test_lora_on_two_ranks_equals_one_rank(registry, rft_tiny_model, tmp_path) -> None:
    """LoRA (``model.lora_configs``, rank 4) on 2 veRL ranks: the ranks start from the
    adapter one rank starts from, the reference is the actor group with its adapter
    disabled (no ref role), two GRPO steps leave the adapter within 1e-5 of one rank's
    with the same losses; the state gathered from the ranks (the adapter only and its
    spec) resumes a one-rank trainer, and rank 0's export is peft's folder holding the
    adapter ``adapter_weights`` hands out."""
    from rft.adapter import AdapterWeights, is_adapter_folder
    from rft_plugin_verl.lora import AdapterDisabledRef

    lora = {"model.lora_configs": [{"lora_rank": 4, "lora_alpha": 8}],
            "algorithm.optimizer.lr": 1e-4}
    config = config_of(rft_tiny_model, tmp_path, "grpo", **lora)
    single, ranked = one_and_two_ranks(registry, config)

    def adapter(trainer: Any) -> dict[str, torch.Tensor]:
        weights = trainer.adapter_weights()
        assert isinstance(weights, AdapterWeights)
        return dict(weights.tensors)

    try:
        assert ranked.groups is not None and ranked.groups.ref is None
        assert isinstance(ranked.ref_worker, AdapterDisabledRef)
        start = adapter(ranked)
        assert max_difference(start, adapter(single)) == 0.0
        assert ranked.adapter_weights().spec == single.adapter_weights().spec
        for step in range(2):
            batch = rollouts(seed=step)
            got, expected = ranked.train_step(batch), single.train_step(batch)
            assert_metrics_close(got, expected, "actor/pg_loss", "actor/kl_loss",
                                 "actor/grad_norm")
            apart = max_difference(adapter(ranked), adapter(single))
            print(f"lora step {step + 1}: 2 ranks vs 1 rank, largest adapter difference "
                  f"{apart:.3g}")
            assert apart < TOLERANCE
        assert got["actor/kl_loss"] > 0  # the reference is the base: the adapter moved away
        assert max_difference(adapter(ranked), start) > 10 * TOLERANCE
        merged = dict(ranked.named_weights())
        assert max_difference(merged, dict(single.named_weights())) < TOLERANCE
        expected_adapter = adapter(ranked)
        state = ranked.state_dict()
        assert state["lora"]["rank"] == 4 and all(".lora_" in n for n in state["actor"])
        ranked.save_pretrained(str(tmp_path / "hf"))
    finally:
        ranked.close()
        single.close()
    assert is_adapter_folder(str(tmp_path / "hf"))
    saved = dict(AdapterWeights.load(str(tmp_path / "hf")).tensors)
    assert max_difference(saved, expected_adapter) == 0.0
    plan = build_stages(config, registry).stages[0].plan
    restored = plan.trainer.implementation(plan.trainer_plan())
    try:
        restored.load_state_dict(state)
        assert restored.global_steps == 2
        assert max_difference(adapter(restored), expected_adapter) == 0.0
    finally:
        restored.close()


@pytest.mark.usefixtures("ray_cluster")
def test_ppo_with_critic_on_two_ranks_equals_one_rank(registry, rft_tiny_model,
                                                      tmp_path) -> None:
    """PPO (GAE on the critic's values gathered from both ranks): actor and critic within
    1e-5 of one rank's after two steps (critic lr 1e-4, as in ``test_verl_trainer.py``).
    Then rank 1 is killed: the next step is one line naming it."""
    config = config_of(rft_tiny_model, tmp_path, "ppo",
                   **{"trainer.trainer_config.critic": {"optim": {"lr": 1e-4}}})
    single, ranked = one_and_two_ranks(registry, config)
    try:
        assert ranked.critic_worker is not None
        for step in range(2):
            batch = rollouts(seed=step)
            got, expected = ranked.train_step(batch), single.train_step(batch)
            assert_metrics_close(got, expected, "actor/pg_loss", "critic/vf_loss",
                                 "critic/values/mean", "critic/advantages/mean")
            actor = max_difference(dict(ranked.named_weights()), dict(single.named_weights()))
            critic = max_difference(ranked.critic_worker.rft_model_state()[0],
                                    full_state(single.critic_engine.module))
            print(f"ppo step {step + 1}: 2 ranks vs 1 rank, largest difference actor "
                  f"{actor:.3g}, critic {critic:.3g}")
            assert actor < TOLERANCE and critic < TOLERANCE
        pid = ranked.groups.status.places[1].pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(RftError, match=rf"^trainer rank 1 of 2 \(node 127\.0\.0\.1, pid "
                                           rf"{pid}\) died during "):
            ranked.train_step(rollouts(seed=2))
        with pytest.raises(RftError, match="its veRL ranks were stopped after: trainer rank 1"):
            ranked.named_weights().__next__()
    finally:
        ranked.close()
        single.close()


@pytest.mark.usefixtures("ray_cluster")
def test_both_run_trains_on_two_ranks_and_syncs(tmp_path) -> None:
    """``rft run`` in mode ``both`` (hf engine explores in its actor) with
    ``trainer_type: verl`` and ``trainer.cpu_ranks: 2``: the trainer's Ray actor is veRL's
    driver, its 2 ranks train 2 steps, the explorer takes the weights after each step
    (``sync_method: checkpoint``: the Hugging Face export rank 0 writes)."""
    import json

    import yaml
    from rft.config import load_config
    from rft.launcher import run
    from rft.testing.runs import tiny_run_config, write_taskset
    from rft.testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model", seed=0)
    tasks = write_taskset(tmp_path / "tasks.jsonl", 8)
    config = apply_overrides(tiny_run_config(model, tasks, tmp_path, steps=2), {
        "mode": "both", "synchronizer": {"sync_method": "checkpoint", "sync_interval": 1},
        "trainer": {"trainer_type": "verl", "save_interval": 0, "cpu_ranks": 2}})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load_config(path)
    assert loaded.stages[0].config.trainer.ranks == 2
    assert run(loaded) == 0
    monitor = Path(loaded.stages[0].plan.job_dir) / "monitor"

    def by_step(side: str, key: str) -> dict[int, float]:
        records = [json.loads(line) for line in (monitor / f"{side}.jsonl").read_text()
                   .splitlines()]
        return {r["step"]: r["metrics"][key] for r in records if key in r["metrics"]}

    assert sorted(by_step("trainer", "actor/pg_loss")) == [1, 2]
    assert by_step("explorer", "explorer/model_version") == {1: 0, 2: 1}
