"""rft's prefix-tree packed forward inside veRL's FSDP engines (``trainer.prefix_sharing``).

veRL 0.9.1's engine runs each micro-batch through ``forward_step``: its rows (veRL's
no-padding layout: nested ``input_ids`` / ``position_ids`` of each row's valid tokens, and
the left-/right-padded ``attention_mask`` ``(b, P+R)`` and ``prompts`` ``(b, P)`` kept
beside them) go through the model one row each, and the outputs come back as one nested
tensor per row over all its tokens, of which veRL and rft's loss hooks read the response
part only (``no_padding_2_padding``: the outputs at ``ℓ_p − 1 … ℓ_p + ℓ_r − 2``).

The engines here (:func:`lm_engine_class` for the actor and the reference model,
:func:`value_engine_class` for the critic) replace that forward, where the batch says
``trainer.prefix_sharing: auto`` (:data:`PREFIX_SHARING`, set by the trainer on each
batch) and nothing below stops it, by rft's own
(:mod:`rft.trainer.packed_forward`): the rows are padded back to ``(b, P+R)``, packed as a
prefix tree (GRPO's ``n`` rollouts of a prompt run their prompt once) and run through the
model's own forward with a 4-D mask; the outputs scoring each response token are written
where veRL's would be (the other positions hold 0: nothing reads them). Log-probs and
entropies use veRL's own functions on the logits divided by the rows' temperature; the
critic's values are the value head's outputs. Both equal veRL's forward to rounding
(``tests/test_verl_packing.py``: float32 within 1e-5, gradients too).

veRL's forward runs instead, with one line in the log naming why (as the torch trainer's
:func:`rft.trainer.packed_forward.log_fallback`), where packing cannot stand in for it:
veRL's fused kernels, Ulysses sequence parallelism, top-k distillation, Σπ² outputs, a
vision-language model, a trl value-head critic, or the torch trainer's own reasons
(:func:`rft.trainer.packed_forward.fallback_reason`: attention implementation, versions,
the probe). Every check before the probe is the same on every rank (config, not rows), so
the probe's forwards — collectives under FSDP2 — run on all ranks together.

These engines are what rft's CPU platform registers (:mod:`rft_plugin_verl.cpu_platform`);
on GPUs veRL's own engines run, as shipped.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from rft.trainer.packed_forward import (fallback_reason, log_fallback, packed_logits,
                                        worth_packing)
from rft.trainer.prefix_tree import PackedLayout, pack_rows

PREFIX_SHARING = "rft_prefix_sharing"
"""Non-tensor key of a veRL batch: ``True`` where ``trainer.prefix_sharing`` is ``auto``."""


def prefix_sharing_flag(setting: str) -> dict[str, bool]:
    """The batch's non-tensor entry for ``trainer.prefix_sharing`` (``auto`` | ``off``)."""
    return {PREFIX_SHARING: setting == "auto"}


def config_reason(engine: Any, micro_batch: Any) -> str | None:
    """Why the engine's settings keep veRL's own forward (the same on every rank);
    ``None`` if they do not. ``micro_batch``: veRL's ``TensorDict``."""
    from verl.utils import tensordict_utils as tu

    def flag(key: str) -> bool:
        return bool(tu.get_non_tensor_data(data=micro_batch, key=key, default=False))

    if flag("use_fused_kernels"):
        return "veRL's fused kernels (use_fused_kernels) compute log-probs inside the model"
    if getattr(engine, "use_ulysses_sp", False):
        return "Ulysses sequence parallelism splits each row over ranks"
    if flag("distillation_use_topk") or flag("distillation_only"):
        return "veRL's top-k distillation reads every position's logits"
    if flag("calculate_sum_pi_squared"):
        return "veRL's sum-of-squared-probabilities output reads every position's logits"
    module = engine.module
    config = model_config(engine)
    if config is not None and hasattr(config, "vision_config"):
        return "a vision-language model (3-D rope positions and vision inputs are not packed)"
    if hasattr(module, "v_head"):
        return "a trl value-head critic (AutoModelForCausalLMWithValueHead)"
    return None


def model_config(engine: Any) -> Any:
    """The Hugging Face config of the engine's model (inside an FSDP1 wrapper's
    ``.module`` where there is one); ``None`` if it has none."""
    module = engine.module
    return getattr(getattr(module, "module", module), "config", None)


