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
    if (groups <= 1 or attention_mask is None
            or any(kwargs.get(name) is not None for name in _OWN_ARGUMENTS)):
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        enable_gqa=True)  # (B, H, S, d)
    return out.transpose(1, 2).contiguous(), None


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
