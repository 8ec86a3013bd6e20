"""rft-plugin-verl at validation: the trainer is registered; a missing or incompatible veRL
is one line; ``trainer.trainer_config`` keys reach veRL's config, or are an error naming the
key (unknown to veRL, or set by an rft field); rft's fields land where the veRL alignment
guide maps them. Nothing here builds a veRL worker (fast)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rft.config import build_stages
from rft.errors import ConfigError
from rft.plugins import PluginRegistry
from rft.testing.runs import apply_overrides
from rft_plugin_verl import environment
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
        f"{k}actor_rollout_ref.actor.clip_ratio: the verl trainer computes the actor loss with "
        "rft's loss functions (veRL's worker calls them): set "
        "algorithm.policy_loss_fn_args.clip_range instead",
        f"{k}actor_rollout_ref.actor.optim.lr: set by rft's algorithm.optimizer, not here "
        "(veRL alignment guide)",
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


def test_native_options_are_a_warning_and_one_rank_only(registry, rft_tiny_model: Path,
                                                        installed) -> None:
    loaded = build_stages(plain(str(rft_tiny_model), **{
        "trainer.trainer_config": {"torch": {"device": "cpu"}}}), registry)
    assert "trainer.trainer_config.torch.device: an option of the native trainer (trainer_type " \
           "torch); the verl trainer ignores it" in loaded.stages[0].warnings
    found = problems_of(registry, plain(str(rft_tiny_model), mode="both",
                                        **{"trainer.cpu_ranks": 2}))
    assert any(line.startswith("trainer.ranks: the verl trainer runs veRL's workers as one rank")
               for line in found), found


def test_megatron_is_refused(registry, rft_tiny_model: Path, installed) -> None:
    found = problems_of(registry, plain(str(rft_tiny_model),
                                        **{"trainer.trainer_strategy": "megatron"}))
    assert found == ["trainer.trainer_strategy: 'megatron' is not implemented by the verl "
                     "trainer (it drives veRL's FSDP engines); use fsdp or fsdp2"]
