"""rft-plugin-verl at validation: the trainer is registered; a missing or incompatible veRL
is one line; ``trainer.trainer_config`` keys reach veRL's config, or are an error naming the
key (unknown to veRL, or set by an rft field); rft's fields land where the veRL alignment
guide maps them. Nothing here builds a veRL worker (fast)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from rft.config import build_stages
from rft.config.schema import LoRAConfig
from rft.errors import ConfigError
from rft.plugins import PluginRegistry
from rft.testing.runs import apply_overrides
from rft_plugin_verl import environment, megatron
from rft_plugin_verl.config import VerlConfig, build_verl_config
from rft_plugin_verl.trainer import VerlTrainer


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """veRL's environment taken as fine, so that these tests see the config checks whatever
    is installed here (the environment check has tests of its own below)."""
    monkeypatch.setattr(environment, "problems", list)


def plain(model: str, **overrides: Any) -> dict[str, Any]:
    base = {
        "mode": "train", "checkpoint_root_dir": "/tmp/rft-verl-config-tests",
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2,
                      "optimizer": {"lr": 2e-6, "betas": [0.9, 0.95], "weight_decay": 0.1,
                                    "lr_warmup_steps": 3}},
        "model": {"model_path": model, "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"node_num": 1, "gpu_per_node": 0},
        "buffer": {"batch_size": 4, "total_steps": 5, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": "/tmp/rft-verl-config-tests.db"}}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "verl", "grad_clip": 0.5, "max_token_len_per_gpu": 96},
        "monitor": {"monitor_type": "jsonl"},
    }
    return apply_overrides(base, overrides)


def problems_of(registry: PluginRegistry, config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        build_stages(config, registry)
    return caught.value.problems


def verl_config(registry: PluginRegistry, config: dict[str, Any]) -> VerlConfig:
    """What the trainer would hand to veRL for ``config`` (validated first)."""
    c = build_stages(config, registry).stages[0].config
    return build_verl_config(model=c.model, algorithm=c.algorithm, trainer=c.trainer,
                             train_batch_size=c.buffer.train_batch_size,
                             total_steps=c.trainer.total_steps, cpu=True)


def test_the_distribution_registers_trainer_verl(registry: PluginRegistry) -> None:
    assert registry.get("trainer", "verl") is VerlTrainer
    assert registry.registration("trainer", "verl").distribution == "rft-plugin-verl"


def test_a_missing_verl_is_one_line_at_validation(registry, rft_tiny_model: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """veRL's absence is simulated by its distribution metadata (veRL is installed here)."""
    real = environment._version
    monkeypatch.setattr(environment, "_version",
                        lambda name: None if name == "verl" else real(name))
    assert problems_of(registry, plain(str(rft_tiny_model))) == [
        "trainer.trainer_type: trainer_type 'verl' needs veRL 0.9.1, which is not installed: "
        + environment.INSTALL]


