"""The full (unsharded) state of a veRL engine, and a LoRA actor's adapter, in rft's forms.

Run by the trainer in its own process (one rank) and by every veRL rank through the
``rft_*`` worker methods (:mod:`rft_plugin_verl.worker_group`): one definition for one
rank and for N. The gathers are collectives: every rank calls them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
from rft.adapter import LoraSpec
from rft.config.schema import LoRAConfig
from rft.errors import RftError
from rft.trainer.fsdp import unique_state_names

from rft_plugin_verl import lora as verl_lora


@dataclass(frozen=True)
class LoraActor:
    """What a LoRA actor's engine needs to hand out its adapter in rft's forms (sent to
    each veRL rank with the ``rft_*`` calls)."""

    lora: LoRAConfig
    """``model.lora_configs[0]``."""
    model_path: str
    """The base model (its target-module resolution, the export's tokenizer)."""

    def spec(self, engine: Any) -> LoraSpec:
        return verl_lora.spec_of(engine.module, self.lora, self.model_path)


def lora_named_weights(engine: Any, actor: LoraActor) -> Iterator[tuple[str, torch.Tensor]]:
    """The Hugging Face weights of a LoRA actor, the adapter merged in (a collective)."""
    keep = set(unique_state_names(engine.module))  # tied weights once
    yield from verl_lora.merged_weights(full_model_state(engine.module), keep,
                                        actor.spec(engine))


def lora_state(engine: Any, actor: LoraActor) -> dict[str, Any]:
    """A LoRA actor's state: ``actor`` its adapter only, optimizer, scheduler and
    ``lora`` the adapter's spec (a collective)."""
    state = engine_state(engine, "actor", "", frozen=False)
    state["lora"] = actor.spec(engine).to_plain()
    return state


def load_lora_state(engine: Any, state: dict[str, Any]) -> None:
    if "actor" in state:
        verl_lora.check_adapter_state(engine.module, state["actor"])
    load_engine_state(engine, state, "actor", "", strict=False)


def lora_export(engine: Any, actor: LoraActor, path: str, *, merged: bool,
                 write: bool = True) -> None:
    """The adapter in peft's format at ``path`` (``merged/`` too when asked); every rank
    calls it (the gathers are collectives), the rank where ``write`` writes."""
    module = engine.module
    state = list(full_model_state(module))  # a collective
    verl_lora.export(module, actor.spec(engine), path, merged=merged,
                     tokenizer_path=actor.model_path, state=iter(state), is_rank0=write)


def full_model_state(module: torch.nn.Module, frozen: bool = True
                      ) -> Iterator[tuple[str, torch.Tensor]]:
    """The module's full (unsharded) state, on the CPU; ``frozen`` false: its trainable
    parameters only (a LoRA actor's adapter)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True,
                               ignore_frozen_params=not frozen)
    trainable = None if frozen else set(verl_lora.adapter_names(module))
    for name, tensor in get_model_state_dict(module, options=options).items():
        if trainable is None or name in trainable:  # (a tied frozen weight slips through)
            yield name, cast(torch.Tensor, tensor)  # full state dicts hold tensors


def engine_state(engine: Any, model_key: str, prefix: str, frozen: bool = True
                  ) -> dict[str, Any]:
    """Model (``model_key``; ``frozen`` false: its trainable parameters only), optimizer
    and LR scheduler (``<prefix>optimizer`` / ``<prefix>scheduler``) of a veRL engine, in
    full form (one process)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        model_key: dict(full_model_state(engine.module, frozen)),
        f"{prefix}optimizer": get_optimizer_state_dict(engine.module, engine.optimizer,
                                                       options=options),
        f"{prefix}scheduler": engine.lr_scheduler.state_dict(),
    }


def load_engine_state(engine: Any, state: dict[str, Any], model_key: str, prefix: str,
                       strict: bool = True) -> None:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    missing = [k for k in (model_key, f"{prefix}optimizer", f"{prefix}scheduler")
               if k not in state]
    if missing:
        raise RftError(f"trainer checkpoint: missing {', '.join(missing)}")
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, strict=strict)
    set_model_state_dict(engine.module, state[model_key], options=options)
    set_optimizer_state_dict(engine.module, engine.optimizer, state[f"{prefix}optimizer"],
                             options=options)
    engine.lr_scheduler.load_state_dict(state[f"{prefix}scheduler"])
