"""The validator's trainer-memory estimate (``rft.config.memory_estimate``) and its
suggestion warning, silenced by ``ignore_validator_suggestions``."""

from __future__ import annotations

import json

import pytest
from rft.config import build_stages
from rft.config import memory_estimate as me
from test_config import base, registry  # noqa: F401  (fixtures)

LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192,
             "num_hidden_layers": 80, "vocab_size": 128256, "intermediate_size": 28672,
             "num_attention_heads": 64, "num_key_value_heads": 8,
             "tie_word_embeddings": False}
"""config.json of a Llama-3-70B shape (no weights)."""


def test_parameter_count_of_the_tiny_model_matches_its_weights(tiny_model_dir):
    """The count from config.json is within 2 % of the loaded model's parameters, so the
    estimate's state bytes (16 per parameter, one rank) are within 2 % of 4× its float32
    parameter bytes."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    real = sum(p.numel() for p in model.parameters())
    shape = me.read_shape(str(tiny_model_dir))
    assert shape is not None
    counted = me.parameter_count(shape)
    assert abs(counted - real) / real < 0.02, (counted, real)
    states = me.estimate(shape, me.TrainerMemory(ranks=1)).state_bytes
    assert abs(states / (4 * real * 4) - 1) < 0.02


def test_70b_parameter_count_and_sharding():
    shape = me.ModelShape.from_config(LLAMA_70B)
    assert 70.0e9 < me.parameter_count(shape) < 71.0e9  # Llama-3-70B: 70.6B
    one = me.estimate(shape, me.TrainerMemory(ranks=1))
    eight = me.estimate(shape, me.TrainerMemory(ranks=8, param_offload=True,
                                                optimizer_offload=True,
                                                gradient_checkpointing=True))
    assert eight.state_bytes == one.parameters * 4 // 8  # gradients only, sharded
    assert eight.activation_bytes < one.activation_bytes


def _on_cpu(base, model_dir):  # noqa: F811
    base["model"]["model_path"] = str(model_dir)
    base["cluster"] = {"node_num": 1, "gpu_per_node": 0}
    base["explorer"]["rollout_model"].update(engine_num=1, tensor_parallel_size=1)
    return base


def test_a_70b_config_gets_a_suggestion_and_the_flag_silences_it(base, registry,  # noqa: F811
                                                                 tmp_path):
    model_dir = tmp_path / "llama70b"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_70B))
    plain = _on_cpu(base, model_dir)
    warnings = build_stages(plain, registry).warnings
    lines = [w for w in warnings if w.startswith("ignore_validator_suggestions: ")]
    assert len(lines) == 1, warnings
    assert "70.55B parameters" in lines[0]
    assert "actor_rollout_ref.actor.fsdp_config.param_offload: true" in lines[0]
    assert "model.lora_configs" in lines[0]
    plain["ignore_validator_suggestions"] = True
    warnings = build_stages(plain, registry).warnings
    assert not [w for w in warnings if w.startswith("ignore_validator_suggestions")], warnings


def test_the_tiny_model_fits_without_a_suggestion(base, registry,  # noqa: F811
                                                  tiny_model_dir):
    warnings = build_stages(_on_cpu(base, tiny_model_dir), registry).warnings
    assert not [w for w in warnings if w.startswith("ignore_validator_suggestions")], warnings


@pytest.mark.parametrize("cfg", [{}, {"hidden_size": 8}, {"text_config": "x"}])
def test_unknown_shapes_give_no_estimate(tmp_path, cfg):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert me.read_shape(str(tmp_path)) is None


def test_on_a_gpu_cluster_the_estimate_is_against_one_gpu(base, registry, tmp_path,  # noqa: F811
                                                           monkeypatch):
    """Fake: this machine has no GPU, so the device count and ``nvidia-smi``'s answer are
    stood in for (one 80 GiB GPU); the trainer has 8 - 4 = 4 GPUs, states sharded over 4."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(me, "gpu_total_bytes", lambda: 80 * me.GIB)
    model_dir = tmp_path / "llama70b"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_70B))
    base["model"]["model_path"] = str(model_dir)
    base["trainer"]["ranks"] = 4
    lines = [w for w in build_stages(base, registry).warnings
             if w.startswith("ignore_validator_suggestions: ")]
    assert len(lines) == 1 and "4 rank(s)) but the GPU has 80.0 GiB" in lines[0], lines
