"""The native trainer as N FSDP2 ranks (Ray actors, gloo) on this CPU machine.

- A 2-rank step equals the 1-rank step on the same batch: parameters within 1e-6 (fp32),
  for GRPO and for PPO with its critic, and property-tested over batch shapes (ragged
  lengths, uneven rows per rank, ranks with no row in a mini-batch).
- Sharded checkpoints (``torch.distributed.checkpoint``) resume 2 → 1 and 1 → 2 ranks with
  the same parameters; the one-process state round-trips through 2 ranks.
- Gradient checkpointing, parameter / optimizer offload and chunked entropies change
  memory, not results; a weight sync's gathering holds one bucket on the sending rank.
- Mode ``both`` with 2 trainer ranks: the vLLM engine's log-probs equal the trainer's after
  each ``nccl`` sync; the same on a 2-"node" ``ray.cluster_utils.Cluster``; a rank killed
  with SIGKILL mid-step ends the run with one line naming it, and the run resumes.

The learning rate of the equality tests is 1e-4: Adam's first step divides each gradient
element by its own magnitude (``g / (|g| + ε)``), so elements whose gradient is a rounding
residue (``|g| ≲ ε``) move by up to ``lr`` whatever their value; at ``lr = 1e-3`` one
process differs from *itself* by ~4e-6 when only its micro-batch split changes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import rft_plugin_grpo
import rft_plugin_ppo
import rft_plugin_rewards
import rft_plugin_selectors
import rft_plugin_workflows
import torch
from ray import cloudpickle
from rft.config import build_stages, load_config
from rft.config.plan import TrainerPlan
from rft.errors import ConfigError, RftError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft.testing.tiny_model import build_tiny_model
from rft.trainer.metrics import LossMetrics
from rft.trainer.parallel import balance_units
from rft.trainer.sharded_checkpoint import (
    named_to_native,
    native_to_named,
    sharded_marker,
)
from rft.trainer.torch_trainer import TorchTrainer
from rft.trainer.weight_gather import TensorMeta

PLUGINS = [rft_plugin_grpo, rft_plugin_ppo, rft_plugin_workflows, rft_plugin_rewards,
           rft_plugin_selectors]

# test functions run on the ranks through RankedTrainer.call_all: pickle them by value
# (Ray's workers cannot import this test module)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def _model_forward_in_one_process():
    """The ranks run the model's own forward (sharded); so do the one-process trainers they
    are compared with (the shared-prompt forward agrees with it to rounding only:
    tests/test_prefix_packing.py)."""
    from rft.trainer import models

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "uses_shared_prompts", lambda *args: False)
        yield


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    """Built-ins and the plugins these runs use (no entry-point scan)."""
    return PluginRegistry.create(autoload=False, extra_plugins=PLUGINS)


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and key in out else value
    return out


def plan_of(registry: PluginRegistry, tmp: Path, model: Path, ranks: int, *,
            algorithm_type: str = "grpo", lr: float = 1e-4, **sections: Any) -> TrainerPlan:
    plain = {
        "mode": "train", "checkpoint_root_dir": str(tmp / "ck"),
        "algorithm": {"algorithm_type": algorithm_type, "repeat_times": 2,
                      "optimizer": {"lr": lr}},
        "model": {"model_path": str(model), "max_prompt_tokens": 8, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 3, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": str(tmp / "exp.db")}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "synchronizer": {"sync_method": "checkpoint", "sync_timeout": 120},
        "trainer": {"trainer_type": "torch", "cpu_ranks": ranks},
        "monitor": {"monitor_type": "jsonl"},
    }
    loaded = build_stages(merge(plain, sections), registry)
    plan = loaded.stages[0].plan.trainer_plan()
    assert plan.trainer.ranks == ranks
    return plan


def rollouts(lengths: list[tuple[int, int]], seed: int = 0, vocab: int = 500,
             group: int = 2) -> list[Experience]:
    """Experiences of ``(prompt, response)`` lengths; rewards 0/1, groups of ``group``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, (prompt, response) in enumerate(lengths):
        tokens = torch.randint(3, vocab, (prompt + response,), generator=g)
        out.append(Experience(tokens=tokens, prompt_length=prompt,
                              reward=float(torch.rand(1, generator=g).item() > 0.5),
                              logprobs=-torch.rand(response, generator=g),
                              eid=EID(batch=0, task=i // group, run=i % group)))
    return out


RAGGED = [(2, 2), (3, 7), (4, 1), (2, 5), (3, 3), (4, 6), (1, 4)]


def max_difference(a, b) -> float:
    a, b = dict(a), dict(b)
    assert sorted(a) == sorted(b)
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


# ---- pure parts (no processes) ------------------------------------------------------------


def test_balance_units_balances_tokens_and_keeps_order_and_units():
    lengths = torch.tensor([9, 1, 1, 1, 8, 2, 3, 3])
    units = [[0, 1], [2, 3], [4, 5], [6, 7]]  # pairs: 10, 2, 10, 6 tokens
    parts = balance_units(units, lengths, 2)
    assert parts == [[0, 1, 6, 7], [2, 3, 4, 5]]  # largest first to the lighter rank: 16 / 12
    assert balance_units([[0], [1], [2]], torch.tensor([5, 5, 5]), 2) == [[0, 2], [1]]
    assert balance_units([[0]], torch.tensor([4]), 3) == [[0], [], []]  # ranks without rows
    assert balance_units(units, lengths, 1) == [list(range(8))]


def test_loss_metrics_of_ranks_merge_to_the_one_process_record():
    one, rank0, rank1 = LossMetrics(), LossMetrics(), LossMetrics()
    for mini in ([(0.5, 0.1), (0.25, 0.3)], [(1.0, 0.2)]):  # two mini-batches
        for i, (loss, frac) in enumerate(mini):
            one.add_micro({"actor/pg_loss": loss}, {"actor/pg_clipfrac": frac})
            (rank0 if i == 0 else rank1).add_micro({"actor/pg_loss": loss},
                                                   {"actor/pg_clipfrac": frac})
        for record in (one, rank0, rank1):
            record.close_mini_batch()
            record.add("actor/grad_norm", 2.0)
    merged = LossMetrics.merged([rank0, rank1]).result()
    assert merged == pytest.approx(one.result())
    assert merged["actor/pg_loss"] == pytest.approx((0.75 + 1.0) / 2)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 7, 64, 65])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_shard_rows_follow_torch_chunk(rows, world):
    meta = TensorMeta("w", (rows, 3), torch.float32, True)
    chunks = list(torch.arange(rows).chunk(world))
    for rank in range(world):
        first, count = meta.rows(rank, world)
        expected = chunks[rank].tolist() if rank < len(chunks) else []
        assert list(range(first, first + count)) == expected


def test_optimizer_state_by_name_round_trips():
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    names = [n for n, _ in model.named_parameters()]
    native = optimizer.state_dict()
    named = native_to_named(native, names)
    assert sorted(named["state"]) == sorted(names)
    back = named_to_native(named, names)
    assert back["param_groups"] == native["param_groups"] and sorted(back["state"]) == [0, 1, 2, 3]


# ---- validation -----------------------------------------------------------------------------


def both_plain(tmp_path: Path, model: Path, **trainer: Any) -> dict[str, Any]:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1=", "answer": "2"}\n')
    return {
        "mode": "both", "checkpoint_root_dir": str(tmp_path / "ck"),
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "model": {"model_path": str(model), "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 2, "total_steps": 1, "explorer_input": {"taskset": {
            "name": "t", "path": str(tasks), "format": {"prompt_key": "question",
                                                        "response_key": "answer"},
            "default_workflow_type": "simple_workflow",
            "default_reward_fn_type": "accuracy_reward"}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "trainer": {"trainer_type": "torch", **trainer},
        "monitor": {"monitor_type": "jsonl"},
    }


def test_validation_derives_ranks_and_rejects_impossible_splits(registry, tmp_path,
                                                                tiny_model_dir):
    loaded = build_stages(both_plain(tmp_path, tiny_model_dir, cpu_ranks=2), registry)
    trainer = loaded.stages[0].config.trainer
    assert (trainer.ranks, trainer.rank_timeout) == (2, 1200.0)
    assert trainer.max_token_len_per_gpu == 48  # max(⌈2 · (16 + 8)⌉, min(2 rows · 24, 16384))
    assert loaded.warnings == []

    too_many = both_plain(tmp_path, tiny_model_dir, cpu_ranks=(os.cpu_count() or 1) + 1)
    with pytest.raises(ConfigError, match=r"trainer.cpu_ranks: \d+ trainer ranks need one CPU "
                                          r"each but the cluster has \d+"):
        build_stages(too_many, registry)
    rows = both_plain(tmp_path, tiny_model_dir, cpu_ranks=2)
    rows["buffer"]["train_batch_size"] = 1
    with pytest.raises(ConfigError, match=r"^trainer.ranks: 2 trainer ranks need at least 2 "
                                          r"rows per mini-batch \(optimizer step\), got 1 rows"):
        build_stages(rows, registry)
    gpus = both_plain(tmp_path, tiny_model_dir)
    # GPU nodes of a cluster (not this machine)
    gpus["cluster"] = {"node_num": 2, "gpu_per_node": 4, "ray_address": "10.0.0.1:6379"}
    gpus["explorer"]["rollout_model"]["tensor_parallel_size"] = 8
    with pytest.raises(ConfigError, match=r"explorer.rollout_model.tensor_parallel_size: 8 is "
                                          r"larger than a node \(cluster.gpu_per_node = 4\)"):
        build_stages(gpus, registry)
    gpus["explorer"]["rollout_model"]["tensor_parallel_size"] = 2
    gpus["buffer"]["batch_size"] = 4  # 8 rows: at least one per rank
    split = build_stages(gpus, registry).stages[0].config
    assert (split.cluster.trainer_gpu_num, split.trainer.ranks) == (6, 6)  # 8 GPUs − 1 engine × 2


def test_unhonoured_trainer_keys_are_warnings_naming_them(registry, tmp_path, tiny_model_dir):
    tree = {"actor_rollout_ref": {"model": {"use_remove_padding": True,
                                            "enable_gradient_checkpointing": True},
                                  "actor": {"fsdp_config": {"param_offload": True}}},
            "trainer": {"critic_warmup": 0}}
    loaded = build_stages(both_plain(tmp_path, tiny_model_dir, trainer_config=tree,
                                     ulysses_sequence_parallel_size=2,
                                     trainer_strategy="megatron"), registry)
    assert loaded.warnings == [
        "trainer.trainer_strategy: 'megatron' is not supported by the torch trainer; it runs "
        "as one process",
        "trainer.ulysses_sequence_parallel_size: 2 is not honoured by the torch trainer (no "
        "sequence parallelism); it runs with 1",
        "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding: not honoured by "
        "the torch trainer; it has no effect",
        "trainer.trainer_config.trainer.critic_warmup: not honoured by the torch trainer; it "
        "has no effect"]
    colocate = both_plain(tmp_path, tiny_model_dir, cpu_ranks=2)
    colocate["mode"] = "colocate"
    colocate["synchronizer"] = {"sync_method": "memory"}
    loaded = build_stages(colocate, registry)  # colocate on 2 CPU ranks (test_colocate_ranks)
    assert loaded.stages[0].config.trainer.ranks == 2
    assert loaded.warnings == []


# ---- 2 ranks against 1 (Ray actors over gloo) -------------------------------------------------


LIVE: list[Any] = []
"""Sharded trainers alive in this module: their ranks hold this machine's two CPUs."""


@pytest.fixture(scope="module")
def ray_two_cpus():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-multi-rank", runtime_env={"env_vars": {
                 "OMP_NUM_THREADS": "1",
                 # a fixed mmap threshold: a freed bucket leaves the resident memory at once,
                 # so the peak resident memory measures what is held at a time
                 "MALLOC_MMAP_THRESHOLD_": "131072"}})
    yield
    release()
    ray.shutdown()


