"""Models of the native trainer: loading, and forward passes over a :class:`TensorBatch`.

Shifts: the logit (or value) at column ``c`` predicts token ``c + 1``, so the response
tokens at columns ``P … P+R−1`` are scored by the outputs at ``P−1 … P+R−2`` — the last
``R + 1`` outputs minus the final one (veRL's ``[:, -R-1:-1]``). Only those positions go
through the LM head (``logits_to_keep``). With ``trainer.prefix_sharing: auto`` the torch
trainer's log-prob passes and the critic's value passes run each shared prefix of the batch
once where the model allows it (:mod:`rft.trainer.packed_forward`: GRPO batches hold every
prompt ``repeat_times`` times, multi-turn batches every turn's history).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rft.errors import RftError
from rft.multimodal.inputs import forward_inputs
from rft.multimodal.models import auto_model_class
from rft.ops import (entropy_from_log_probs, entropy_from_logits,
                     expected_entropy_signal_from_logits, logprobs_from_logits)
from rft.rope import apply_rope
from rft.trainer.batching import TensorBatch
from rft.trainer.layout_memo import LayoutMemo
from rft.trainer.packed_forward import (NodeLogits, SharedLayout, fallback_reason,
                                        log_fallback, packed_logits, shared_layout,
                                        shared_node_logits, worth_packing)
from rft.trainer.packed_forward import shared_prompt_logits as shared_prompt_logits
from rft.trainer.prompt_groups import PromptGroups, use_prompt_group_attention


def save_pretrained(model: nn.Module, path: str) -> None:
    """``model.save_pretrained(path)`` of a transformers (or peft) model (``nn.Module``
    types a missing attribute as a tensor or a module, so the method is read by name)."""
    getattr(model, "save_pretrained")(path)  # noqa: B009


def load_causal_lm(path: str, *, trust_remote_code: bool = False,
                   key: str = "model.model_path", rope_scaling: dict[str, Any] | None = None,
                   rope_theta: float | None = None) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(path)`` in float32 (master weights), with
    the ``model.rope_scaling`` / ``model.rope_theta`` overrides (:mod:`rft.rope`); a
    vision-language checkpoint through ``AutoModelForImageTextToText``
    (:func:`rft.multimodal.models.auto_model_class`)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        apply_rope(config, rope_scaling, rope_theta)
        model: nn.Module = auto_model_class(config).from_pretrained(
            path, config=config, dtype=torch.float32, trust_remote_code=trust_remote_code)
        return model
    except (OSError, ValueError) as exc:
        raise RftError(f"{key}: cannot load a causal LM from {path!r}: "
                       f"{str(exc).splitlines()[0]}") from exc


def load_value_model(path: str, *, trust_remote_code: bool = False,
                     rope_scaling: dict[str, Any] | None = None,
                     rope_theta: float | None = None) -> nn.Module:
    """A value model: the backbone at ``path`` with a fresh scalar head per token
    (``AutoModelForTokenClassification``, ``num_labels=1``, no dropout; as veRL's critic),
    with the RoPE overrides of :func:`load_causal_lm`."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        apply_rope(config, rope_scaling, rope_theta)
        config.num_labels = 1
        config.classifier_dropout = 0.0
        return AutoModelForTokenClassification.from_pretrained(
            path, config=config, dtype=torch.float32, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise RftError(f"model.critic_model_path: cannot load a value model from {path!r}: "
                       f"{str(exc).splitlines()[0]}") from exc


def frozen_copy(model: nn.Module) -> nn.Module:
    """A deep copy with gradients off, in eval mode (the reference model)."""
    reference = copy.deepcopy(model)
    reference.requires_grad_(False)
    reference.eval()
    return reference


def has_dropout(model: nn.Module) -> bool:
    """Whether any dropout in ``model`` is active (``p > 0``)."""
    return any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()) or any(
        float(getattr(getattr(model, "config", None), name, 0.0) or 0.0) > 0
        for name in ("attention_dropout", "hidden_dropout", "resid_pdrop"))


def autocast_context(device: torch.device, dtype: torch.dtype | None) -> Any:
    """``torch.autocast`` for a reduced-precision ``dtype``; a no-op for float32/None."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _model_inputs(batch: TensorBatch, device: torch.device, model: nn.Module
                  ) -> dict[str, torch.Tensor]:
    """The forward's inputs: ids, mask and positions; for a batch with images its rows'
    vision inputs joined in row order (:meth:`TensorBatch.vision_inputs`) and
    ``mm_token_type_ids`` instead of the positions — the model computes its own 3-D rope
    positions from them and the mask (Qwen2-VL's ``get_rope_index``), as in generation."""
    inputs = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "position_ids")}
    vision = batch.vision_inputs()
    if vision is None:
        return inputs
    del inputs["position_ids"]
    return {**inputs, **forward_inputs(getattr(model, "config", None), inputs["input_ids"],
                                       vision, device)}


