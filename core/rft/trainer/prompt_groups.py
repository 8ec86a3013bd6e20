"""GRPO's shared prompts computed once by cascade attention, through the model's own
attention interface.

A GRPO batch holds each prompt ``n`` times. :func:`group_rows` lays the ``B`` rows out as
``G`` *groups* — the rows whose whole prompt (ids and positions) is the same — each one
sequence of the model's input: the prompt's ``P`` columns once, then each row's response
tokens one after another, without padding (a response's last token is left out: its
output would score nothing, and no other token attends it)::

    rows   [pad p1 p2 | a1 a2 a3]        group      [pad p1 p2 | a1 a2 | b1]
           [pad p1 p2 | b1 b2 pad]       positions    0  0  1  |  2  3 |  2

The model runs its own forward over the groups (``(G, N)``: about ``G·P + Σ ℓ_b`` tokens
instead of the plain ``B·(P + R)``); :func:`prompt_group_attention`, registered in
``transformers``' attention interface, computes each layer's attention in two parts
(cascade attention, as veRL's PrefixGrouper and FlashInfer's cascade kernels), the rows'
response columns gathered into ``S`` slots of ``W`` columns for the second::

    prompt  :  O_p = softmax(Q_p K_pᵀ·s + causal ∧ prompt mask) V_p            (G, H, P, d)
    response:  O_r = softmax(Q_r [K_p; K_r]ᵀ·s + [prompt mask, causal]) [V_p; V_r]
                                                                              (G·S, H, W, d)

— every query sees the keys of its row in the plain forward, at the row's positions, so
the outputs are the plain forward's (to float rounding: other shapes, another summation
order; on CPU bit for bit on the tests' GRPO batch); the gradients of the shared prompt's
keys and values sum over the rows through autograd. Unlike a dense ``(N, N)`` mask over
one packed sequence (:mod:`rft.trainer.prefix_tree`, kept for multi-turn trees) the
attention computes only the pairs that exist: ``G·P² + G·S·W·(P + W)`` instead of
``G·N²``.

The layout travels to every layer as the forward's keyword argument ``prompt_groups``
(``transformers`` hands a forward's extra keyword arguments to the attention function;
gradient checkpointing replays them); a forward without it — the plain one, the
prefix-tree packs — goes to ``transformers``' own ``sdpa_attention_forward`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rft.attention_switch import switch_attention, switch_unavailable_reason

NAME = "rft_prompt_groups"
"""The attention implementation's name in ``transformers``' registries (masks as sdpa)."""
MIN_SAVING = 0.1
"""Group (or pack, :mod:`rft.trainer.packed_forward`) only when it computes at least this
share fewer columns (tokens) than the plain forward."""


@dataclass(frozen=True)
class PromptGroupMasks:
    """What :func:`prompt_group_attention` needs of the layout, per layer."""

    prompt_width: int
    """``P``: the prompt columns of every group."""
    slots: int
    """``S``: the most rows a group has."""
    slot_width: int
    """``W``: the longest run of response columns of a row."""
    prompt: torch.Tensor
    """``(G, 1, P, P)`` bool: causal over the group's prompt tokens (a left-padding query
    sees itself only, so no softmax row is empty)."""
    response: torch.Tensor
    """``(G·S, 1, W, P + W)`` bool: a response query sees its group's prompt tokens and
    its row's columns up to itself."""
    slot_index: torch.Tensor
    """``(G·S·W,)`` long: the flat group column ``g·N + c`` of each slot place (``0`` for
    places without a token: causally masked for every real query)."""
    scatter_from: torch.Tensor
    """``(T,)`` long: the slot places that hold a response token …"""
    scatter_to: torch.Tensor
    """``(T,)`` long: … and their flat group columns."""


@dataclass(frozen=True)
class PromptGroups:
    """``B`` rows as ``G`` groups of rows sharing their prompt."""

    input_ids: torch.Tensor
    """``(G, N)``: each group's prompt (``P`` columns), then its rows' responses one after
    another without padding, right-padded with 0 to the longest group."""
    position_ids: torch.Tensor
    """``(G, N)``: the rows' own positions (0 on padding)."""
    masks: PromptGroupMasks
    group: torch.Tensor
    """``(B,)`` long: each row's group."""
    offset: torch.Tensor
    """``(B,)`` long: the group column of each row's first response token."""
    response_valid: torch.Tensor
    """``(B, R)`` bool: the rows' response tokens."""


