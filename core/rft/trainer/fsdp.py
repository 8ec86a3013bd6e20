"""PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``) for the native trainer's ranks.

- :func:`shard_model`: ``fully_shard`` on every decoder layer (the classes a Hugging
  Face model lists in ``_no_split_modules``), then on the whole model (embeddings, final
  norm, head). Gradients are *summed* over ranks (divide factor 1, sum reduction), see
  :mod:`rft.trainer.parallel`. Options: FSDP2's ``MixedPrecisionPolicy`` (bfloat16
  parameters in forward / backward, float32 gradient reduction; CUDA only) and
  ``CPUOffloadPolicy`` (sharded parameters, gradients and optimizer state in host memory).
- :func:`clip_grad_norm`: the global L2 norm over the sharded gradients (each rank's
  shard norm, all-reduced by DTensor), then clipping with it.
- :func:`unique_state_names` / :func:`full_tensor`: the model's tensors in Hugging Face
  naming, each shared tensor once, gathered one at a time (every rank takes part).
- :func:`move_optimizer_state`: optimizer state to host memory and back (offload).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from rft.errors import RftError
from rft.trainer.parallel import RankGroup


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The modules ``fully_shard`` wraps one by one: instances of the classes in
    ``model._no_split_modules`` (Hugging Face's decoder layers), else the entries of the
    first ``ModuleList`` named ``layers`` / ``h``."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names] if names else []
    if layers:
        return layers
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h"):
            return list(module)
    return []


def shard_model(model: nn.Module, group: RankGroup, *, offload: bool = False,
                param_dtype: torch.dtype | None = None, reshard_after_forward: bool = True
                ) -> nn.Module:
    """``fully_shard`` ``model`` per decoder layer and as a whole over ``group`` (in
    place; returned). ``param_dtype``: compute dtype of FSDP2's mixed precision (CUDA
    only; float32 master weights, float32 reduction); ``offload``: ``CPUOffloadPolicy``."""
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        FSDPModule,
        MixedPrecisionPolicy,
        fully_shard,
    )

    kwargs: dict[str, Any] = {"mesh": group.mesh, "reshard_after_forward": reshard_after_forward}
    if param_dtype is not None and param_dtype != torch.float32 and group.device.type == "cuda":
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype,
                                                   reduce_dtype=torch.float32)
    if offload:
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=group.device.type == "cuda")
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def clip_grad_norm(parameters: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip the (sharded) gradients to the global L2 norm ``max_norm``; return that norm
    (a plain 0-dim tensor, the same on every rank)."""
    from torch.distributed.tensor import DTensor

    params = [p for p in parameters if p.grad is not None]
    grads = [g for p in params if (g := p.grad) is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    if max_norm != float("inf"):
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def unique_state_names(model: nn.Module) -> list[str]:
    """``state_dict`` keys without the repeats of a shared tensor (tied embeddings): the
    same list on every rank (decided by parameter identity, not by storage)."""
    seen: set[int] = set()
    names: list[str] = []
    for name in model.state_dict():
        try:
            obj: Any = model.get_parameter(name)
        except AttributeError:
            try:
                obj = model.get_buffer(name)
            except AttributeError:
                obj = None
        key = id(obj) if obj is not None else hash(name)
        if key in seen:
            continue
        seen.add(key)
        names.append(name)
    return names


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded) ``value``: a collective for a DTensor
    (every rank must call it for the same tensor), the tensor itself otherwise."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        return value.full_tensor()
    return value


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str) -> None:
    """Move every tensor of the optimizer's state to ``device`` (offload / load back)."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device != torch.device(device):
                state[key] = value.to(device, non_blocking=True)


def check_shardable(model: nn.Module, key: str) -> None:
    """A model FSDP2 can shard layer by layer (a Hugging Face transformer)."""
    if not decoder_layers(model):
        raise RftError(f"{key}: {type(model).__name__} has no decoder layers FSDP2 can shard "
                       "one by one (no _no_split_modules and no 'layers' ModuleList)")


__all__ = ["check_shardable", "clip_grad_norm", "decoder_layers", "full_tensor", "is_sharded",
           "move_optimizer_state", "shard_model", "unique_state_names"]