def response_logprobs(model: nn.Module, batch: TensorBatch, *, device: torch.device,
                      temperature: float = 1.0, with_entropy: bool = False,
                      entropy_grad: bool = True, dtype: torch.dtype | None = None,
                      entropy_chunk: int | None = None, shared_prompts: bool = False,
                      layouts: LayoutMemo | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs ``(B, R)`` of the response tokens and, optionally, entropies
    (computed without autograd when ``entropy_grad`` is false: metric only; over chunks
    of ``entropy_chunk`` positions when set, see :func:`chunked_entropy`).

    ``logits / temperature`` (the sampling temperature, as veRL) in float32.
    ``shared_prompts``: run each shared prefix once
    (:func:`rft.trainer.packed_forward.shared_node_logits`: prompt groups or prefix-tree
    packs; the log-probs and entropies
    then come from each scoring node once, :func:`_node_logprobs`) where the model and the
    batch allow it (:func:`uses_shared_prompts`) and the rows share enough
    (:func:`rft.trainer.packed_forward.saves_tokens`); else the model's plain forward.
    ``layouts``: where the layout of rows run before is found again (the trainer's
    :class:`~rft.trainer.layout_memo.LayoutMemo`; ``None``: built for this call).
    """
    inputs = _model_inputs(batch, device, model)
    layout = _shared_layout(model, batch, inputs, dtype, layouts) if shared_prompts else None
    if layout is not None:
        with autocast_context(device, dtype):
            nodes = shared_node_logits(model, layout)
        return _node_logprobs(nodes, inputs["input_ids"][:, batch.prompt_width:],
                              temperature, with_entropy, entropy_grad, entropy_chunk)
    logits, labels = response_logits(model, batch, device=device, temperature=temperature,
                                     dtype=dtype, shared_prompts=False)
    return _logprobs_and_entropy(logits, labels, with_entropy, entropy_grad, entropy_chunk)


def _logprobs_and_entropy(logits: torch.Tensor, labels: torch.Tensor, with_entropy: bool,
                          entropy_grad: bool, entropy_chunk: int | None
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`response_logprobs`' log-probs and entropies from float32 ``logits``
    ``(..., V)`` and ``labels`` ``(...)``: ``log p = log_softmax(z)`` once
    (:func:`rft.ops.logprobs_from_logits`), read for both."""
    log_p = F.log_softmax(logits, dim=-1)  # (..., V)
    logps = log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (...)
    return logps, _entropy(log_p, with_entropy, entropy_grad, entropy_chunk)


def _entropy(log_p: torch.Tensor, with_entropy: bool, entropy_grad: bool,
             entropy_chunk: int | None) -> torch.Tensor | None:
    """Entropies ``(...)`` from the log-probs' ``log_p = log_softmax(z)`` ``(..., V)``
    (``None`` without ``with_entropy``): ``H = −Σ_v p_v log p_v``
    (:func:`rft.ops.entropy_from_log_probs`; over chunks of ``entropy_chunk`` positions
    when set, :func:`chunked_entropy`), with gradient when ``entropy_grad`` and gradients
    are on (else a metric)."""
    if not with_entropy:
        return None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        return (entropy_from_log_probs(log_p) if entropy_chunk is None
                else chunked_entropy(log_p, entropy_chunk))  # (...)


def _node_logprobs(nodes: NodeLogits, labels: torch.Tensor, temperature: float,
                   with_entropy: bool, entropy_grad: bool, entropy_chunk: int | None
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs and entropies ``(B, R)`` of the response tokens ``labels`` ``(B, R)``
    from the packs' scoring nodes: ``log softmax(z_i / T)_y`` with ``z_i`` the node
    ``i = index[b, j]`` (``log_softmax`` and entropy once per node, not per response
    column). Padding columns read the values of an all-zero logit row (``−log V``,
    ``log V``), as the expanded logits of :meth:`NodeLogits.expand` give."""
    logits = nodes.logits.float()  # (M, V)
    if temperature != 1.0:
        logits = logits / temperature
    vocab = logits.shape[-1]
    valid = nodes.valid  # (B, R)
    log_p = F.log_softmax(logits, dim=-1)  # (M, V)
    flat = (nodes.index * vocab + labels).reshape(-1)  # (B·R,) into log_p's flat view
    logps = log_p.reshape(-1).index_select(0, flat).reshape(labels.shape)  # (B, R)
    entropy = _entropy(log_p, with_entropy, entropy_grad, entropy_chunk)  # (M,)
    uniform = math.log(vocab)
    logps = torch.where(valid, logps, logps.new_full((), -uniform))
    if entropy is not None:
        entropy = entropy[nodes.index]  # (B, R)
        entropy = torch.where(valid, entropy, entropy.new_full((), uniform))
    return logps, entropy


def response_logits(model: nn.Module, batch: TensorBatch, *, device: torch.device,
                    temperature: float = 1.0, dtype: torch.dtype | None = None,
                    shared_prompts: bool = False, layouts: LayoutMemo | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits ``(B, R, V)`` that predict the response tokens, ``logits / temperature``
    in float32, and those tokens ``(B, R)`` (the labels); ``shared_prompts`` and
    ``layouts`` as in :func:`response_logprobs`."""
    width = batch.response_width
    inputs = _model_inputs(batch, device, model)
    layout = _shared_layout(model, batch, inputs, dtype, layouts) if shared_prompts else None
    if layout is not None:
        with autocast_context(device, dtype):
            logits = shared_prompt_logits(model, inputs["input_ids"], inputs["attention_mask"],
                                          inputs["position_ids"], batch.prompt_width,
                                          layout=layout)  # (B, R, V)
        logits = logits.float()
    else:
        with autocast_context(device, dtype):
            try:
                output = model(**inputs, use_cache=False, logits_to_keep=width + 1)
            except TypeError:  # custom modelling code without ``logits_to_keep``
                output = model(**inputs, use_cache=False)
        logits = output.logits[:, -width - 1: -1, :].float()  # (B, R, V)
    if temperature != 1.0:
        logits = logits / temperature
    labels = inputs["input_ids"][:, batch.prompt_width:]  # (B, R)
    return logits, labels


@torch.no_grad()
def response_entropy_signals(model: nn.Module, batch: TensorBatch, *, device: torch.device,
                             temperature: float = 1.0, dtype: torch.dtype | None = None,
                             shared_prompts: bool = False, layouts: LayoutMemo | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From one forward pass without gradients (:func:`response_logits`): the response
    tokens' log-probs, the entropies ``H`` and the expected entropy signals ``N``
    (:func:`rft.ops.expected_entropy_signal_from_logits`, Trinity-RFT's ``necs``), each
    ``(B, R)`` in float32."""
    logits, labels = response_logits(model, batch, device=device, temperature=temperature,
                                     dtype=dtype, shared_prompts=shared_prompts,
                                     layouts=layouts)  # (B, R, V)
    logps = logprobs_from_logits(logits, labels)  # (B, R)
    entropy = entropy_from_logits(logits)  # (B, R)
    return logps, entropy, expected_entropy_signal_from_logits(logits)  # (B, R) each


def _shared_layout(model: nn.Module, batch: TensorBatch, inputs: dict[str, torch.Tensor],
                   dtype: torch.dtype | None, layouts: LayoutMemo | None
                   ) -> SharedLayout | None:
    """The layout that computes ``batch``'s shared prefixes once (``inputs``: its
    ``(B, P+R)`` model inputs) when the model and the batch allow it
    (:func:`uses_shared_prompts`): prompt groups (:mod:`rft.trainer.prompt_groups`) where
    whole prompts are shared, else prefix-tree packs when they compute fewer tokens
    (:func:`rft.trainer.packed_forward.saves_tokens`) and cost less than the plain rows
    (:func:`rft.trainer.packed_forward.packing_cost_reason`, logged when not); ``None``:
    the model's plain forward. ``layouts``: found there when built before."""
    if not uses_shared_prompts(model, batch, dtype):
        return None
    build = shared_layout if layouts is None else layouts.layout
    layout = build(model, inputs["input_ids"], inputs["attention_mask"],
                   inputs["position_ids"], batch.prompt_width)
    if isinstance(layout, PromptGroups):
        return layout
    config = getattr(model, "config", None)
    return layout if worth_packing(config, inputs["attention_mask"], layout) else None


def uses_shared_prompts(model: nn.Module, batch: TensorBatch,
                        dtype: torch.dtype | None) -> bool:
    """Whether :func:`response_logprobs` may run ``batch`` through
    :func:`~rft.trainer.packed_forward.shared_prompt_logits`: a model and a batch it
    supports (:func:`~rft.trainer.packed_forward.fallback_reason`, in any ``dtype``); when
    not, the reason is logged once."""
    if batch.response_width == 0 or len(batch) == 0:
        return False
    if batch.vision_inputs() is not None:
        log_fallback("rows with images (3-D rope positions and vision inputs are not packed)")
        return False
    use_prompt_group_attention(model)  # sdpa models: cascade attention for prompt groups
    reason = fallback_reason(model, batch["input_ids"], batch["attention_mask"],
                             batch["position_ids"], batch.prompt_width)
    if reason is not None:
        log_fallback(reason)
    return reason is None


def chunked_entropy(log_p: torch.Tensor, chunk: int) -> torch.Tensor:
    """:func:`rft.ops.entropy_from_log_probs` over ``chunk`` positions at a time (veRL's
    ``entropy_from_logits_with_chunking``): ``(chunk, V)`` temporaries instead of
    ``(B·R, V)`` ones; the same values (the entropy is per position).
    ``log_p``: ``(..., V)`` log-softmax → ``(...)``."""
    flat = log_p.reshape(-1, log_p.shape[-1])  # (N, V)
    parts = [entropy_from_log_probs(flat[start: start + chunk])
             for start in range(0, flat.shape[0], max(1, chunk))]
    out = torch.cat(parts) if parts else flat.new_zeros(0)
    return out.reshape(log_p.shape[:-1])


def response_values(critic: nn.Module, batch: TensorBatch, *, device: torch.device,
                    dtype: torch.dtype | None = None, shared_prompts: bool = False,
                    layouts: LayoutMemo | None = None) -> torch.Tensor:
    """Critic values ``(B, R)`` of the states before each response token: the value
    head's output at column ``P + j − 1`` for response column ``P + j``. ``shared_prompts``:
    each shared prefix runs once (:func:`rft.trainer.packed_forward.packed_logits` over the
    value head's one output per token) where the critic and the batch allow it, as
    :func:`response_logprobs` (``layouts`` too); else the critic's plain forward."""
    width = batch.response_width
    inputs = _model_inputs(batch, device, critic)
    layout = _shared_layout(critic, batch, inputs, dtype, layouts) if shared_prompts else None
    with autocast_context(device, dtype):
        if layout is not None:
            return packed_logits(critic, layout)[..., 0].float()  # (B, R)
        output = critic(**inputs, use_cache=False)
    scores = output.logits  # (B, P + R, 1)
    return scores[:, -width - 1: -1, 0].float()  # (B, R)


def unique_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``state_dict`` items without repeats of a shared tensor (tied embeddings)."""
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr() if tensor.numel() else id(tensor)
        if key in seen:
            continue
        seen.add(key)
        yield name, tensor.detach()


def set_training(model: nn.Module, training: bool) -> None:
    """``model.train(training)``, skipped when the model is already in that mode (the call
    walks every module)."""
    if model.training != training:
        model.train(training)