def test_an_incompatible_environment_is_one_line_each(registry, rft_tiny_model: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another veRL release, and trl>=1.13 (which veRL 0.9.1 cannot build models next to),
    simulated by their versions' metadata."""
    real = environment._version
    versions = {"verl": "0.8.0", "trl": "1.16.0"}
    monkeypatch.setattr(environment, "_version", lambda name: versions.get(name, real(name)))
    found = problems_of(registry, plain(str(rft_tiny_model)))
    assert "trainer.trainer_type: trainer_type 'verl' is written for veRL 0.9.1, but veRL " \
           "0.8.0 is installed: pip install --no-deps verl==0.9.1" in found
    assert any(line.startswith("trainer.trainer_type: veRL 0.9.1 cannot build models next to "
                               "trl 1.16.0") for line in found), found
    assert all("\n" not in line for line in found)


def test_rft_fields_map_onto_verls_config(registry, rft_tiny_model: Path, installed) -> None:
    """The veRL alignment guide's mapping, and the one-process defaults (one optimizer step
    per training step), and what veRL needs on a CPU."""
    got = verl_config(registry, plain(str(rft_tiny_model)))
    a = "actor_rollout_ref.actor."
    assert got.get("actor_rollout_ref.model.path") == str(rft_tiny_model)
    assert got.get("critic.model.path") == str(rft_tiny_model)
    assert got.get("actor_rollout_ref.rollout.n") == 2
    assert got.get(a + "optim.lr") == 2e-6 and got.get(a + "optim.betas") == [0.9, 0.95]
    assert got.get(a + "optim.weight_decay") == 0.1 and got.get(a + "optim.lr_warmup_steps") == 3
    assert got.get(a + "optim.clip_grad") == 0.5 and got.get(a + "grad_clip") == 0.5
    assert got.get(a + "optim.total_training_steps") == 5
    assert got.get("critic.optim.lr") == 2e-6  # as the native trainer: algorithm.optimizer
    assert got.get(a + "use_dynamic_bsz") is True  # trainer.use_dynamic_bsz's default
    assert got.get(a + "ppo_max_token_len_per_gpu") == 96
    assert got.get("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu") == 96
    assert got.get(a + "ppo_mini_batch_size") == 4  # train_batch_size 8 / repeat_times 2
    # no CUDA: FSDP2 in float32, eager attention, no packed sequences
    assert got.strategy == "fsdp2" and got.get(a + "strategy") == "fsdp2"
    assert got.get(a + "fsdp_config.mixed_precision") == {
        "param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert got.get("actor_rollout_ref.model.override_config.attn_implementation") == "eager"
    assert got.get("actor_rollout_ref.model.use_remove_padding") is False
    assert "trainer.trainer_strategy: 'fsdp' (FSDP1) needs an accelerator; on this machine " \
           "without CUDA veRL runs 'fsdp2'" in got.warnings


def test_trainer_config_keys_reach_verl(registry, rft_tiny_model: Path, installed) -> None:
    """veRL keys pass through, including a field of a veRL dataclass the flattened yaml does
    not list (``fsdp_config.mixed_precision``), a free-form mapping (``override_config``) and
    the guide's legacy spelling ``critic.model.fsdp_config``."""
    tree = {
        "actor_rollout_ref": {
            "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 3,
                      "fsdp_config": {"param_offload": True,
                                      "mixed_precision": {"param_dtype": "bf16"}}},
            "model": {"enable_gradient_checkpointing": False,
                      "override_config": {"rope_theta": 5000.0}},
            "rollout": {"log_prob_micro_batch_size_per_gpu": 3}},
        "critic": {"cliprange_value": 0.2, "optim": {"lr": 1e-5},
                   "model": {"fsdp_config": {"optimizer_offload": True}}},
        "trainer": {"critic_warmup": 2},
    }
    got = verl_config(registry, plain(str(rft_tiny_model),
                                      **{"trainer.trainer_config": tree}))
    a = "actor_rollout_ref.actor."
    assert got.get(a + "ppo_mini_batch_size") == 2 and got.get(a + "ppo_epochs") == 3
    assert got.get(a + "fsdp_config.param_offload") is True
    assert got.get(a + "fsdp_config.mixed_precision") == {"param_dtype": "bf16"}  # the user's
    assert got.get("actor_rollout_ref.model.enable_gradient_checkpointing") is False
    assert got.get("actor_rollout_ref.model.override_config.rope_theta") == 5000.0
    assert got.get("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu") == 3
    assert got.get("critic.cliprange_value") == 0.2 and got.get("critic.optim.lr") == 1e-5
    assert got.get("critic.fsdp.optimizer_offload") is True
    assert got.get("trainer.critic_warmup") == 2
    assert not got.problems


def test_unknown_or_rft_owned_trainer_config_keys_are_errors(registry, rft_tiny_model: Path,
                                                             installed) -> None:
    tree = {
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_sise": 2, "clip_ratio": 0.3,
                                        "optim": {"lr": 1e-5}},
                              "rollout": {"gpu_memory_utilization": 0.5}},
        "critic": {"cliprange_valeu": 0.2},
        "trainer": {"n_gpus_per_node": 8},
        "torch": {"device": "cpu"},
    }
    found = problems_of(registry, plain(str(rft_tiny_model), **{"trainer.trainer_config": tree}))
    k = "trainer.trainer_config."
    assert sorted(found) == sorted([
        f"{k}actor_rollout_ref.actor.ppo_mini_batch_sise: not a key of veRL 0.9.1's config; "
        "did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?",
        f"{k}actor_rollout_ref.rollout.gpu_memory_utilization: does not reach veRL: the "
        "rollout is rft's explorer: set explorer.rollout_model / model fields (veRL alignment "
        "guide, 'Actor, Rollout, and Critic'); only actor_rollout_ref.rollout.log_prob_micro_"
        "batch_size/log_prob_micro_batch_size_per_gpu/log_prob_use_dynamic_bsz/log_prob_max_"
        "token_len_per_gpu reach veRL",
        f"{k}critic.cliprange_valeu: not a key of veRL 0.9.1's config; did you mean "
        "'critic.cliprange_value'?",
        f"{k}trainer.n_gpus_per_node: set by rft's cluster.gpu_per_node, not here (veRL "
        "alignment guide)",
    ])


