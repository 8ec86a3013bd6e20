"""``trainer.trainer_strategy: megatron``: veRL 0.9.1's Megatron engines behind the verl
trainer — **written with care, untested: GPU only.**

veRL builds its Megatron workers from another flattened default config,
``verl/trainer/config/_generated_ppo_megatron_trainer.yaml`` (:data:`CONFIG_FILE`): the
same ``actor_rollout_ref`` / ``critic`` sections with ``megatron`` engine blocks
(tensor / pipeline / context / expert parallel sizes, ``use_mbridge`` …) instead of
``fsdp_config``, and Megatron-Core's optimizer config. The strategy reaches veRL as
``actor_rollout_ref.actor.strategy`` / ``ref.strategy`` / ``critic.strategy: megatron``,
and veRL's ``EngineRegistry`` then builds ``MegatronEngineWithLMHead`` /
``MegatronEngineWithValueHead``. rft's fields map onto that tree as onto the FSDP one,
except (:func:`adapt_rft_values`):

- ``algorithm.optimizer``'s ``min_lr_ratio`` → ``min_lr = lr · min_lr_ratio``, the LR
  schedule type → ``lr_decay_style`` (Megatron-Core's names: ``constant``, ``cosine``);
- ``trainer.grad_clip`` → ``optim.clip_grad`` only (the Megatron actor has no
  ``grad_clip``);
- ``trainer.ulysses_sequence_parallel_size`` has no Megatron key: above 1 it is an error
  pointing at ``…megatron.context_parallel_size``.

What the machine needs (:func:`environment_problem`, one line at validation): a CUDA
device, ``megatron-core``, the bridge veRL converts Hugging Face checkpoints with
(Megatron-Bridge, or ``mbridge`` with ``megatron.vanilla_mbridge: true``) and
Transformer Engine. On a CPU machine it cannot run (measured with veRL 0.9.1,
megatron-core 0.16.1, mbridge 0.15.1; docs/verl-backend.md): Megatron-Core seeds its CUDA
RNG tracker (``torch.cuda.get_rng_state``), Megatron-Bridge requires Transformer Engine
for CUDA 13 and ``transformers<5``, mbridge builds Transformer Engine layer specs
(``TENorm``), and Transformer Engine's PyTorch extension does not build against a CPU
torch (``torch.version.cuda`` is ``None``).

LoRA with Megatron (veRL's ``actor_rollout_ref.model.lora`` block, Megatron-Bridge's
PEFT) is not wired (:func:`lora_problem`).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch

STRATEGY = "megatron"

CONFIG_FILE = "_generated_ppo_megatron_trainer.yaml"
"""veRL's flattened default config of its Megatron workers."""

FSDP_ONLY_KEYS = (
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    "critic.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.grad_clip",
    "critic.grad_clip",
)
"""Keys rft sets on veRL's FSDP tree that its Megatron tree does not have."""

MODULES = {
    "megatron-core": "megatron.core",
    "Megatron-Bridge": "megatron.bridge",
    "mbridge": "mbridge",
    "Transformer Engine": "transformer_engine",
}
"""Distribution → the module veRL's Megatron engine imports from it."""


def adapt_rft_values(values: dict[str, Any], optim: dict[str, Any], ulysses: int
                     ) -> list[str]:
    """Turn the FSDP-tree values rft's fields set (``values``: veRL key path → value;
    ``optim``: the ``optim`` section) into the Megatron tree's, in place; return the
    problems (one line each)."""
    problems = []
    if ulysses > 1:
        problems.append("trainer.ulysses_sequence_parallel_size: veRL's Megatron engine has no "
                        "Ulysses sequence parallelism; set trainer.trainer_config."
                        "actor_rollout_ref.actor.megatron.context_parallel_size instead")
    for key in FSDP_ONLY_KEYS:
        values.pop(key, None)
    ratio = float(optim.pop("min_lr_ratio", 0.0) or 0.0)
    optim["min_lr"] = float(optim["lr"]) * ratio  # Megatron-Core: an absolute floor
    optim["lr_decay_style"] = optim.pop("lr_scheduler_type", None) or "constant"
    return problems


def environment_problem(cpu: bool, vanilla_mbridge: bool) -> str | None:
    """One line naming what this machine lacks for veRL's Megatron engine (see the module
    docstring), or ``None``. Imports nothing (package specs and CUDA visibility only)."""
    bridge = "mbridge" if vanilla_mbridge else "Megatron-Bridge"
    missing = [name for name in ("megatron-core", bridge, "Transformer Engine")
               if not _importable(MODULES[name])]
    if cpu or not torch.cuda.is_available():
        missing.insert(0, "a CUDA device")
    if not missing:
        return None
    return ("trainer.trainer_strategy: 'megatron' runs veRL's Megatron engine, which needs "
            f"CUDA GPUs with megatron-core, {bridge} and Transformer Engine; missing here: "
            f"{', '.join(missing)} (untested by rft: docs/verl-backend.md; use fsdp / fsdp2)")


PARALLEL_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                  "context_parallel_size")
"""Megatron's model-parallel dimensions: their product of ranks holds one model replica."""

ENGINES = ("actor_rollout_ref.actor.megatron", "critic.megatron")


def parallel_problems(get: Any, ranks: int) -> list[str]:
    """Model-parallel sizes the trainer's ranks cannot hold: ``tensor × pipeline ×
    context`` must divide ``ranks`` (``get``: the resolved value at a veRL key path)."""
    problems = []
    for section in ENGINES:
        sizes = {name: int(get(f"{section}.{name}", 1) or 1) for name in PARALLEL_SIZES}
        product = sizes["tensor_model_parallel_size"] * sizes[
            "pipeline_model_parallel_size"] * sizes["context_parallel_size"]
        if ranks % product:
            shown = " × ".join(f"{name} {value}" for name, value in sizes.items())
            problems.append(f"trainer.trainer_config.{section}: {shown} = {product} ranks per "
                            f"model replica, but the trainer has {ranks} (trainer.ranks; the "
                            "core derives 1 for trainer_strategy megatron)")
    return problems


def lora_problem() -> str:
    return ("model.lora_configs: LoRA with trainer_strategy 'megatron' is not wired by the "
            "verl trainer (veRL's Megatron LoRA is another adapter format); use fsdp / fsdp2")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing
        return False


def save_hf_folder(hf_config: Any, weights: Any, path: str) -> None:
    """The actor in Hugging Face format from veRL's Megatron export (``weights``:
    ``(name, tensor)`` of ``get_per_tensor_param``, Hugging Face names through the bridge):
    ``config.json`` and ``model.safetensors``."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    hf_config.save_pretrained(path)
    state = {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in weights}
    save_file(state, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


__all__ = ["CONFIG_FILE", "STRATEGY", "adapt_rft_values", "environment_problem", "lora_problem",
           "parallel_problems", "save_hf_folder"]
