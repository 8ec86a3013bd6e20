"""A lean KV-cache forward for Llama-layout decoders (Qwen2, Llama) in the ``hf`` engine.

A ``transformers`` decoder forward spends most of a small model's decode step on its own
bookkeeping (building masks, cache objects, output classes, hooks), not on arithmetic.
For the layouts listed in :data:`SUPPORTED_ARCHITECTURES` :class:`LeanDecoder` runs the
same operations in the same order on the model's own weights, with a cache allocated
once per call; the logits equal the model's own forward bit for bit on CPU
(``tests/test_lean_decoder.py``). Other models, and settings it does not reproduce
(another attention backend, sliding windows, quantisation), keep the model's forward
(:func:`lean_decoder_for` returns ``None``).

Per layer, with hidden states ``h`` ``(B, S, H)`` at absolute columns ``s … s+S−1``::

    rms(x) = x / sqrt(mean(x²) + ε)                 (in float32, then back to the dtype)
    x  = w_in ⊙ rms(h)
    q, k, v = x W_qᵀ + b_q,  x W_kᵀ + b_k,  x W_vᵀ + b_v      (B, heads, S, d)
    q, k ← q·cos + rot(q)·sin,  rot([a, b]) = [−b, a]          (RoPE of the model's rotary module)
    K[:, :, s:s+S], V[:, :, s:s+S] = k, v
    o  = softmax(q Kᵀ / √d over the allowed keys) V            (a boolean mask, as transformers' sdpa path)
    h ← h + o W_oᵀ
    x' = w_post ⊙ rms(h)
    h ← h + (silu(x' W_gᵀ) ⊙ x' W_uᵀ) W_dᵀ
    logits = (w_norm ⊙ rms(h[:, −1])) W_headᵀ                  (last position only)

A query may attend to the keys at or before its column that are not padding. A padding
query (left padding) attends to itself only, so its (never read) states stay finite.

**Shared prompts** (``prefill(…, repeats=n)``, sampling ``n`` completions per prompt): the
prompt's layers run once per distinct row, then its keys / values and last hidden state
are copied to the ``n`` rows that continue it (row ``i·n + j`` continues prompt ``i``,
``repeat_interleave`` order). Every row's computation is the same as on the repeated
rows; the final norm and LM head run on the ``B·n`` copies so that they see the batch
shape the unshared prefill gives them (tests: logits and caches equal bit for bit).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rft.decoder_ops import rms_norm, rotate_half

SUPPORTED_ARCHITECTURES = frozenset({"Qwen2ForCausalLM", "LlamaForCausalLM"})
"""Model classes whose decoder layers :class:`LeanDecoder` reproduces."""


def unsupported_reason(model: nn.Module) -> str | None:
    """Why :class:`LeanDecoder` cannot stand in for ``model``'s forward; ``None`` if it can."""
    config = getattr(model, "config", None)
    name = type(model).__name__
    if name not in SUPPORTED_ARCHITECTURES or config is None:
        return f"architecture {name} is not one of {sorted(SUPPORTED_ARCHITECTURES)}"
    checks = {
        "attention backend is not sdpa": getattr(config, "_attn_implementation", None) != "sdpa",
        "hidden_act is not silu": getattr(config, "hidden_act", None) != "silu",
        "sliding-window attention": bool(getattr(config, "use_sliding_window", False))
        or any(t != "full_attention" for t in (getattr(config, "layer_types", None) or [])),
        "pretraining_tp > 1": int(getattr(config, "pretraining_tp", 1) or 1) != 1,
        "quantised weights": getattr(model, "hf_quantizer", None) is not None,
        "model is in training mode": model.training,
    }
    for reason, failed in checks.items():
        if failed:
            return reason
    for layer in model.model.layers:
        projections = (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                       layer.self_attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj,
                       layer.mlp.down_proj)
        if not all(type(p) is nn.Linear for p in projections):
            return "a projection is not a plain nn.Linear (adapter or quantised layer)"
    return None


def lean_decoder_for(model: nn.Module) -> LeanDecoder | None:
    """A :class:`LeanDecoder` over ``model``, or ``None`` when it is not supported."""
    return LeanDecoder(model) if unsupported_reason(model) is None else None