def test_keys_mirroring_rft_fields_are_a_warning(registry, rft_tiny_model: Path,
                                                 installed) -> None:
    """Inline keys that mirror rft fields (rft.config.verl_keys): rft's set field wins, with
    one warning naming both; equal values pass quietly (tests/test_verl_mirrored_keys.py
    covers a whole veRL file)."""
    tree = {"actor_rollout_ref": {"actor": {"clip_ratio": 0.3, "grad_clip": 0.5,
                                            "optim": {"lr": 1e-5}}}}
    loaded = build_stages(plain(str(rft_tiny_model), **{"trainer.trainer_config": tree}),
                          registry)
    said = [w for w in loaded.stages[0].warnings if w.startswith("trainer.trainer_config.")]
    k = "trainer.trainer_config.actor_rollout_ref.actor."
    assert said == [
        f"{k}clip_ratio 0.3 is overridden by algorithm.policy_loss_fn_args.clip_range unset "
        "(rft's default)",
        f"{k}optim.lr 1e-05 is overridden by algorithm.optimizer.lr 2e-06"]
    assert loaded.stages[0].config.trainer.trainer_config is None


def test_native_options_are_a_warning(registry, rft_tiny_model: Path, installed) -> None:
    loaded = build_stages(plain(str(rft_tiny_model), **{
        "trainer.trainer_config": {"torch": {"device": "cpu"}}}), registry)
    assert "trainer.trainer_config.torch.device: an option of the native trainer (trainer_type " \
           "torch); the verl trainer ignores it" in loaded.stages[0].warnings


def test_several_ranks_split_the_mini_batch(registry, rft_tiny_model: Path, installed) -> None:
    """``trainer.cpu_ranks: 2`` (2 veRL ranks), fixed micro-batches: each rank's default to its
    share of the mini-batch (8 rows → 4); a mini-batch the ranks do not divide, a
    micro-batch that does not divide a rank's share: one line each; LoRA with ranks is
    accepted."""
    two = plain(str(rft_tiny_model), **{"trainer.cpu_ranks": 2, "trainer.use_dynamic_bsz": False})
    assert build_stages(two, registry).stages[0].config.trainer.ranks == 2
    got = verl_config(registry, two)
    assert got.get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") == 4
    assert got.get("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu") == 4
    assert got.get("actor_rollout_ref.actor.ppo_mini_batch_size") == 4  # prompts, as veRL's
    found = problems_of(registry, plain(str(rft_tiny_model), **{"trainer.cpu_ranks": 3}))
    assert "trainer.ranks: veRL splits each mini-batch of 8 experiences (ppo_mini_batch_size " \
           "× repeat_times) evenly over its 3 ranks; choose a number of ranks that divides " \
           "it" in found, found
    micro = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
    found = problems_of(registry, apply_overrides(two, {f"trainer.trainer_config.{micro}": 3}))
    assert found == [(f"trainer.trainer_config.{micro}: 3 rows per micro-batch must divide "
                      "the 4 rows each of the 2 ranks gets of a mini-batch (veRL splits it "
                      "into whole micro-batches)")]
    with_lora = build_stages(apply_overrides(two, {"model.lora_configs": [
        {"lora_rank": 4}], "synchronizer.sync_method": "checkpoint"}), registry)
    assert with_lora.stages[0].config.trainer.ranks == 2  # LoRA runs on the ranks
    # (test_verl_ranks.py::test_lora_on_two_ranks_equals_one_rank)


