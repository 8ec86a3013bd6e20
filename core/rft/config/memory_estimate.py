"""Trainer memory per device, estimated from ``config.json`` (no weights loaded).

Validation compares the estimate with the memory of one trainer device and, when it does
not fit, warns with the settings that would help (``ignore_validator_suggestions: true``
skips it). A rough, upper-leaning estimate of the torch trainer's actor, not a promise:

Parameters ``P`` of a decoder-only transformer (Llama / Qwen2 / Mistral shape), hidden
size ``h``, layers ``L``, vocabulary ``V``, MLP width ``I``, query heads ``n_q``, key/value
heads ``n_kv``, head size ``d = h / n_q``::

    P = V·h · (1 if tie_word_embeddings else 2)                      # embeddings (+ lm_head)
      + L · (h·n_q·d + 2·h·n_kv·d + n_q·d·h                          # q, k, v, o
             + 3·h·I                                                 # gate, up, down
             + 2·h)                                                  # two RMSNorms
      + h                                                            # final norm

Bytes on one of ``R`` trainer ranks (float32 master weights, AdamW; FSDP shards the
states over the ranks when ``R > 1``)::

    states      = P · (4 [weights, unless param_offload] + 4 [gradients]
                       + 8 [Adam m, v, unless optimizer_offload]) / R
    activations = T · (L · h · (34 if no gradient checkpointing else 2) + 8 · V)

with ``T = trainer.max_token_len_per_gpu`` tokens per micro-batch (``34·h`` bytes per
token and layer: Korthikanti et al. 2022's activation count in 16-bit precision without
attention scores; ``2·h`` with checkpointing keeps only each layer's input; ``8·V``: the
float32 logits and their gradient).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024 ** 3


@dataclass(frozen=True)
class ModelShape:
    """What the estimate reads from ``config.json``."""

    hidden_size: int
    num_layers: int
    vocab_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ModelShape:
        """The shape of a Hugging Face ``config.json`` (``text_config`` of multimodal ones);
        ``KeyError`` when it lacks ``hidden_size`` / ``num_hidden_layers`` / ``vocab_size``."""
        cfg = cfg.get("text_config") or cfg
        h = int(cfg["hidden_size"])
        heads = int(cfg.get("num_attention_heads") or 1)
        return cls(hidden_size=h, num_layers=int(cfg["num_hidden_layers"]),
                   vocab_size=int(cfg["vocab_size"]),
                   intermediate_size=int(cfg.get("intermediate_size") or 4 * h),
                   num_heads=heads,
                   num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or h // heads),
                   tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)))


def read_shape(model_path: str) -> ModelShape | None:
    """The shape from ``<model_path>/config.json``; ``None`` when there is none or it is
    not a decoder shape this estimate knows."""
    file = Path(model_path) / "config.json"
    try:
        return ModelShape.from_config(json.loads(file.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def parameter_count(s: ModelShape) -> int:
    """``P`` of the module docstring."""
    h, d = s.hidden_size, s.head_dim
    embeddings = s.vocab_size * h * (1 if s.tie_word_embeddings else 2)
    attention = h * s.num_heads * d + 2 * h * s.num_kv_heads * d + s.num_heads * d * h
    mlp = 3 * h * s.intermediate_size
    return embeddings + s.num_layers * (attention + mlp + 2 * h) + h


@dataclass(frozen=True)
class TrainerMemory:
    """Settings of the trainer that change its memory."""

    ranks: int = 1
    tokens_per_micro_batch: int = 4096
    param_offload: bool = False
    optimizer_offload: bool = False
    gradient_checkpointing: bool = False


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on one trainer device (module docstring)."""

    parameters: int
    state_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.state_bytes + self.activation_bytes


def estimate(shape: ModelShape, t: TrainerMemory) -> MemoryEstimate:
    """``states`` and ``activations`` of the module docstring, per rank."""
    p = parameter_count(shape)
    per_parameter = (0 if t.param_offload else 4) + 4 + (0 if t.optimizer_offload else 8)
    states = p * per_parameter // max(1, t.ranks)
    per_layer = 2 if t.gradient_checkpointing else 34
    activations = t.tokens_per_micro_batch * (
        shape.num_layers * shape.hidden_size * per_layer + 8 * shape.vocab_size)
    return MemoryEstimate(p, states, activations)


def _flag(tree: dict[str, Any] | None, path: str) -> bool:
    node: Any = tree or {}
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return bool(node)


def trainer_memory(trainer_config: dict[str, Any] | None, ranks: int,
                   tokens: int | None) -> TrainerMemory:
    """The memory settings in ``trainer.trainer_config`` (veRL key paths)."""
    fsdp = "actor_rollout_ref.actor.fsdp_config."
    return TrainerMemory(
        ranks=max(1, ranks), tokens_per_micro_batch=tokens or 4096,
        param_offload=_flag(trainer_config, fsdp + "param_offload"),
        optimizer_offload=_flag(trainer_config, fsdp + "optimizer_offload"),
        gradient_checkpointing=_flag(trainer_config,
                                     "actor_rollout_ref.model.enable_gradient_checkpointing"))


def available_host_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo``; ``None`` where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gpu_total_bytes() -> int | None:
    """Memory of the smallest GPU here, from ``nvidia-smi`` (which leaves CUDA
    uninitialised in this process); ``None`` where it does not answer."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
        return min(int(line) for line in out.split()) * 1024 ** 2
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def suggestions(t: TrainerMemory) -> list[str]:
    """Settings not yet used that lower the estimate, as config keys."""
    actor = "trainer.trainer_config.actor_rollout_ref."
    found = []
    if not t.gradient_checkpointing:
        found.append(actor + "model.enable_gradient_checkpointing: true")
    if not t.param_offload:
        found.append(actor + "actor.fsdp_config.param_offload: true")
    if not t.optimizer_offload:
        found.append(actor + "actor.fsdp_config.optimizer_offload: true")
    found += ["a smaller trainer.max_token_len_per_gpu",
              "more trainer ranks (cluster GPUs / trainer.cpu_ranks)",
              "model.lora_configs (LoRA)"]
    return found


def suggestion(shape: ModelShape, t: TrainerMemory, device_bytes: int, device: str,
               devices_sharing: int = 1) -> str | None:
    """The one-line warning when ``devices_sharing`` ranks' estimates exceed
    ``device_bytes``; ``None`` when they fit."""
    e = estimate(shape, t)
    need = e.total_bytes * devices_sharing
    if need <= device_bytes:
        return None
    share = f" × {devices_sharing} ranks" if devices_sharing > 1 else ""
    return (f"ignore_validator_suggestions: the trainer needs about "
            f"{e.total_bytes / GIB:.1f} GiB per rank{share} ({e.parameters / 1e9:.2f}B "
            f"parameters, {t.ranks} rank(s)) but the {device} has {device_bytes / GIB:.1f} GiB; "
            f"consider {', '.join(suggestions(t))} (or set ignore_validator_suggestions: true)")


__all__ = ["MemoryEstimate", "ModelShape", "TrainerMemory", "available_host_bytes",
           "estimate", "gpu_total_bytes", "parameter_count", "read_shape", "suggestion", "suggestions",
           "trainer_memory"]
