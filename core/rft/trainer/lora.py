"""LoRA on the native trainer (``model.lora_configs``), with ``peft``.

- :func:`apply_lora`: the actor becomes a ``peft`` model: a fresh adapter (``A`` random,
  ``B = 0``, so it starts as the base model) or the adapter at ``lora_configs[0].path``
  (trainable). The base weights are frozen; the optimizer gets :func:`trainable_parameters`
  only. The adapted layer computes ``y = W x + (alpha / r) · B A x``.
- :func:`reference_model`: the reference policy is the same model with its adapter
  switched off (peft's ``disable_adapter()``), :class:`AdapterDisabled`: no second copy of
  the weights. Without LoRA it is a frozen copy of the actor.
- :func:`adapter_weights`: what a weight sync moves (:class:`rft.adapter.AdapterWeights`),
  gathered tensor by tensor from the ranks when sharded.
- :func:`actor_state` / :func:`load_actor_state`: the ``actor`` entry of a checkpoint
  holds the adapter's tensors only (the base weights are the model at ``model_path``).
- :func:`merged_weights`: the base weights with the adapter merged in,
  ``W' = W + (alpha / r) · B A``, in Hugging Face naming, computed one layer at a time from
  a stream of the peft model's tensors (for ``trainer.save_hf_merged``).
- :func:`export`: ``save_hf_checkpoint``'s folder — peft's ``save_pretrained`` format, and
  the merged model in ``merged/`` when asked.

How ``target_modules`` / ``exclude_modules`` read: :mod:`rft.config.lora`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from rft.adapter import AdapterWeights, LoraSpec
from rft.config.lora import is_no_match, no_match_message, peft_config
from rft.config.schema import LoRAConfig
from rft.errors import RftError
from rft.tensor_wire import NamedTensors
from rft.trainer.models import frozen_copy

log = logging.getLogger("rft.trainer.lora")

KEY = "model.lora_configs[0]"
"""The dotted key every LoRA message names."""

ADAPTER = "default"
"""peft's name of the trained adapter inside the model (``….lora_A.default.weight``)."""

INIT_SEED = 0
"""Seed of a fresh adapter's random ``A`` (``B`` starts at zero)."""

MERGED_DIR = "merged"
"""Folder of the merged model inside the Hugging Face export."""

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def lora_of(model_config: Any) -> LoRAConfig | None:
    """The adapter to train (``model.lora_configs[0]``), ``None`` for full fine-tuning."""
    configs = getattr(model_config, "lora_configs", None) or []
    return configs[0] if configs else None


def lora_dtype(lora: LoRAConfig) -> torch.dtype | None:
    """The adapter's dtype; ``None`` (``auto``): the base model's (float32 master weights)."""
    if lora.lora_dtype == "auto":
        return None
    if lora.lora_dtype not in _DTYPES:
        raise RftError(f"{KEY}.lora_dtype: unknown dtype {lora.lora_dtype!r}; use auto, "
                       + ", ".join(sorted(_DTYPES)))
    return _DTYPES[lora.lora_dtype]


def _import_peft() -> Any:
    try:
        import peft
    except ImportError as exc:
        raise RftError(f"{KEY}: LoRA training needs peft (pip install peft, or the project's "
                       f"'lora' extra): {exc}") from exc
    return peft


def apply_lora(model: nn.Module, lora: LoRAConfig, *, base_model_name: str | None = None
               ) -> nn.Module:
    """``model`` (the base, float32) with the adapter of ``lora`` inserted; only the
    adapter is trainable. A fresh adapter's ``A`` is drawn with the seed
    :data:`INIT_SEED` (the same on every rank and in every run; the caller's random state
    is left as it was). A ``target_modules`` that matches nothing, an unreadable ``path``:
    one :class:`RftError` line naming the key."""
    peft = _import_peft()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(INIT_SEED)
        adapted = _insert_adapter(peft, model, lora, base_model_name)
    dtype = lora_dtype(lora)
    for parameter in trainable_parameters(adapted):
        if dtype is not None:
            parameter.data = parameter.data.to(dtype)
    if lora.path:
        loaded = adapter_config(adapted)
        if (loaded.r, loaded.lora_alpha) != (lora.lora_rank, lora.lora_alpha):
            log.warning("%s.path: the adapter at %s has rank %s, alpha %s; they win over "
                        "lora_rank %s, lora_alpha %s", KEY, lora.path, loaded.r,
                        loaded.lora_alpha, lora.lora_rank, lora.lora_alpha)
    return adapted