def group_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor,
               position_ids: torch.Tensor, prompt_width: int) -> PromptGroups | None:
    """The prompt groups of ``(B, P+R)`` rows (left-padded prompts, right-padded
    responses: :func:`rft.trainer.prefix_tree.unpackable_reason` passes), or ``None`` when
    they would not compute at least :data:`MIN_SAVING` fewer columns than the rows (or
    every response is one token: nothing to run past the prompt)."""
    rows, total = input_ids.shape
    if rows < 2 or total <= prompt_width or prompt_width <= 0:
        return None
    device = input_ids.device
    mask = attention_mask.bool()  # (B, P+R)
    prompt_mask = mask[:, :prompt_width]  # (B, P)
    valid = mask[:, prompt_width:]  # (B, R)
    # a response's last token scores nothing and no other token attends it: not run
    run = (valid.sum(-1) - 1).clamp(min=0)  # (B,) response columns each row runs
    width = int(run.max())
    if width == 0:
        return None
    key = torch.cat([input_ids[:, :prompt_width] * prompt_mask,
                     position_ids[:, :prompt_width] * prompt_mask, prompt_mask.long()], 1)
    _, group = torch.unique(key, dim=0, return_inverse=True)  # (B,) group of each row
    count = int(group.max()) + 1
    sizes = torch.bincount(group, minlength=count)  # (G,)
    used = torch.zeros(count, dtype=torch.long, device=device).index_add_(0, group, run)
    columns = prompt_width + int(used.max())
    if count * columns > (1.0 - MIN_SAVING) * rows * total:
        return None
    order = torch.argsort(group, stable=True)  # (B,) rows, group by group
    starts = torch.cumsum(sizes, 0) - sizes  # (G,) each group's first place in ``order``
    slot = torch.empty_like(group)
    slot[order] = torch.arange(rows, device=device) - starts[group[order]]
    before = torch.cumsum(run[order], 0) - run[order]  # (B,) in ``order``: runs before
    offset = torch.empty_like(run)
    offset[order] = prompt_width + before - before[starts][group[order]]
    first = order[starts]  # (G,) a row of each group
    steps = torch.arange(width, device=device)  # (W,)
    runs = steps[None, :] < run[:, None]  # (B, W): the response columns each row runs
    flat = group[:, None] * columns + offset[:, None] + steps[None, :]  # (B, W)

    def lay_out(values: torch.Tensor) -> torch.Tensor:  # (B, P+R) → (G, N)
        out = values.new_zeros(count, columns)
        out[:, :prompt_width] = values[first, :prompt_width]
        out.view(-1)[flat[runs]] = values[:, prompt_width:prompt_width + width][runs]
        return out

    slots = int(sizes.max())
    place = (group * slots + slot)[:, None] * width + steps[None, :]  # (B, W)
    slot_index = torch.zeros(count * slots * width, dtype=torch.long, device=device)
    slot_index[place[runs]] = flat[runs]
    masks = _masks(prompt_mask[first], slots, width)
    return PromptGroups(
        input_ids=lay_out(input_ids), position_ids=lay_out(position_ids),
        masks=PromptGroupMasks(prompt_width=prompt_width, slots=slots, slot_width=width,
                               prompt=masks[0], response=masks[1], slot_index=slot_index,
                               scatter_from=place[runs], scatter_to=flat[runs]),
        group=group, offset=offset, response_valid=valid)