def release() -> None:
    """Close the live sharded trainers (a new one needs the CPUs)."""
    while LIVE:
        LIVE.pop().close()


def sharded(plan: TrainerPlan) -> Any:
    release()
    trainer = TorchTrainer(plan)
    LIVE.append(trainer)
    return trainer


ACTOR = {"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 2}}}
"""Mini-batches of 4 rows (2 prompts × repeat_times 2) and two epochs: several optimizer
steps per batch, old log-probs recomputed (the split forward pass), a last mini-batch of
one row for an odd batch (one rank without rows)."""


@pytest.fixture(scope="module")
def grpo_pair(ray_two_cpus, registry, tmp_path_factory, tiny_model_dir):
    """A 1-rank and a 2-rank GRPO trainer of the same config (dynamic micro-batches of at
    most 12 tokens per rank: ranks run different numbers of micro-batches)."""
    tmp = tmp_path_factory.mktemp("grpo_pair")
    sections = {"trainer": {"use_dynamic_bsz": True, "max_token_len_per_gpu": 12,
                            "trainer_config": ACTOR}}
    one = TorchTrainer(plan_of(registry, tmp, tiny_model_dir, 1, **sections))
    two = sharded(plan_of(registry, tmp, tiny_model_dir, 2, **sections))
    assert type(two).__name__ == "RankedTrainer" and two.world_size == 2
    return one, two


@pytest.mark.slow
def test_a_two_rank_grpo_step_equals_the_one_rank_step(grpo_pair):
    one, two = grpo_pair
    assert max_difference(one.named_weights(), two.named_weights()) == 0.0
    batch = rollouts(RAGGED, seed=1)
    m1, m2 = one.train_step(batch), two.train_step(batch)
    assert max_difference(one.named_weights(), two.named_weights()) <= 1e-6
    for key in ("actor/pg_loss", "actor/entropy_loss", "critic/advantages/mean",
                "response_length/mean"):
        assert m2[key] == pytest.approx(m1[key], abs=1e-6), key
    assert m2["actor/grad_norm"] == pytest.approx(m1["actor/grad_norm"], rel=1e-5)
    assert two.global_steps == one.global_steps == 1


@pytest.mark.slow
def test_two_ranks_equal_one_over_batch_shapes(grpo_pair):
    """Property test: for random batches (2–9 rows, ragged prompt and response lengths of
    1–6 tokens each (the micro-batch budget is 12),
    random rewards) one step of 2 ranks equals one step of 1 rank from the same state (a
    trained one: Adam's moments are not zero)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    one, two = grpo_pair
    if two.global_steps == 0:  # Adam's first step from zero moments amplifies rounding
        two.train_step(rollouts(RAGGED, seed=1))  # residues (see the module docstring)
    shapes = st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=2, max_size=9)

    @settings(max_examples=20, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(lengths=shapes, seed=st.integers(0, 1000))
    def check(lengths, seed):
        one.load_state_dict(two.state_dict())  # the same start, Adam moments included
        assert max_difference(one.named_weights(), two.named_weights()) == 0.0
        batch = rollouts(lengths, seed=seed)
        m1, m2 = one.train_step(batch), two.train_step(batch)
        assert max_difference(one.named_weights(), two.named_weights()) <= 1e-6
        assert m2["actor/pg_loss"] == pytest.approx(m1["actor/pg_loss"], abs=1e-6)

    check()


@pytest.mark.slow
def test_sharded_checkpoints_resume_on_fewer_and_more_ranks(grpo_pair, registry, tmp_path,
                                                            tiny_model_dir):
    two = grpo_pair[1]
    two.train_step(rollouts(RAGGED, seed=5))
    folder = tmp_path / "global_step_7"
    two.save_sharded(str(folder / "trainer_sharded"))
    files = sorted(os.listdir(folder / "trainer_sharded"))
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp", "rank0.sha256.json",
                     "rank1.sha256.json", "rng_rank0.pt", "rng_rank1.pt"]
    # each rank hashed the files it wrote as it wrote them (the checkpoint's listing takes
    # these digests: rft.checkpoint.DIGESTS_SUFFIX)
    from rft.checkpoint import file_digest

    digests = {name: digest for rank in (0, 1) for name, digest in json.loads(
        (folder / "trainer_sharded" / f"rank{rank}.sha256.json").read_text()).items()}
    assert sorted(digests) == [f for f in files if not f.endswith(".sha256.json")]
    assert all(file_digest(str(folder / "trainer_sharded" / name)) == digest
               for name, digest in digests.items())
    # 2 → 1: a one-process trainer reads the shards (no torch.distributed)
    fresh = TorchTrainer(plan_of(registry, tmp_path, tiny_model_dir, 1, trainer={
        "use_dynamic_bsz": True, "max_token_len_per_gpu": 12, "trainer_config": ACTOR}))
    fresh.load_state_dict(sharded_marker(str(folder), 2, two.global_steps))
    assert fresh.global_steps == two.global_steps
    assert max_difference(fresh.named_weights(), two.named_weights()) == 0.0
    batch = rollouts(RAGGED, seed=6)
    fresh.train_step(batch)
    two.train_step(batch)  # the Adam moments came along: the steps agree
    assert max_difference(fresh.named_weights(), two.named_weights()) <= 1e-6
    # 1 → 2: the one-process state into the shards (broadcast from rank 0)
    fresh.train_step(rollouts(RAGGED, seed=7))
    two.load_state_dict(fresh.state_dict())
    assert two.global_steps == fresh.global_steps
    assert max_difference(fresh.named_weights(), two.named_weights()) == 0.0
    batch = rollouts(RAGGED, seed=8)
    fresh.train_step(batch)
    two.train_step(batch)
    assert max_difference(fresh.named_weights(), two.named_weights()) <= 1e-6
    # the Hugging Face export, gathered on rank 0 (the other rank holds no full copy)
    two.save_pretrained(str(tmp_path / "hf"))
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert max_difference([(k, v) for k, v in exported.items() if k != "lm_head.weight"],
                          two.named_weights()) == 0.0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "Qwen2ForCausalLM"]


@pytest.mark.slow
def test_a_two_rank_ppo_step_equals_the_one_rank_step(ray_two_cpus, registry, tmp_path,
                                                      tiny_model_dir):
    sections = {"trainer": {"use_dynamic_bsz": False, "trainer_config": {
        "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 2}},
        "critic": {"optim": {"lr": 1e-4}}}}}
    one = TorchTrainer(plan_of(registry, tmp_path, tiny_model_dir, 1, algorithm_type="ppo",
                               **sections))
    two = sharded(plan_of(registry, tmp_path, tiny_model_dir, 2, algorithm_type="ppo", **sections))
    try:
        for seed in (1, 2):
            batch = rollouts(RAGGED[:5], seed=seed)
            m1, m2 = one.train_step(batch), two.train_step(batch)
            assert m2["critic/vf_loss"] == pytest.approx(m1["critic/vf_loss"], abs=1e-6)
            assert m2["critic/values/mean"] == pytest.approx(m1["critic/values/mean"], abs=1e-6)
        assert max_difference(one.named_weights(), two.named_weights()) <= 1e-6
        critic_one, critic_two = one.state_dict()["critic"], two.state_dict()["critic"]
        assert max_difference(critic_one.items(), critic_two.items()) <= 1e-6
    finally:
        two.close()


def _gather_peak(rank, limit: int) -> tuple[int, int, int]:
    """On every rank: snapshot the shards, then gather every bucket of ``limit`` bytes on
    rank 0 (without sending); rank 0 returns (largest bucket, peak RSS growth during the
    gathering, bytes of the whole model)."""
    from rft.distributed.weight_broadcast import TensorSpec, buckets, layout
    from rft.trainer.weight_gather import gather_into, take_snapshot

    def kib(field: str) -> int:
        with open("/proc/self/status", encoding="utf-8") as handle:
            status = handle.read()
        return int(re.search(rf"{field}:\s+(\d+)", status).group(1)) * 1024

    snapshot = take_snapshot(rank.trainer.actor, rank.rank, rank.world_size)
    spec = [TensorSpec(m.name, m.shape, m.dtype) for m in snapshot.meta]
    before = kib("VmRSS")
    with open("/proc/self/clear_refs", "w", encoding="utf-8") as handle:
        handle.write("5")  # VmHWM := VmRSS
    largest = 0
    for indices in buckets(spec, limit):
        offsets, size = layout(spec, indices)
        bucket = torch.empty(size, dtype=torch.uint8) if rank.rank == 0 else None
        for index, offset in zip(indices, offsets, strict=True):
            target = (bucket[offset: offset + snapshot.meta[index].nbytes]
                      if bucket is not None else None)
            gather_into(snapshot, index, target, rank.group.sync_group)
        largest = max(largest, size)
        del bucket
    return largest, kib("VmHWM") - before, sum(m.nbytes for m in snapshot.meta)


@pytest.mark.slow
def test_memory_controls_change_memory_not_results(ray_two_cpus, registry, tmp_path,
                                                   tmp_path_factory):
    """Gradient checkpointing, parameter and optimizer offload (FSDP2's CPUOffloadPolicy;
    on a CPU the parameters stay where they are) and chunked entropies: the same
    parameters as the plain 1-rank trainer. On the same ranks: a weight gathering holds
    one bucket, not the model."""
    model = build_tiny_model(tmp_path_factory.mktemp("wide"), seed=0, hidden_size=256,
                             num_layers=4)  # ~17 MB of fp32 weights, tensors ≤ 1 MiB
    memory = {"actor_rollout_ref": {
        "model": {"enable_gradient_checkpointing": True},
        "actor": {"entropy_from_logits_with_chunking": True,
                  "fsdp_config": {"param_offload": True, "optimizer_offload": True}},
        "ref": {"fsdp_config": {"param_offload": True}}},
        "torch": {"entropy_chunk_size": 5}}
    kl = {"kl_loss_fn": "k3", "kl_loss_fn_args": {"kl_coef": 0.1}}  # a reference model too
    controlled = {"trainer_config": memory}
    one = TorchTrainer(plan_of(registry, tmp_path, model, 1, algorithm=kl))
    plain_gc = TorchTrainer(plan_of(registry, tmp_path, model, 1, algorithm=kl,
                                    trainer=controlled))
    two = sharded(plan_of(registry, tmp_path, model, 2, algorithm=kl, trainer=controlled))
    try:
        assert plain_gc.actor.is_gradient_checkpointing
        for seed in (1, 2):
            batch = rollouts(RAGGED, seed=seed, vocab=900)
            metrics = [t.train_step(batch) for t in (one, plain_gc, two)]
            assert metrics[2]["actor/kl_loss"] == pytest.approx(metrics[0]["actor/kl_loss"],
                                                                abs=1e-6)
        assert max_difference(one.named_weights(), plain_gc.named_weights()) == 0.0
        # each rank forms its own prompt groups: float32 sums over other shapes, which
        # Adam turns into weight differences up to ~1.4e-6 where a gradient is nearly
        # rounding noise (k_proj's bias: exactly 0 in exact arithmetic) — ~1 % of one
        # step at lr 1e-4, where a wrong gradient moves weights by up to ~1e-4
        assert max_difference(one.named_weights(), two.named_weights()) <= 3e-6
        limit = 1 << 20
        two.call_all(_gather_peak, limit)  # the first gathering also opens the connections
        largest, peak, total = two.call_all(_gather_peak, limit)[0]
        assert largest <= limit < total / 8
        assert peak <= 1.5 * limit, (peak, total)  # one bucket, not the model's 17 MB
    finally:
        two.close()


# ---- mode both ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_hd32(tmp_path_factory) -> Path:
    """vLLM's CPU attention needs head size 32."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_hd32"), seed=0, hidden_size=64,
                            num_heads=2, num_kv_heads=1)