def _insert_adapter(peft: Any, model: nn.Module, lora: LoRAConfig,
                    base_model_name: str | None) -> nn.Module:
    try:
        if lora.path:
            adapted = peft.PeftModel.from_pretrained(model, os.path.expanduser(lora.path),
                                                     adapter_name=ADAPTER, is_trainable=True)
        else:
            adapted = peft.get_peft_model(model, peft_config(lora, base_model_name),
                                          adapter_name=ADAPTER)
    except ValueError as exc:  # peft's NoMatchingPeftModuleError is a ValueError
        if is_no_match(exc):
            raise RftError(no_match_message(lora, model)) from exc
        raise RftError(f"{KEY}: peft cannot build the adapter: "
                       f"{str(exc).splitlines()[0]}") from exc
    except (OSError, FileNotFoundError) as exc:
        raise RftError(f"{KEY}.path: cannot load a LoRA adapter from {lora.path!r}: "
                       f"{str(exc).splitlines()[0]}") from exc
    return adapted


def is_peft(model: nn.Module) -> bool:
    """``model`` is a peft model (peft is imported only by a LoRA run)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer updates (all of them without LoRA)."""
    return [p for p in model.parameters() if p.requires_grad]


class AdapterDisabled(nn.Module):
    """The reference policy of a LoRA run: the actor with its adapter switched off, in
    eval mode, sharing the actor's weights (not a module of its own: sharding, ``to`` and
    ``parameters()`` see nothing)."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "actor", actor)  # not registered: no second owner
        self.train(False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        actor: Any = self.__dict__["actor"]
        was_training = actor.training
        if was_training:
            actor.train(False)
        try:
            with actor.disable_adapter():
                return actor(*args, **kwargs)
        finally:
            if was_training:
                actor.train(True)


def reference_model(actor: nn.Module) -> nn.Module:
    """The reference policy: :class:`AdapterDisabled` for a LoRA actor, else a frozen
    copy (:func:`rft.trainer.models.frozen_copy`)."""
    if is_peft(actor):
        return AdapterDisabled(actor)
    return frozen_copy(actor)


def shares_actor_weights(model: nn.Module | None) -> bool:
    """``model`` is a view of the actor (nothing to shard or move)."""
    return isinstance(model, AdapterDisabled)


# ---- the adapter's tensors ------------------------------------------------------------


def saved_name(name: str) -> str:
    """peft's saved name of a parameter: the adapter's name removed
    (``….lora_A.default.weight`` → ``….lora_A.weight``)."""
    return name.replace(f".{ADAPTER}.", ".")


def adapter_config(model: nn.Module) -> Any:
    """The peft ``LoraConfig`` of ``model``'s adapter (``peft_config`` is set by peft;
    ``nn.Module`` types a missing attribute as a tensor or a module, so it is read by
    name)."""
    configs: dict[str, Any] = getattr(model, "peft_config")  # noqa: B009
    return configs[ADAPTER]


def lora_spec(actor: nn.Module, lora: LoRAConfig, base_model_name: str | None) -> LoraSpec:
    """The :class:`LoraSpec` of a LoRA actor (as peft resolved its target modules)."""
    config = adapter_config(actor)
    prefix = "base_model.model."
    modules = sorted({name.removeprefix(prefix).split(".lora_", 1)[0]
                      for name, p in actor.named_parameters() if p.requires_grad})
    return LoraSpec(name=lora.name or ADAPTER, rank=int(config.r), alpha=int(config.lora_alpha),
                    target_modules=tuple(modules),
                    base_model_name=lora.base_model_name or base_model_name)


def adapter_tensor_names(actor: nn.Module) -> list[str]:
    """The actor's adapter parameters (its trainable ones), in model order."""
    return [name for name, p in actor.named_parameters() if p.requires_grad]


def adapter_weights(actor: nn.Module, spec: LoraSpec, *, keep: bool = True
                    ) -> AdapterWeights | None:
    """The adapter as CPU copies under peft's saved names. Sharded (DTensor parameters):
    each tensor is gathered whole, one at a time — a collective every rank runs; ranks
    with ``keep`` false take part and return ``None``."""
    from rft.trainer.fsdp import full_tensor

    named = dict(actor.named_parameters())
    out = []
    for name in adapter_tensor_names(actor):
        tensor = full_tensor(named[name].detach())
        if keep:
            out.append((saved_name(name), tensor.to("cpu", copy=True).contiguous()))
    return AdapterWeights(spec, NamedTensors(out)) if keep else None


def actor_state(actor: nn.Module) -> dict[str, torch.Tensor]:
    """The ``actor`` entry of a checkpoint: the whole ``state_dict`` without LoRA; the
    adapter's tensors (the actor's own names) with it."""
    if not is_peft(actor):
        return actor.state_dict()
    state = actor.state_dict()
    return {name: state[name] for name in adapter_tensor_names(actor)}