def test_megatron_is_one_line_where_it_cannot_run(registry, rft_tiny_model: Path, installed,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No CUDA (``cluster.gpu_per_node: 0``) and none of veRL's Megatron dependencies
    (their absence simulated: whatever is installed here)."""
    monkeypatch.setattr(megatron, "_importable", lambda module: False)
    found = problems_of(registry, plain(str(rft_tiny_model),
                                        **{"trainer.trainer_strategy": "megatron"}))
    assert found == [
        "trainer.trainer_strategy: 'megatron' runs veRL's Megatron engine, which needs CUDA "
        "GPUs with megatron-core, Megatron-Bridge and Transformer Engine; missing here: a CUDA "
        "device, megatron-core, Megatron-Bridge, Transformer Engine (untested by rft: "
        "docs/verl-backend.md; use fsdp / fsdp2)"]


def test_megatron_strategy_reaches_verls_megatron_config(registry, rft_tiny_model: Path,
                                                         installed,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a GPU machine with Megatron installed (the environment check answers ``None``
    here): the tree is veRL's Megatron one, the strategy reaches actor, reference and
    critic, ``algorithm.optimizer`` lands in Megatron-Core's optimizer keys, Megatron keys
    of ``trainer_config`` pass; what has no Megatron counterpart is one line each."""
    monkeypatch.setattr(megatron, "environment_problem", lambda cpu, vanilla: None)
    validated = build_stages(plain(str(rft_tiny_model), **{"trainer.trainer_strategy":
                                                           "megatron"}), registry).stages[0]
    assert validated.warnings == ()  # nothing about the torch trainer's lack of Megatron
    c = build_stages(plain(str(rft_tiny_model), **{
        "algorithm.optimizer": {"min_lr_ratio": 0.1, "lr_scheduler_type": "cosine"}}),
        registry).stages[0].config
    tree: dict[str, Any] = {
        "actor_rollout_ref": {"actor": {"megatron": {"sequence_parallel": False}}},
        "critic": {"megatron": {"param_offload": True}}}

    def build(**fields: Any) -> VerlConfig:
        trainer = dataclasses.replace(c.trainer, trainer_strategy="megatron",
                                      **{"trainer_config": tree, **fields})
        return build_verl_config(model=c.model, algorithm=c.algorithm, trainer=trainer,
                                 train_batch_size=c.buffer.train_batch_size,
                                 total_steps=c.trainer.total_steps, cpu=False)

    got = build()
    assert not got.problems, got.problems
    a = "actor_rollout_ref.actor."
    assert [got.get(p + "strategy") for p in (a, "actor_rollout_ref.ref.", "critic.")] == [
        "megatron"] * 3
    assert got.get(a + "megatron.sequence_parallel") is False
    assert got.get("critic.megatron.param_offload") is True
    optim = got.get(a + "optim")
    assert optim["_target_"] == "verl.workers.config.McoreOptimizerConfig"
    assert (optim["lr"], optim["clip_grad"], optim["lr_decay_style"]) == (2e-6, 0.5, "cosine")
    assert optim["min_lr"] == pytest.approx(2e-7) and "min_lr_ratio" not in optim
    assert got.get(a + "grad_clip") is None and got.get(a + "fsdp_config") is None
    assert got.get("actor_rollout_ref.model.use_remove_padding") is True  # no CPU changes
    found = build(ulysses_sequence_parallel_size=2).problems
    assert found == ["trainer.ulysses_sequence_parallel_size: veRL's Megatron engine has no "
                     "Ulysses sequence parallelism; set trainer.trainer_config.actor_rollout_"
                     "ref.actor.megatron.context_parallel_size instead"]
    parallel = {"actor_rollout_ref": {"actor": {"megatron": {
        "tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}}}}
    assert build(trainer_config=parallel).problems == [
        "trainer.trainer_config.actor_rollout_ref.actor.megatron: tensor_model_parallel_size 2 "
        "× pipeline_model_parallel_size 2 × context_parallel_size 1 = 4 ranks per model "
        "replica, but the trainer has 1 (trainer.ranks; the core derives 1 for "
        "trainer_strategy megatron)"]
    assert not build(trainer_config=parallel, ranks=8).problems
    with_lora = dataclasses.replace(c.model, lora_configs=[LoRAConfig(lora_rank=4)])
    trainer = dataclasses.replace(c.trainer, trainer_strategy="megatron")
    found = build_verl_config(model=with_lora, algorithm=c.algorithm, trainer=trainer,
                              train_batch_size=c.buffer.train_batch_size, total_steps=5,
                              cpu=False).problems
    assert found == [megatron.lora_problem()]


def test_lora_configs_map_onto_verls_model_config(registry, rft_tiny_model: Path,
                                                  installed) -> None:
    """``model.lora_configs[0]`` → veRL's ``actor_rollout_ref.model`` LoRA keys (the
    trainer sets ``lora_adapter_path`` to the fresh adapter's folder when ``path`` is
    unset); veRL's own LoRA keys are the rft field's; what veRL cannot honour (a LoRA
    critic, an adapter dtype other than the base's) is one line each."""
    lora = {"lora_rank": 8, "lora_alpha": 16, "target_modules": "q_proj, v_proj",
            "exclude_modules": ".*layers\\.0\\..*"}
    got = verl_config(registry, plain(str(rft_tiny_model),
                                      **{"model.lora_configs": [lora],
                                         "synchronizer.sync_method": "checkpoint"}))
    m = "actor_rollout_ref.model."
    assert (got.get(m + "lora_rank"), got.get(m + "lora_alpha")) == (8, 16)
    assert got.get(m + "target_modules") == ["q_proj", "v_proj"]
    assert got.get(m + "exclude_modules") == ".*layers\\.0\\..*"
    assert got.get(m + "lora_adapter_path") is None
    assert got.get("critic.model.lora_rank") == 0 and not got.problems
    k = "trainer.trainer_config."
    tree = {"actor_rollout_ref": {"model": {"lora_rank": 4, "lora": {"merge": True}}},
            "critic": {"model": {"lora_rank": 4}}}
    found = problems_of(registry, plain(str(rft_tiny_model), **{
        "model.lora_configs": [{**lora, "lora_dtype": "bfloat16"}],
        "trainer.trainer_config": tree}))
    assert sorted(found) == sorted([
        f"{k}actor_rollout_ref.model.lora_rank: set by rft's model.lora_configs[0].lora_rank, "
        "not here (veRL alignment guide)",
        f"{k}actor_rollout_ref.model.lora.merge: set by rft's model.lora_configs (veRL's "
        "Megatron LoRA block; the adapter is synced by rft, never merged by veRL), not here "
        "(veRL alignment guide)",
        "model.lora_configs[0].lora_dtype: the verl trainer keeps the adapter in the base "
        "model's dtype (veRL's FSDP engine casts it); got 'bfloat16', use auto",
        f"{k}critic.model: a LoRA critic is not implemented by the verl trainer "
        "(model.lora_configs trains the actor's adapter; the critic trains in full, as with "
        "trainer_type torch)",
    ])


def gpu_verl_config(registry: PluginRegistry, config: dict[str, Any], flash_attn: bool,
                    trainer_config: dict[str, Any] | None = None) -> VerlConfig:
    """What the trainer would hand to veRL on GPUs (``cpu=False``), with or without
    ``flash-attn`` installed (``trainer_config``: set after validation, which here on a CPU
    refuses what needs CUDA)."""
    c = build_stages(config, registry).stages[0].config
    trainer = (dataclasses.replace(c.trainer, trainer_config=trainer_config)
               if trainer_config is not None else c.trainer)
    return build_verl_config(model=c.model, algorithm=c.algorithm, trainer=trainer,
                             train_batch_size=c.buffer.train_batch_size,
                             total_steps=c.trainer.total_steps, cpu=False, flash_attn=flash_attn)


def test_gpu_without_flash_attn_runs_sdpa_without_remove_padding(
        registry: PluginRegistry, rft_tiny_model: Path, installed: None) -> None:
    from rft_plugin_verl.config import NO_FLASH_ATTN

    got = gpu_verl_config(registry, plain(str(rft_tiny_model)), flash_attn=False)
    assert got.problems == []
    for section in ("actor_rollout_ref.model", "critic.model"):
        assert got.get(f"{section}.override_config.attn_implementation") == "sdpa"
        assert got.get(f"{section}.use_remove_padding") is False
    assert got.warnings.count(NO_FLASH_ATTN) == 1  # said once, both settings together
    with_flash = gpu_verl_config(registry, plain(str(rft_tiny_model)), flash_attn=True)
    assert NO_FLASH_ATTN not in with_flash.warnings
    assert with_flash.get("actor_rollout_ref.model.use_remove_padding") is True  # veRL's own
    asked = gpu_verl_config(registry, plain(str(rft_tiny_model)), flash_attn=False,
                            trainer_config={"actor_rollout_ref": {"model": {
                                "use_remove_padding": True,
                                "override_config": {"attn_implementation": "flash_attention_2"}}}})
    assert asked.problems == [
        "trainer.trainer_config.actor_rollout_ref.model.override_config.attn_implementation: "
        "flash_attention_2 needs flash-attn, which is not installed (pip install flash-attn, "
        "or 'sdpa')",
        "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding: packed sequences "
        "need flash-attn's varlen kernels, which are not installed (pip install flash-attn, "
        "or false)"]


@pytest.mark.parametrize("correction", [
    {"rollout_is": "token", "rollout_is_threshold": 2.0},
    {"rollout_is": "sequence", "rollout_is_threshold": "0.5_5.0",
     "rollout_is_batch_normalize": True, "rollout_rs": "seq_mean_k1,token_k3",
     "rollout_rs_threshold": "0.5_2.0,4.0"},
    {"bypass_mode": True}])
def test_rollout_correction_is_accepted(registry, rft_tiny_model: Path, installed,
                                        correction: dict[str, Any]) -> None:
    """The verl trainer applies ``algorithm.rollout_correction`` (its effect:
    ``test_verl_trainer.py::test_rollout_correction_equals_the_native_trainer``): every
    form validates, and the trainer reads the parsed section."""
    config = plain(str(rft_tiny_model), **{"algorithm.rollout_correction": correction})
    stage = build_stages(config, registry).stages[0]
    assert stage.config.trainer.trainer_type == "verl"
    read = dataclasses.asdict(stage.config.algorithm.rollout_correction)
    assert {key: read[key] for key in correction} == correction


def test_reinforce_bypass_loss_is_one_line(registry, rft_tiny_model: Path, installed) -> None:
    """What no trainer can do yet (veRL's bypass REINFORCE loss) stays one line naming the
    key."""
    config = plain(str(rft_tiny_model), **{"algorithm.rollout_correction": {
        "bypass_mode": True, "loss_type": "reinforce"}})
    problems = problems_of(registry, config)
    assert len(problems) == 1 and problems[0].startswith(
        "algorithm.rollout_correction.loss_type: ") and "reinforce" in problems[0], problems


def test_megatron_refuses_an_advantage_fn_needing_the_expected_entropy_signal(
        registry, rft_tiny_model: Path, installed, monkeypatch: pytest.MonkeyPatch) -> None:
    """``clipv`` reads the expected entropy signals, which the verl trainer gets from veRL's
    FSDP engine (:mod:`rft_plugin_verl.entropy`); veRL's Megatron engine computes its
    ``Σ p²`` with a kernel of its own, so the trainer refuses the pair in one line, before
    any worker starts (Megatron answered as installed, as on a GPU machine)."""
    from rft.errors import RftError

    monkeypatch.setattr(megatron, "environment_problem", lambda cpu, vanilla: None)
    plan = build_stages(plain(str(rft_tiny_model), **{
        "trainer.trainer_strategy": "megatron", "algorithm.advantage_fn": "clipv"}),
        registry).stages[0].plan
    with pytest.raises(RftError) as caught:
        VerlTrainer(plan.trainer_plan())
    assert str(caught.value) == (
        "algorithm.advantage_fn: 'clipv' needs the policy's expected entropy signals, which "
        "veRL's Megatron engine does not compute (use trainer_strategy: fsdp / fsdp2)")