class LeanDecoder:
    """Prefill and one-token decode steps over a cache of ``B × T`` positions.

    Weights are read from the model's modules at every call, so in-place weight updates
    between calls are seen.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._valid = torch.zeros(0, 0, dtype=torch.bool)
        self._filled = 0

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor, max_new_tokens: int,
                repeats: int = 1) -> torch.Tensor:
        """Start a call: ``input_ids`` ``(B, P)`` left-padded; returns the last position's
        logits ``(B·repeats, V)``. The cache holds ``B·repeats`` rows of
        ``P + max_new_tokens`` positions; with ``repeats > 1`` row ``i·repeats + j``
        continues prompt row ``i`` (the prompt's layers run once per prompt row)."""
        batch, width = input_ids.shape
        total = width + max_new_tokens
        first = self.model.model.layers[0].self_attn
        kv_heads = first.k_proj.out_features // first.head_dim
        dtype, device = first.k_proj.weight.dtype, input_ids.device
        self._valid = torch.ones(batch, total, dtype=torch.bool, device=device)  # (B, T)
        self._valid[:, :width] = attention_mask.bool()
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()  # (P, P)
        allowed = (causal[None] & self._valid[:, None, :width]) | torch.eye(
            width, dtype=torch.bool, device=device)[None]  # (B, P, P)
        self._filled = 0
        shape = (batch, kv_heads, total if repeats == 1 else width, first.head_dim)
        self._keys = [torch.empty(shape, dtype=dtype, device=device)
                      for _ in self.model.model.layers]
        self._values = [torch.empty(shape, dtype=dtype, device=device)
                        for _ in self.model.model.layers]
        hidden = self._layers(input_ids, position_ids, allowed[:, None])  # (B, P, H)
        last = hidden[:, -1]  # (B, H)
        if repeats > 1:  # copy the prompt's cache and last state to its repeats
            full = (batch * repeats, kv_heads, total, first.head_dim)
            for cache in (self._keys, self._values):
                for index, small in enumerate(cache):
                    big = torch.empty(full, dtype=dtype, device=device)
                    big.view(batch, repeats, *full[1:])[:, :, :, :width] = small[:, None]
                    cache[index] = big
            self._valid = self._valid.repeat_interleave(repeats, dim=0)  # (B·n, T)
            last = last.repeat_interleave(repeats, dim=0)  # (B·n, H)
        return self._head(last)

    def step(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """One new token per row: ``input_ids`` ``(B, 1)``; returns logits ``(B, V)``."""
        end = self._filled + 1
        allowed = self._valid[:, None, None, :end]  # (B, 1, 1, s+1)
        return self._head(self._layers(input_ids, position_ids, allowed)[:, -1])

    def _head(self, last: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, V)`` of the last hidden states ``(B, H)`` (final norm, LM head)."""
        decoder: Any = self.model.model
        last = rms_norm(last, decoder.norm.weight, decoder.norm.variance_epsilon)  # (B, H)
        head = self.model.lm_head
        return F.linear(last, head.weight, head.bias)  # (B, V)

    def _layers(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                allowed: torch.Tensor) -> torch.Tensor:
        """Hidden states ``(B, S, H)`` after the decoder layers, filling the cache;
        ``allowed`` ``(B, 1, S, s+S)`` bool: which keys each query may attend to."""
        decoder: Any = self.model.model
        batch, width = input_ids.shape
        start, end = self._filled, self._filled + width
        hidden = decoder.embed_tokens(input_ids)  # (B, S, H)
        cos, sin = decoder.rotary_emb(hidden, position_ids)  # (B, S, d) each
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, S, d)
        for index, layer in enumerate(decoder.layers):
            attn, mlp = layer.self_attn, layer.mlp
            x = rms_norm(hidden, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
            q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias)
            k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias)
            v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias)
            q = q.view(batch, width, -1, attn.head_dim).transpose(1, 2)  # (B, heads, S, d)
            k = k.view(batch, width, -1, attn.head_dim).transpose(1, 2)  # (B, kv, S, d)
            v = v.view(batch, width, -1, attn.head_dim).transpose(1, 2)  # (B, kv, S, d)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            keys, values = self._keys[index], self._values[index]
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            out = F.scaled_dot_product_attention(
                q, keys[:, :, :end], values[:, :, :end], attn_mask=allowed,
                scale=attn.scaling, enable_gqa=True)  # (B, heads, S, d)
            out = out.transpose(1, 2).reshape(batch, width, -1)  # (B, S, heads·d)
            hidden = hidden + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
            x = rms_norm(hidden, layer.post_attention_layernorm.weight,
                     layer.post_attention_layernorm.variance_epsilon)
            gated = F.silu(F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias))
            hidden = hidden + F.linear(gated * F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias),
                                       mlp.down_proj.weight, mlp.down_proj.bias)
        self._filled = end
        return hidden