VLLM = {"engine_type": "vllm", "dtype": "float32",
        "extra_engine_args": {"kv_cache_memory_bytes": 64 << 20}}


def both_config(tmp_path: Path, model: Path, **changes: Any) -> Path:
    from fixtures_models import arithmetic_tasks
    from test_embedded_run import write_config

    tasks = arithmetic_tasks(tmp_path, 8)
    base = {"mode": "both", "buffer__total_steps": 3, "synchronizer__sync_method": "nccl",
            "synchronizer__sync_timeout": 120, "explorer__rollout_model": VLLM,
            "trainer__save_interval": 0, "trainer__cpu_ranks": 2,
            "trainer__trainer_config": {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}}
    return write_config(tmp_path, model, tasks, **{**base, **changes})


def logged(tmp_path: Path, side: str) -> list[dict]:
    path = tmp_path / "ck" / "e2e" / "run" / "monitor" / f"{side}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_step(records: list[dict], key: str) -> dict[int, float]:
    return {r["step"]: r["metrics"][key] for r in records if key in r["metrics"]}


@pytest.mark.slow
def test_both_with_two_trainer_ranks_syncs_vllm_exactly(ray_two_cpus, registry, tmp_path,
                                                        model_hd32, capfd):
    """3 steps, sync_offset 0, nccl from 2 ranks to the vLLM engine: after each sync the
    engine's log-probs equal the trainer's; the placement is printed; the checkpoint is
    sharded; a later run on 1 rank resumes from it (2 → 1 through the checkpoint folder)."""
    from rft.launcher import run

    release()
    config = both_config(tmp_path, model_hd32)
    assert run(load_config(config, registry=registry)) == 0
    err = capfd.readouterr().err
    assert re.search(r"rft: trainer 'trainer': 2 FSDP2 ranks over 1 node\(s\), gloo; node "
                     r"\S+ \(\w+\): ranks 0, 1 \(1 CPU each\)", err), err[-3000:]
    trainer, explorer = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
    assert by_step(explorer, "explorer/model_version") == {1: 0, 2: 1, 3: 2}
    diffs = by_step(trainer, "training/rollout_logprobs_diff_max")
    assert sorted(diffs) == [1, 2, 3] and max(diffs.values()) <= 1e-4, diffs
    final = tmp_path / "ck" / "e2e" / "run" / "global_step_3"
    assert sorted(os.listdir(final)) == ["buffer.pt", "hf", "state.json", "trainer.pt",
                                         "trainer_sharded"]
    assert (final / "trainer_sharded" / "__1_0.distcp").is_file()
    # one more step on a single rank, from the sharded checkpoint
    resumed = both_config(tmp_path, model_hd32, buffer__total_steps=4, trainer__cpu_ranks=1,
                          synchronizer__sync_method="memory",
                          explorer__rollout_model={"engine_type": "hf", "dtype": "float32"})
    assert run(load_config(resumed, registry=registry)) == 0
    assert [r["step"] for r in logged(tmp_path, "trainer")] == [1, 2, 3, 4]
    assert by_step(logged(tmp_path, "explorer"), "explorer/model_version")[4] == 3
    assert by_step(logged(tmp_path, "trainer"), "training/rollout_logprobs_diff_max")[4] <= 1e-4


