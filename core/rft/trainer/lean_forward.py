"""The trainer's forward over a batch whose rows share prompts (GRPO's ``n`` rollouts per
task), for Llama-layout decoders (Qwen2, Llama): each distinct prompt runs once.

A GRPO batch holds every prompt ``n`` times (``repeat_times``), left-padded in the first
``P`` columns, followed by that rollout's ``R`` response columns. The model's own forward
runs the prompt's tokens once per row; :func:`shared_prompt_logits` runs them once per
distinct prompt (rows with the same prompt ids, mask and positions) and the responses
once per row, attending to their prompt's keys / values::

    prompt pass   (U distinct prompts, P columns):  h_p, K_p, V_p per layer
    response pass (B rows, columns P … P+R−2):      attention over [K_p[u(b)], K_r],
                                                    [V_p[u(b)], V_r]
    logits = head(norm([h_p[u(b), P−1], h_r]))      (B, R, V): the outputs that score
                                                    the R response tokens

Per layer and position the operations are those of the model's forward (as
:mod:`rft.engines.lean_decoder` does for decoding; key ``j`` is allowed for query ``i``
when ``j ≤ i`` and ``attention_mask[j] = 1``, or ``j = i``), so the logits are the
model's and the gradient is the same sum — the prompt's share, which the model's forward
computes ``n`` times, is computed once with the summed upstream gradient
(``index_select``'s backward). Equal to float32 rounding, not bit for bit: the
responses' attention runs over other blocks of queries and keys, and the weight
gradients add their terms in another order (``tests/test_lean_forward.py``: logits within
1e-5, gradients within 1e-5 of their largest element). It needs: a supported architecture with sdpa attention, silu, no sliding
window, plain ``nn.Linear`` projections (no adapter, no quantisation), no active
dropout, no gradient checkpointing, 2-D position ids, float32 without autocast and an
unsharded model (:func:`unsupported_reason`); otherwise the caller runs the model's forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rft.decoder_ops import rms_norm, rotate_half

SUPPORTED_ARCHITECTURES = frozenset({"Qwen2ForCausalLM", "LlamaForCausalLM"})
"""Model classes whose layers :func:`shared_prompt_logits` reproduces."""


def unsupported_reason(model: nn.Module) -> str | None:
    """Why :func:`shared_prompt_logits` cannot stand in for ``model``'s forward; ``None``
    if it can (the batch's own conditions are checked by the caller)."""
    config = getattr(model, "config", None)
    name = type(model).__name__
    if name not in SUPPORTED_ARCHITECTURES or config is None:
        return f"architecture {name} is not one of {sorted(SUPPORTED_ARCHITECTURES)}"
    dropout = float(getattr(config, "attention_dropout", 0.0) or 0.0)
    checks = {
        "attention backend is not sdpa": getattr(config, "_attn_implementation", None) != "sdpa",
        "hidden_act is not silu": getattr(config, "hidden_act", None) != "silu",
        "sliding-window attention": bool(getattr(config, "use_sliding_window", False))
        or any(t != "full_attention" for t in (getattr(config, "layer_types", None) or [])),
        "pretraining_tp > 1": int(getattr(config, "pretraining_tp", 1) or 1) != 1,
        "quantised weights": getattr(model, "hf_quantizer", None) is not None,
        "active attention dropout": model.training and dropout > 0,
        "gradient checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
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
    if any(type(p) is not nn.Parameter or p.dtype != torch.float32 for p in model.parameters()):
        return "parameters are not plain float32 tensors (sharded or reduced precision)"
    return None


def distinct_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     position_ids: torch.Tensor, prompt_width: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of the prompt columns (ids, mask and positions alike) and, per
    batch row, the index of its prompt: ``(U, 3·P)`` and ``(B,)``."""
    key = torch.cat([input_ids[:, :prompt_width], attention_mask[:, :prompt_width].long(),
                     position_ids[:, :prompt_width]], dim=1)  # (B, 3·P)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    return unique, inverse


def shared_prompt_logits(model: nn.Module, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor, position_ids: torch.Tensor,
                         prompt_width: int) -> torch.Tensor:
    """Logits ``(B, R, V)`` at columns ``P−1 … P+R−2`` (those scoring the response tokens
    ``P … P+R−1``) of ``input_ids`` ``(B, P+R)``, each distinct prompt run once (module
    docstring). ``model`` must pass :func:`unsupported_reason`."""
    decoder: Any = model.model
    batch, total = input_ids.shape
    width = prompt_width
    unique, inverse = distinct_prompts(input_ids, attention_mask, position_ids, width)
    p_ids, p_mask, p_pos = unique[:, :width], unique[:, width:2 * width], unique[:, 2 * width:]
    device = input_ids.device
    eye = torch.eye(width, dtype=torch.bool, device=device)
    p_valid = p_mask.bool()  # (U, P)
    p_allowed = ((torch.ones(width, width, dtype=torch.bool, device=device).tril()[None]
                  & p_valid[:, None, :]) | eye[None])[:, None]  # (U, 1, P, P)
    r_ids = input_ids[:, width:total - 1]  # (B, R−1): the response columns that score others
    r_pos = position_ids[:, width:total - 1]
    steps = r_ids.shape[1]
    r_valid = attention_mask[:, width:total - 1].bool()  # (B, R−1)
    r_allowed = torch.cat([
        p_valid[inverse][:, None, :].expand(batch, steps, width),  # (B, R−1, P)
        (torch.ones(steps, steps, dtype=torch.bool, device=device).tril()[None]
         & r_valid[:, None, :]) | torch.eye(steps, dtype=torch.bool, device=device)[None],
    ], dim=2)[:, None]  # (B, 1, R−1, P+R−1)

    p_hidden = decoder.embed_tokens(p_ids)  # (U, P, H)
    p_cos, p_sin = decoder.rotary_emb(p_hidden, p_pos)  # (U, P, d)
    r_hidden = decoder.embed_tokens(r_ids)  # (B, R−1, H)
    r_cos, r_sin = decoder.rotary_emb(r_hidden, r_pos)  # (B, R−1, d)
    for layer in decoder.layers:
        p_hidden, keys, values = _layer(layer, p_hidden, p_cos, p_sin, p_allowed)
        if steps:
            r_hidden = _layer(layer, r_hidden, r_cos, r_sin, r_allowed,
                              prefix=(keys.index_select(0, inverse),
                                      values.index_select(0, inverse)))[0]
    last = p_hidden[:, -1:].index_select(0, inverse)  # (B, 1, H)
    hidden = torch.cat([last, r_hidden], dim=1) if steps else last  # (B, R, H)
    hidden = rms_norm(hidden, decoder.norm.weight, decoder.norm.variance_epsilon)
    head = model.lm_head
    return F.linear(hidden, head.weight, head.bias)  # (B, R, V)


def _layer(layer: Any, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           allowed: torch.Tensor,
           prefix: tuple[torch.Tensor, torch.Tensor] | None = None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder layer over ``hidden`` ``(N, S, H)``; ``prefix``: keys / values
    ``(N, kv, P, d)`` before these columns. Returns the new hidden states and this
    call's keys / values ``(N, kv, S, d)``."""
    attn, mlp = layer.self_attn, layer.mlp
    rows, width = hidden.shape[:2]
    x = rms_norm(hidden, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
    q = F.linear(x, attn.q_proj.weight, attn.q_proj.bias)
    k = F.linear(x, attn.k_proj.weight, attn.k_proj.bias)
    v = F.linear(x, attn.v_proj.weight, attn.v_proj.bias)
    q = q.view(rows, width, -1, attn.head_dim).transpose(1, 2)  # (N, heads, S, d)
    k = k.view(rows, width, -1, attn.head_dim).transpose(1, 2)  # (N, kv, S, d)
    v = v.view(rows, width, -1, attn.head_dim).transpose(1, 2)  # (N, kv, S, d)
    cos, sin = cos[:, None], sin[:, None]  # (N, 1, S, d)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    all_k, all_v = (k, v) if prefix is None else (torch.cat([prefix[0], k], dim=2),
                                                   torch.cat([prefix[1], v], dim=2))
    out = F.scaled_dot_product_attention(q, all_k, all_v, attn_mask=allowed,
                                         scale=attn.scaling, enable_gqa=True)  # (N, heads, S, d)
    out = out.transpose(1, 2).reshape(rows, width, -1)  # (N, S, heads·d)
    hidden = hidden + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
    x = rms_norm(hidden, layer.post_attention_layernorm.weight,
             layer.post_attention_layernorm.variance_epsilon)
    gated = F.silu(F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias))
    hidden = hidden + F.linear(gated * F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias),
                               mlp.down_proj.weight, mlp.down_proj.bias)
    return hidden, k, v