def load_actor_state(actor: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Inverse of :func:`actor_state`; a LoRA checkpoint must hold every adapter tensor."""
    if not is_peft(actor):
        actor.load_state_dict(state)
        return
    names = adapter_tensor_names(actor)
    missing = [name for name in names if name not in state]
    if missing:
        raise RftError(f"trainer checkpoint: the actor's adapter lacks {len(missing)} "
                       f"tensor(s), e.g. {missing[0]} (a checkpoint of another lora_configs?)")
    actor.load_state_dict({name: state[name] for name in names}, strict=False)


# ---- merging -----------------------------------------------------------------------------


def merged_weights(named: Iterable[tuple[str, torch.Tensor | None]], scale: float
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's tensors in Hugging Face naming with the adapter merged in,
    ``W' = W + scale · B A`` (``A``: ``(r, in)``, ``B``: ``(out, r)``, ``W``: ``(out, in)``,
    computed in float32, returned in ``W``'s dtype), from a stream of the peft model's
    ``state_dict`` items (``None`` values are skipped: ranks that only take part)."""
    prefix = "base_model.model."
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in named:
        if tensor is None:
            continue
        name = name.removeprefix(prefix)
        if f".lora_A.{ADAPTER}." in name or f".lora_B.{ADAPTER}." in name:
            module, _, rest = name.partition(".lora_")
            part = rest[0]  # "A" or "B"
        elif name.endswith(".base_layer.weight"):
            module, part = name.removesuffix(".base_layer.weight"), "W"
        elif ".lora_" in name:  # another adapter's tensors: not merged
            continue
        else:
            yield name.replace(".base_layer.", "."), tensor
            continue
        parts = pending.setdefault(module, {})
        parts[part] = tensor
        if {"W", "A", "B"} <= set(parts):
            weight = parts["W"]
            delta = (parts["B"].float() @ parts["A"].float()) * scale  # (out, in)
            yield f"{module}.weight", (weight.float() + delta).to(weight.dtype)
            del pending[module]
    if pending:
        raise RftError(f"trainer: cannot merge the adapter: incomplete layers "
                       f"{', '.join(sorted(pending))}")


def base_model(actor: nn.Module) -> nn.Module:
    """The Hugging Face model inside a peft model (its config, class, generation config)."""
    # peft's method (nn.Module types a missing attribute as a tensor or a module)
    return getattr(actor, "get_base_model")() if is_peft(actor) else actor  # noqa: B009


def export(actor: nn.Module, spec: LoraSpec, path: str, *, merged: bool,
           tokenizer_path: str | None, is_rank0: bool = True,
           stream: Iterable[tuple[str, torch.Tensor | None]] | None = None) -> None:
    """The Hugging Face export of a LoRA actor: peft's ``save_pretrained`` folder at
    ``path`` and, with ``merged``, the merged model (and its tokenizer) at
    ``path/merged``. Sharded: every rank calls it; ``stream`` is the gathered
    ``state_dict`` (``None`` on ranks other than 0) for the merge."""
    adapter = adapter_weights(actor, spec, keep=is_rank0)
    if adapter is not None:
        adapter.save(path)
    if not merged:
        return
    from rft.trainer.sharded_checkpoint import write_hf_folder

    items = stream if stream is not None else actor.state_dict().items()
    state = {name: tensor.detach().to("cpu", copy=True).contiguous()
             for name, tensor in merged_weights(_unique(actor, items), spec.scale)}
    if not is_rank0:
        return
    target = os.path.join(path, MERGED_DIR)
    write_hf_folder(base_model(actor), state, target)
    if tokenizer_path:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer_path).save_pretrained(target)


def _unique(actor: nn.Module, items: Iterable[tuple[str, Any]]
            ) -> Iterator[tuple[str, Any]]:
    """``items`` without the repeats of a shared tensor (tied embeddings)."""
    from rft.trainer.fsdp import unique_state_names

    keep = set(unique_state_names(actor))
    return ((name, tensor) for name, tensor in items if name in keep)


__all__ = [
    "KEY",
    "MERGED_DIR",
    "AdapterDisabled",
    "actor_state",
    "adapter_tensor_names",
    "adapter_weights",
    "apply_lora",
    "export",
    "is_peft",
    "load_actor_state",
    "lora_dtype",
    "lora_of",
    "lora_spec",
    "merged_weights",
    "reference_model",
    "saved_name",
    "shares_actor_weights",
    "trainable_parameters",
]