@pytest.mark.slow
def test_killed_rank_ends_the_run_naming_it_and_the_run_resumes(ray_two_cpus, registry,
                                                                tmp_path, tiny_model_dir):
    """SIGKILL to trainer rank 1 during a step: one line naming the rank, well within
    sync_timeout; the last checkpoint resumes on 2 ranks, which then hand out their weights
    as sharded checkpoints with a gathered hf/ export (sync_method checkpoint)."""
    import ray
    from rft.launcher import run

    release()
    slow = {"actor_rollout_ref": {"actor": {"ppo_epochs": 100}}}  # steps of a few seconds
    config = both_config(tmp_path, tiny_model_dir, buffer__total_steps=30,
                         synchronizer__sync_method="memory", trainer__save_interval=1,
                         explorer__rollout_model={"engine_type": "hf", "dtype": "float32"},
                         trainer__trainer_config=slow)
    killed: list[float] = []

    def kill_rank_one_mid_step() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                rank = ray.get_actor("trainer.rank1")
                doing = ray.get(rank.status.options(concurrency_group="side").remote())
            except ValueError:  # not started yet
                doing = ""
            if doing == "train step 2":
                time.sleep(0.5)
                os.kill(ray.get(rank.where.options(concurrency_group="side").remote()).pid,
                        signal.SIGKILL)
                killed.append(time.monotonic())
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_rank_one_mid_step)
    killer.start()
    with pytest.raises(RftError) as caught:
        run(load_config(config, registry=registry))
    ended = time.monotonic()
    killer.join()
    message = str(caught.value)
    assert killed and ended - killed[0] < 120, message
    assert re.search(r"trainer rank 1 of 2 \(node \S+, pid \d+\) died during train step \d+",
                     message), message
    assert "\n" not in message
    from rft.checkpoint import list_checkpoints

    saved = list_checkpoints(str(tmp_path / "ck" / "e2e" / "run"))
    assert saved and (Path(saved[-1].path) / "trainer_sharded").is_dir()
    last = saved[-1].step
    # two more steps, the weights handed out as sharded checkpoints with hf/ (checkpoint sync)
    resumed = both_config(tmp_path, tiny_model_dir, buffer__total_steps=last + 2,
                          synchronizer__sync_method="checkpoint",
                          explorer__rollout_model={"engine_type": "hf", "dtype": "float32"})
    assert run(load_config(resumed, registry=registry)) == 0
    trainer = logged(tmp_path, "trainer")
    steps = [r["step"] for r in trainer]
    assert steps[-2:] == [last + 1, last + 2] and steps.count(last + 1) == 1
    assert by_step(logged(tmp_path, "explorer"), "explorer/model_version")[last + 2] == last + 1
    assert by_step(trainer, "training/rollout_logprobs_diff_max")[last + 2] <= 1e-4
    hf = tmp_path / "ck" / "e2e" / "run" / f"global_step_{last + 1}" / "hf"
    assert (hf / "model.safetensors").is_file() and (hf / "tokenizer.json").is_file()