def padded_rows(micro_batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``(input_ids, attention_mask, position_ids, P)``: veRL's nested rows back in the
    ``(b, P+R)`` left-padded-prompt / right-padded-response layout they came from
    (``attention_mask`` marks where each row's valid tokens sit, in order)."""
    mask = micro_batch["attention_mask"]  # (b, P+R)
    valid = mask.bool()
    nested_ids, nested_positions = micro_batch["input_ids"], micro_batch["position_ids"]
    ids = torch.zeros(valid.shape, dtype=nested_ids.dtype, device=mask.device)  # (b, P+R)
    ids[valid] = nested_ids.values()
    positions = torch.zeros(valid.shape, dtype=nested_positions.dtype, device=mask.device)
    positions[valid] = nested_positions.values()  # (b, P+R)
    return ids, mask, positions, int(micro_batch["prompts"].shape[1])


def packed_layout(engine: Any, micro_batch: Any) -> PackedLayout | None:
    """The prefix-tree packs of the micro-batch's rows, or ``None`` for veRL's forward (the
    batch does not ask for packing, a reason logged once, too little is shared, or the
    cost rule prefers the rows: :func:`rft.trainer.packed_forward.worth_packing`)."""
    from verl.utils import tensordict_utils as tu

    if not tu.get_non_tensor_data(data=micro_batch, key=PREFIX_SHARING, default=False):
        return None
    reason = config_reason(engine, micro_batch)
    if reason is not None:
        log_fallback(reason)
        return None
    ids, mask, positions, width = padded_rows(micro_batch)
    reason = fallback_reason(engine.module, ids, mask, positions, width)
    if reason is not None:
        log_fallback(reason)
        return None
    layout = pack_rows(ids, mask, positions, width)
    return layout if worth_packing(model_config(engine), mask, layout) else None


def response_places(micro_batch: Any, layout: PackedLayout) -> torch.Tensor:
    """``(n,)`` flat index into the nested outputs (all rows' tokens, row after row) of
    each scored response column of ``layout.source`` (row-major over its valid columns):
    column ``j`` of row ``b`` goes to ``offset_b + ℓ_p − 1 + j``."""
    mask = micro_batch["attention_mask"]  # (b, P+R)
    width = int(micro_batch["prompts"].shape[1])
    offsets = micro_batch["input_ids"].offsets()[:-1].to(mask.device)  # (b,)
    prompt_lengths = mask[:, :width].sum(-1)  # (b,)
    columns = torch.arange(layout.source.shape[1], device=mask.device)  # (R,)
    places = (offsets + prompt_lengths - 1)[:, None] + columns[None, :]  # (b, R)
    return places[layout.source >= 0]  # (n,)


def nested_outputs(micro_batch: Any, layout: PackedLayout, scored: torch.Tensor
                   ) -> torch.Tensor:
    """``scored`` ``(b, R)`` (one value per response column, padding columns ignored) as
    veRL's nested per-token output over each row's tokens (0 where no response token is
    scored)."""
    offsets = micro_batch["input_ids"].offsets()
    total = int(offsets[-1])
    flat = scored.new_zeros(total)  # (total_nnz,)
    flat = flat.index_put((response_places(micro_batch, layout),), scored[layout.source >= 0])
    return torch.nested.nested_tensor_from_jagged(flat, offsets.to(flat.device))


def _forward_step(engine: Any, micro_batch: Any, loss_function: Any,
                  outputs: Callable[[], dict[str, torch.Tensor]]
                  ) -> tuple[torch.Tensor, dict[str, Any]]:
    """veRL's ``forward_step`` with ``outputs()`` (the packed forward and its outputs in
    veRL's nested layout) in place of the model call and ``prepare_model_outputs``: the
    same autocast, loss call and returned dict as veRL's."""
    from verl.utils.device import get_device_name
    from verl.workers.engine.utils import detach_tree

    device_name = get_device_name()
    autocast_dtype = getattr(engine, "_autocast_dtype", torch.bfloat16)
    context: Any = (nullcontext() if autocast_dtype == torch.float32
                    else torch.autocast(device_type=device_name, dtype=autocast_dtype))
    with context:
        model_output = outputs()
        if loss_function is not None:
            loss, metrics = loss_function(model_output=model_output, data=micro_batch,
                                          dp_group=engine.get_data_parallel_group())
        else:
            loss, metrics = torch.tensor(1.0, device=device_name), {}
    return loss, {"model_output": detach_tree(model_output), "loss": loss.detach().item(),
                  "metrics": metrics}


def lm_outputs(engine: Any, micro_batch: Any, layout: PackedLayout) -> dict[str, torch.Tensor]:
    """The actor's (or reference model's) ``log_probs`` and, when asked, ``entropy`` over
    the packs, in veRL's nested layout: ``log softmax(z / τ_b)`` of each response token
    (veRL's ``logprobs_from_logits``) and the entropy of ``softmax(z / τ_b)`` (the engine's
    ``compute_entropy_from_logits``)."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.torch_functional import logprobs_from_logits

    logits = packed_logits(engine.module, layout)  # (b, R, V)
    temperature = micro_batch["temperature"]
    if isinstance(temperature, torch.Tensor):
        logits = logits / temperature.clamp(min=1e-8).to(logits.dtype)[:, None, None]
    elif float(temperature) != 1.0:
        logits = logits / max(float(temperature), 1e-8)
    valid = layout.source >= 0  # (b, R)
    width = int(micro_batch["prompts"].shape[1])
    labels = padded_rows(micro_batch)[0][:, width:]  # (b, R)
    scored = logits[valid]  # (n, V)
    entropy_too = bool(tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy",
                                              default=False))
    logps = torch.zeros(valid.shape, dtype=logits.dtype, device=logits.device)  # (b, R)
    logps = logps.masked_scatter(valid, logprobs_from_logits(
        logits=scored, labels=labels[valid], inplace_backward=not entropy_too))
    out = {"log_probs": nested_outputs(micro_batch, layout, logps)}
    if entropy_too:
        if engine.engine_config.entropy_checkpointing:
            entropy = torch.utils.checkpoint.checkpoint(engine.compute_entropy_from_logits,
                                                        scored, use_reentrant=False)
        else:
            entropy = engine.compute_entropy_from_logits(scored)  # (n,)
        per_column = torch.zeros(valid.shape, dtype=entropy.dtype, device=entropy.device)
        out["entropy"] = nested_outputs(micro_batch, layout,
                                        per_column.masked_scatter(valid, entropy))
    return out


def value_outputs(engine: Any, micro_batch: Any, layout: PackedLayout
                  ) -> dict[str, torch.Tensor]:
    """The critic's ``values`` over the packs in veRL's nested layout (the value head's one
    output per token)."""
    values = packed_logits(engine.module, layout)[..., 0]  # (b, R)
    return {"values": nested_outputs(micro_batch, layout, values)}


def _packed_class(base: Any, outputs: Callable[[Any, Any, PackedLayout],
                                                dict[str, torch.Tensor]], name: str) -> type:
    """``base`` (a veRL FSDP engine class) whose ``forward_step`` runs the packs where
    :func:`packed_layout` gives them, ``outputs(engine, micro_batch, layout)`` building the
    model-output dict; veRL's own ``forward_step`` otherwise."""

    def forward_step(self: Any, micro_batch: Any, loss_function: Any, forward_only: bool
                     ) -> tuple[torch.Tensor, dict[str, Any]]:
        from verl.utils.device import get_device_id

        micro_batch = micro_batch.to(get_device_id())
        layout = packed_layout(self, micro_batch)
        if layout is None:
            plain: tuple[torch.Tensor, dict[str, Any]] = base.forward_step(
                self, micro_batch, loss_function, forward_only)
            return plain
        return _forward_step(self, micro_batch, loss_function,
                             lambda: outputs(self, micro_batch, layout))

    doc = (f"veRL's ``{base.__name__}`` with rft's prefix-tree packed ``forward_step`` "
           "(:mod:`rft_plugin_verl.packed_engine`).")
    return type(name, (base,), {"forward_step": forward_step, "__doc__": doc,
                                "__module__": __name__})


def lm_engine_class() -> type:
    """veRL's language-model FSDP engine (actor, reference model) with the packed
    forward."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    return _packed_class(FSDPEngineWithLMHead, lm_outputs, "PackedLMEngine")


def value_engine_class(base: Any) -> type:
    """``base`` (veRL's value-model FSDP engine or a subclass of it) with the packed
    forward."""
    return _packed_class(base, value_outputs, f"Packed{base.__name__}")
