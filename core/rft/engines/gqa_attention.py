"""Grouped-query attention without copied key / value heads, for the ``hf`` engine on CPU.

``transformers``' ``sdpa`` attention copies each key / value head to the query heads
that share it (``repeat_kv``) whenever an attention mask is given on CPU (it passes
``enable_gqa`` to torch only without a mask, for CUDA's sake). With left-padded rows
there is always a mask, so every decode step copies the whole cache ``heads / kv_heads``
times: for a hidden-512, 4-layer model with 8 query and 2 key / value heads at 128 rows,
~40 % of the step. :func:`gqa_sdpa_forward`, registered through ``transformers``'
attention interface (the model's own layers call it; nothing of them is copied), hands
the grouped heads to :func:`torch.nn.functional.scaled_dot_product_attention` with
``enable_gqa=True``::

    out_h = softmax(q_h K_gᵀ · scale + mask) V_g,   g = h // (heads / kv_heads)

— the same attention (bit for bit on CPU in ``tests/test_decode_loop.py``). Any case it
does not cover (no grouping, no mask, a position bias, a paged cache) goes to
``transformers``' own ``sdpa_attention_forward``.

**Compiled decode steps** (``compile_decode``): while ``torch.compile`` traces a step of one
query per row, the same formula is written as two batched products and a softmax
(:func:`one_query_attention`) instead of SDPA's CPU kernel, which for one query spends
most of its time on its own set-up (~80 µs per call at 32 rows × 4 heads × 60 keys);
inductor fuses the scale, the mask and the softmax into one loop. Eager calls keep SDPA.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rft.attention_switch import switch_attention, switch_unavailable_reason

NAME = "rft_sdpa_gqa"
"""The attention implementation's name in ``transformers``' registries."""

_OWN_ARGUMENTS = frozenset({"position_bias", "cache"})
"""Arguments only ``transformers``' sdpa function handles."""


def gqa_sdpa_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                     value: torch.Tensor, attention_mask: torch.Tensor | None,
                     dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention of ``query`` ``(B, H, S, d)`` over ``key`` / ``value`` ``(B, KV, T, d)``
    with ``H = KV·groups``; returns ``(B, S, H, d)`` and no weights (the contract of
    ``transformers``' attention functions)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1))
    own_arguments = any(kwargs.get(name) is not None for name in _OWN_ARGUMENTS)
    if (query.shape[2] == 1 and attention_mask is not None and attention_mask.dim() == 4
            and attention_mask.shape[1] == 1 and dropout == 0.0
            and torch.compiler.is_compiling() and not own_arguments):
        return one_query_attention(query, key, value, attention_mask, scaling), None
    if groups <= 1 or attention_mask is None or own_arguments:
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        enable_gqa=True)  # (B, H, S, d)
    return out.transpose(1, 2).contiguous(), None


def one_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor, scaling: float | None) -> torch.Tensor:
    """Attention of one query per row, ``query`` ``(B, H, 1, d)`` over ``key`` / ``value``
    ``(B, KV, T, d)``, ``H = KV·G``, as batched products::

        out_{kv,g} = softmax(q_{kv,g} K_kvᵀ · scale + m) V_kv

    ``attention_mask`` ``(B, 1, 1, ≥T)`` (its first ``T`` columns are used): boolean
    (``True``: attend; ``m = 0`` or ``−∞``) or additive float; ``scale`` defaults to
    ``d^−½``. Computed in float32 whatever the inputs' dtype (as SDPA's CPU kernel
    accumulates bf16); returns ``(B, 1, H, d)`` in the query's dtype."""
    rows, heads, _, width = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(rows, kv_heads, heads // kv_heads, width).float()  # (B, KV, G, d)
    scale = width ** -0.5 if scaling is None else scaling
    scores = torch.matmul(grouped, key.float().transpose(-1, -2)) * scale  # (B, KV, G, T)
    keys_mask = attention_mask[..., :key.shape[2]]  # (B, 1, 1, T)
    if keys_mask.dtype == torch.bool:
        scores = scores.masked_fill(~keys_mask, -float("inf"))
    else:
        scores = scores + keys_mask.float()
    out = torch.matmul(scores.softmax(dim=-1), value.float())  # (B, KV, G, d) float32
    return out.reshape(rows, 1, heads, width).to(query.dtype)


def unavailable_reason(model: nn.Module) -> str | None:
    """Why ``model`` keeps ``transformers``' own sdpa attention (``None``: it can take
    :func:`gqa_sdpa_forward`): another backend, a device other than the CPU, or a torch
    / transformers without ``enable_gqa`` (torch ≥ 2.5) or the attention registries."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return "the attention backend is not sdpa"
    parameter = next(model.parameters(), None)
    if parameter is None or parameter.device.type != "cpu":
        return "the model is not on the CPU"
    return switch_unavailable_reason(model)


def use_gqa_attention(model: nn.Module) -> bool:
    """Switch ``model``'s attention to :func:`gqa_sdpa_forward` when
    :func:`unavailable_reason` allows it (masks as for ``sdpa``); returns whether it did."""
    if unavailable_reason(model) is not None:
        return False
    return switch_attention(model, NAME, gqa_sdpa_forward)