@pytest.mark.slow
def test_both_on_a_ray_cluster_of_three_nodes(ray_two_cpus, registry, tmp_path, model_hd32,
                                              capfd):
    """ray.cluster_utils.Cluster: three raylets on this machine, each a "node" with one CPU
    and one *Ray* GPU (a resource only: the processes run on the CPU over gloo), and a head
    node without resources. The GPU split (cluster.node_num 3, gpu_per_node 1) gives the
    explorer 1 GPU and the trainer 2 ranks: the explorer lands on one node and the ranks,
    packed, on the two others; vLLM and nccl sync as on one node."""
    import ray
    from ray.cluster_utils import Cluster
    from rft.device_check import GPUS_AS_LABELS_ENV
    from rft.launcher import run

    release()
    ray.shutdown()  # this module's single-node cluster
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "num_gpus": 0, "include_dashboard": False,
        "env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        for _ in range(3):
            cluster.add_node(num_cpus=1, num_gpus=1, env_vars={"OMP_NUM_THREADS": "1"})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="rft-three-nodes",  # GPUs: labels only
                 runtime_env={"env_vars": {"OMP_NUM_THREADS": "1",
                                           GPUS_AS_LABELS_ENV: "1"}})
        config = both_config(tmp_path, model_hd32, cluster__node_num=3, cluster__gpu_per_node=1)
        loaded = load_config(config, registry=registry)
        assert loaded.stages[0].config.trainer.ranks == 2
        assert run(loaded) == 0
        err = capfd.readouterr().err
        placed = re.search(r"rft: trainer 'trainer': 2 FSDP2 ranks over 2 node\(s\), gloo; "
                           r"node \S+ \((\w+)\): ranks 0 \(GPU \d\); node \S+ \((\w+)\): "
                           r"ranks 1 \(GPU \d\)", err)
        assert placed, err[-3000:]
        from ray._private.state import actors

        homes: dict[str, list[str]] = {}
        for actor in actors().values():
            homes.setdefault(actor["ActorClassName"], []).append(actor["Address"]["NodeID"])
        ranks, explorer = homes["TrainerRank"], homes["ExplorerService"]
        assert len(set(ranks)) == 2 and explorer[0] not in ranks, homes
        assert {r[:8] for r in ranks} == set(placed.groups())
        trainer, explorer_log = logged(tmp_path, "trainer"), logged(tmp_path, "explorer")
        assert by_step(explorer_log, "explorer/model_version") == {1: 0, 2: 1, 3: 2}
        diffs = by_step(trainer, "training/rollout_logprobs_diff_max")
        assert sorted(diffs) == [1, 2, 3] and max(diffs.values()) <= 1e-4, diffs
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_trainer_rendezvous_listens_on_the_master_address_only():
    """Rank 0's store of the trainer's process group listens on ``master_addr`` only
    (127.0.0.2 stands for the node's address) — torch's ``tcp://`` init would listen on
    ``::`` — and another rank joins it there."""
    import datetime

    import psutil
    import torch.distributed as dist
    from rft.trainer.parallel import free_port, rendezvous_store

    port = free_port()
    timeout = datetime.timedelta(seconds=10)
    store = rendezvous_store(0, 2, "127.0.0.2", port, timeout)
    listening = [(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections("inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listening == [("127.0.0.2", port)]
    client = rendezvous_store(1, 2, "127.0.0.2", port, timeout)
    client.set("joined", "yes")
    assert store.get("joined") == b"yes"
    assert isinstance(client, dist.TCPStore)


def test_an_engine_reads_the_actor_from_a_sharded_checkpoint_without_hf(tmp_path, tiny_model_dir):
    """A sharded trainer's checkpoint saved without ``hf/`` (``trainer.pt`` a marker, the
    state in DCP files) still gives an explorer the actor's whole weights (sync_method
    ``checkpoint`` may hand it any checkpoint); unreadable files: one line."""
    import torch.distributed.checkpoint as dcp
    from rft.checkpoint import Checkpoint, CheckpointError, load_actor_weights
    from rft.trainer.sharded_checkpoint import SHARDED_DIR, sharded_marker
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.AdamW(model.parameters())
    model_state, optimizer_state = get_state_dict(model, optimizer)
    folder = tmp_path / "global_step_4"
    dcp.save({"global_steps": 4, "actor": model_state, "actor_optimizer": optimizer_state},
             checkpoint_id=str(folder / SHARDED_DIR), no_dist=True)
    torch.save(sharded_marker(str(folder), 2, 4), folder / "trainer.pt")
    weights = load_actor_weights(Checkpoint(4, str(folder)))
    expected = model.state_dict()
    assert set(weights) <= set(expected) and "model.embed_tokens.weight" in weights
    assert all(torch.equal(weights[name], expected[name]) for name in weights)
    for path in (folder / SHARDED_DIR).glob("*.distcp"):
        path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="cannot read the sharded actor"):
        load_actor_weights(Checkpoint(4, str(folder)))
