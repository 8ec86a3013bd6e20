"""A plain KV-cache sampling loop for the ``hf`` engine.

``transformers``' ``generate`` spends a large share of a tiny model's decode step in its
own bookkeeping (input preparation, processor lists, stopping-criteria objects). For the
common settings — temperature, top-k, top-p, a minimum length, EOS / stop token ids —
this loop calls the model directly with a :class:`transformers.DynamicCache` and draws
the same tokens: the same forward inputs (positions ``cumsum(mask) − 1``, logits of the
last position only), the same filters in the same order, one ``torch.multinomial`` per
step over every row (finished rows included, then replaced by the pad id), and it stops
at the same step. Settings it does not cover (repetition penalty, stop strings) go
through ``generate`` (:func:`covers`).

Per step ``t`` with raw logits ``z_t`` ``(B, V)``::

    s = z_t;  s[:, stop_ids] = −inf            while t < min_new_tokens
    s = s / T                                   if T ≠ 1
    s[s < kth_largest(s, k)] = −inf             if k > 0          (top-k)
    drop the smallest-probability tokens whose cumulative mass ≤ 1 − p (keep ≥ 1)   (top-p)
    y_t ~ softmax(s)  (greedy: argmax s)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rft.explorer.engine import SamplingArgs


@dataclass
class DecodeSettings:
    """What one :func:`sample_tokens` call draws with."""

    max_new_tokens: int
    min_new_tokens: int
    temperature: float
    """``0``: greedy."""
    top_k: int
    """``≤ 0``: off."""
    top_p: float
    """``1``: off."""
    stop_token_ids: list[int]
    pad_token_id: int


def covers(sampling: SamplingArgs) -> bool:
    """Whether :func:`sample_tokens` implements these settings (else use ``generate``)."""
    return sampling.repetition_penalty == 1.0 and not sampling.stop


@dataclass
class DecodeResult:
    tokens: torch.Tensor
    """``(B, N)`` new tokens, the pad id after a row's stop token; ``N ≤ max_new_tokens``."""
    logits: list[torch.Tensor]
    """``N`` raw (unfiltered) float32 logits ``(B, V)``, one per step."""


def filter_scores(scores: torch.Tensor, step: int, settings: DecodeSettings) -> torch.Tensor:
    """The step's sampling scores from raw logits ``scores`` ``(B, V)`` float32 (see the
    module docstring for the formulas); returns a new tensor."""
    scores = scores.clone()
    if step < settings.min_new_tokens and settings.stop_token_ids:
        scores[:, settings.stop_token_ids] = -float("inf")
    if settings.temperature == 0:
        return scores
    if settings.temperature != 1.0:
        scores = scores / settings.temperature
    if settings.top_k > 0:
        k = min(settings.top_k, scores.shape[-1])
        kth = torch.topk(scores, k).values[..., -1:]  # (B, 1)
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if settings.top_p < 1.0:
        ascending, order = torch.sort(scores, descending=False)  # (B, V)
        mass_below = ascending.softmax(dim=-1).cumsum(dim=-1)  # (B, V)
        drop_sorted = mass_below <= (1 - settings.top_p)
        drop_sorted[..., -1:] = False  # always keep the most likely token
        drop = drop_sorted.scatter(1, order, drop_sorted)
        scores = scores.masked_fill(drop, -float("inf"))
    return scores


@torch.no_grad()
def sample_tokens(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  settings: DecodeSettings) -> DecodeResult:
    """Draw up to ``max_new_tokens`` for each left-padded row of ``input_ids`` ``(B, P)``,
    stopping when every row has drawn a stop token. Uses the global torch RNG."""
    from transformers import DynamicCache

    device = input_ids.device
    mask = attention_mask.long()  # (B, P)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # (B, P)
    stop_ids = torch.tensor(settings.stop_token_ids, dtype=torch.long, device=device)
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=device)  # (B,)
    cache = DynamicCache()
    step_input = input_ids
    tokens: list[torch.Tensor] = []
    logits: list[torch.Tensor] = []
    for step in range(settings.max_new_tokens):
        out = model(input_ids=step_input, attention_mask=mask, position_ids=positions,
                    past_key_values=cache, use_cache=True, logits_to_keep=1)
        raw = out.logits[:, -1].to(copy=True, dtype=torch.float32)  # (B, V)
        logits.append(raw)
        scores = filter_scores(raw, step, settings)
        if settings.temperature == 0:
            chosen = torch.argmax(scores, dim=-1)  # (B,)
        else:
            chosen = torch.multinomial(scores.softmax(dim=-1), num_samples=1).squeeze(1)
        if stop_ids.numel():
            chosen = chosen * unfinished + settings.pad_token_id * (1 - unfinished)
            unfinished = unfinished & ~torch.isin(chosen, stop_ids)
        tokens.append(chosen)
        if stop_ids.numel() and int(unfinished.max()) == 0:
            break
        step_input = chosen[:, None]  # (B, 1)
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        positions = positions[:, -1:] + 1
        cache = out.past_key_values
    return DecodeResult(torch.stack(tokens, dim=1), logits)