def _masks(prompt_valid: torch.Tensor, slots: int, width: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt mask ``(G, 1, P, P)`` and the response mask ``(G·S, 1, W, P + W)`` of
    groups whose prompt tokens are ``prompt_valid`` ``(G, P)``
    (:class:`PromptGroupMasks`)."""
    count, prompt_width = prompt_valid.shape
    device = prompt_valid.device
    causal_p = torch.ones(prompt_width, prompt_width, dtype=torch.bool,
                          device=device).tril()  # (P, P)
    eye = torch.eye(prompt_width, dtype=torch.bool, device=device)  # (P, P)
    prompt = (causal_p & prompt_valid[:, None, :]) | eye  # (G, P, P)
    causal_r = torch.ones(width, width, dtype=torch.bool, device=device).tril()  # (W, W)
    seen = prompt_valid[:, None, None, :].expand(count, slots, width, prompt_width)
    own = causal_r.expand(count, slots, width, width)  # (G, S, W, W)
    response = torch.cat([seen, own], -1).reshape(count * slots, 1, width,
                                                  prompt_width + width)  # (G·S, 1, W, P+W)
    return prompt[:, None], response


def shares_kv_heads(device: torch.device, mask: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor) -> bool:
    """Whether grouped-query heads go to SDPA as they are (``enable_gqa``) rather than
    repeated to the query heads: always on the CPU (the same values, no copies); elsewhere
    as ``transformers``' sdpa decides for a masked call (``use_gqa_in_sdpa``: CUDA's
    efficient kernels take no GQA with a mask, so the heads are repeated there)."""
    from transformers.integrations.sdpa_attention import use_gqa_in_sdpa

    return device.type == "cpu" or use_gqa_in_sdpa(mask, key, value)


def prompt_group_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                           value: torch.Tensor, attention_mask: torch.Tensor | None,
                           dropout: float = 0.0, scaling: float | None = None,
                           is_causal: bool | None = None, **kwargs: Any
                           ) -> tuple[torch.Tensor, None]:
    """One layer's attention of ``query`` ``(G, H, N, d)`` over ``key`` / ``value``
    ``(G, KV, N, d)`` in the two parts of the module docstring when the forward carries
    ``prompt_groups`` (:class:`PromptGroupMasks`; ``attention_mask`` is then a
    placeholder): the rows' response columns are gathered into slots ``(G·S, ·, W, d)``
    for the second part and its outputs put back; otherwise ``transformers``' sdpa
    attention. Returns ``(G, N, H, d)`` and no weights (the contract of ``transformers``'
    attention functions)."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    layout = kwargs.get("prompt_groups")
    if not isinstance(layout, PromptGroupMasks):
        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, is_causal=is_causal,
                                      **kwargs)
    heads, kv_heads = query.shape[1], key.shape[1]
    grouped_heads = heads != kv_heads
    if grouped_heads and not shares_kv_heads(query.device, layout.response, key, value):
        key, value = repeat_kv(key, heads // kv_heads), repeat_kv(value, heads // kv_heads)
        grouped_heads = False
    count, _, columns, dim = query.shape
    kv = key.shape[1]
    P, S, W = layout.prompt_width, layout.slots, layout.slot_width
    attend = torch.nn.functional.scaled_dot_product_attention
    prompt_out = attend(query[:, :, :P], key[:, :, :P], value[:, :, :P],
                        attn_mask=layout.prompt, dropout_p=dropout, scale=scaling,
                        enable_gqa=grouped_heads)  # (G, H, P, d)

    def slots_of(states: torch.Tensor) -> torch.Tensor:
        # (G, h, N, d) → (G·S, h, W, d): each row's response columns in its slot
        width_heads = states.shape[1]
        tokens = states.transpose(1, 2).reshape(count * columns, width_heads, dim)
        return tokens.index_select(0, layout.slot_index).reshape(
            count * S, W, width_heads, dim).transpose(1, 2)

    def with_prompt(states: torch.Tensor) -> torch.Tensor:
        # (G, KV, N, d) → (G·S, KV, P + W, d): the group's prompt before each row's own
        prompt = states[:, None, :, :P].expand(count, S, kv, P, dim).reshape(
            count * S, kv, P, dim)
        return torch.cat([prompt, slots_of(states)], 2)

    response_out = attend(slots_of(query), with_prompt(key), with_prompt(value),
                          attn_mask=layout.response, dropout_p=dropout, scale=scaling,
                          enable_gqa=grouped_heads)  # (G·S, H, W, d)
    response_tokens = response_out.transpose(1, 2).reshape(count * S * W, heads, dim)
    out = torch.cat([prompt_out.transpose(1, 2),
                     prompt_out.new_zeros(count, columns - P, heads, dim)], 1)  # (G, N, H, d)
    out = out.reshape(count * columns, heads, dim).index_copy(
        0, layout.scatter_to, response_tokens.index_select(0, layout.scatter_from))
    return out.reshape(count, columns, heads, dim), None


def unavailable_reason(model: nn.Module) -> str | None:
    """Why ``model`` cannot take :func:`prompt_group_attention` (``None``: it can): an
    attention backend other than sdpa, or what
    :func:`rft.attention_switch.switch_unavailable_reason` names."""
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if implementation == NAME:
        return None
    if implementation != "sdpa":
        return f"attention implementation {implementation!r} is not sdpa"
    return switch_unavailable_reason(model)


def use_prompt_group_attention(model: nn.Module) -> bool:
    """Give ``model`` :func:`prompt_group_attention` (every forward without
    ``prompt_groups`` stays ``transformers``' sdpa, masks included) when
    :func:`unavailable_reason` allows it; returns whether the model has it."""
    if unavailable_reason(model) is not None:
        return False
    if getattr(model.config, "_attn_implementation", None) == NAME:
        return True
    return switch_attention(model, NAME, prompt_group_attention)
