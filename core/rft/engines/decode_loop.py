"""A plain KV-cache sampling loop for the ``hf`` engine.

``transformers``' ``generate`` spends a large share of a tiny model's decode step in its
own bookkeeping (input preparation, processor lists, stopping-criteria objects). For the
common settings — temperature, top-k, top-p, a minimum length, EOS / stop token ids —
this loop calls the model's own forward with a :class:`transformers.DynamicCache`, for
any decoder ``transformers`` builds. **Shared prompts**: with ``repeats = n`` (or ``rows``)
each prompt row is prefilled once and the cache is expanded to its sample rows
(``batch_select_indices``), which then decode together; the logits equal those of the
``n`` repeated rows (bit for bit on most batch shapes; a matrix product over fewer rows
may take another CPU kernel, ~1e-7 apart in float32). It uses the same forward
inputs as ``generate`` (positions ``cumsum(mask) − 1``, logits of the last position
only), the same filters in the same order, one draw per step over every row (finished
rows included, then replaced by the pad id), and it stops at the same step (a row also
finishes once its text holds one of the stop strings). With
``draw=draw_multinomial`` it draws exactly the tokens ``generate`` draws; the default,
:func:`draw_inverse_cdf`, draws from the same distribution with one uniform number per
row instead of ``torch.multinomial``'s one exponential number per vocabulary entry (on
CPU a large share of a step; docs/benchmarks.md). A repetition
penalty, which it does not cover, goes through ``generate`` (:func:`covers`).

Per step ``t`` with raw logits ``z_t`` ``(B, V)``::

    s = z_t;  s[:, stop_ids] = −inf            while t < min_new_tokens
    s = s / T                                   if T ≠ 1
    s[s < kth_largest(s, k)] = −inf             if k > 0          (top-k)
    drop the smallest-probability tokens whose cumulative mass ≤ 1 − p (keep ≥ 1)   (top-p)
    y_t ~ softmax(s)  (greedy: argmax s)
    log π(y_t) = z_t[y_t] / T' − logsumexp(z_t / T')   if logprob_temperature T' is set
               = log softmax(s)[y_t]             when s = z_t / T' (no filter, T = T')

**Host work per step** (it is most of a small model's step, on a GPU too): the decode
steps of an sdpa model without sliding windows take a boolean key mask ``(R, 1, 1, L)``
sliced from one buffer (``transformers`` returns a 4-D mask as given) instead of a 2-D
mask that ``transformers`` turns into a 4-D one at every step; the sampled tokens'
log-probabilities are taken in the loop (one ``logsumexp`` per step) instead of keeping
``N`` logits ``(R, V)`` for afterwards; no step copies its logits. A compiled step can
also draw (``draw_step``, :func:`draw_from_logits`): the step's sampling then runs inside
its graph, from the uniform numbers the loop draws.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rft.engines.engine import SamplingArgs
from rft.engines.gqa_attention import NAME as GQA_ATTENTION


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
    stop_check: Callable[[torch.Tensor], torch.Tensor] | None = None
    """Stop strings: new tokens so far ``(B, t)`` → ``(B,)`` bool, the rows whose text now
    holds a stop string (they finish like rows that drew a stop token)."""
    interrupt: Callable[[], bool] | None = None
    """Checked before each decode step after the first: ``True`` stops the loop there
    (a weight sync of partial rollouts; :attr:`DecodeResult.interrupted`)."""
    logprob_temperature: float | None = None
    """``T'``: return each drawn token's ``log_softmax(z_t / T')`` (:attr:`DecodeResult.logprobs`);
    ``None``: none."""
    keep_logits: bool = True
    """Return every step's raw logits (:attr:`DecodeResult.logits`); ``False``: an empty list
    (no ``N × (R, V)`` kept)."""


def covers(sampling: SamplingArgs) -> bool:
    """Whether :func:`sample_tokens` implements these settings (else use ``generate``)."""
    return sampling.repetition_penalty == 1.0


@dataclass
class DecodeResult:
    tokens: torch.Tensor
    """``(B, N)`` new tokens, the pad id after a row's stop token; ``N ≤ max_new_tokens``."""
    logits: list[torch.Tensor]
    """``N`` raw (unfiltered) float32 logits ``(B, V)``, one per step (empty unless
    :attr:`DecodeSettings.keep_logits`)."""
    logprobs: torch.Tensor | None = None
    """``(B, N)`` float32, each drawn token's log-probability at
    :attr:`DecodeSettings.logprob_temperature` (``None`` when that is); after a row's stop
    token, that of the step's discarded draw (its token reads as the pad id)."""
    interrupted: bool = False
    """The loop stopped on :attr:`DecodeSettings.interrupt` with rows unfinished."""


def filter_scores(scores: torch.Tensor, step: int, settings: DecodeSettings) -> torch.Tensor:
    """The step's sampling scores from raw logits ``scores`` ``(B, V)`` float32 (see the
    module docstring for the formulas); ``scores`` is not modified (without a filter to
    apply it is returned as it is)."""
    if step < settings.min_new_tokens and settings.stop_token_ids:
        scores = scores.clone()
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


def draw_inverse_cdf(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` ``(B, V)`` (non-negative, not necessarily summing
    to 1) by inverting the cumulative distribution at one uniform number per row,
    ``u ~ U[0, 1)`` float64 from the global RNG (:func:`inverse_cdf_index`); returns
    ``(B,)`` ids."""
    uniforms = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device)  # (B, 1)
    return inverse_cdf_index(probs, uniforms)


def inverse_cdf_index(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """The token each row of ``probs`` ``(B, V)`` (non-negative, not necessarily summing
    to 1) draws at its uniform number ``uniforms`` ``(B, 1)`` float64 in ``[0, 1)``;
    returns ``(B,)`` ids::

        C_i = Σ_{j ≤ i} p_j  (float64),   y = min{ i : C_i > u · C_{V−1} }

    A token with ``p_i = 0`` has ``C_i = C_{i−1}`` and is never drawn: the threshold is
    capped just below the total (the next float64 towards 0, in case rounding puts
    ``u · C_{V−1}`` at it), so the first ``C_i`` above it is a step of the CDF.
    """
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # (B, V)
    total = cdf[:, -1:]  # (B, 1)
    threshold = torch.minimum(uniforms * total,
                              torch.nextafter(total, torch.zeros_like(total)))  # (B, 1)
    return torch.searchsorted(cdf, threshold, right=True).squeeze(1)  # (B,)


@dataclass(frozen=True)
class StepDraw:
    """The tensors a decode step that also draws (:data:`DrawingStep`) draws with, as
    :func:`draw_from_logits` takes them (tensors, not numbers, so that a compiled graph
    is not specialised to one temperature)."""

    uniforms: torch.Tensor
    """``(R, 1)`` float64, ``U[0, 1)``: one per row, drawn by the loop from the global RNG
    (the numbers :func:`draw_inverse_cdf` draws at the same step)."""
    temperature: torch.Tensor
    """``()`` float32: ``T``."""
    held_back: torch.Tensor
    """``(V,)`` float32: ``−inf`` at the stop tokens while the minimum length holds them
    back, else ``0``."""
    logprob_temperature: torch.Tensor
    """``()`` float32: ``T'``."""


DrawingStep = Callable[..., tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]]
"""A decode step that also draws, called with :class:`StepDraw`'s fields and the model's
keyword inputs (``uniforms=…, temperature=…, held_back=…, logprob_temperature=…,
input_ids=…, …``); returns ``(past_key_values, logits (R, V) float32, tokens (R,),
log-probs (R,))`` as :func:`forward_and_draw` does (the ``hf`` engine's
``compile_decode``: :meth:`rft.engines.compiled_step.CompiledStep.forward_and_draw`, the
forward and the draw in one compiled graph)."""


def draw_from_logits(logits: torch.Tensor, uniforms: torch.Tensor, temperature: torch.Tensor,
                     held_back: torch.Tensor, logprob_temperature: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's tokens and their log-probs from raw logits ``z`` ``(R, V)`` float32, for
    the settings a :data:`DrawingStep` serves (temperature ``T > 0``, no top-k, no top-p,
    the inverse-CDF draw); returns ``(tokens (R,), log-probs (R,))``::

        s = z / T + b            b_v = −inf for a stop token held back (minimum length), else 0
        y = inverse_cdf_index(softmax(s), u)
        log π(y) = z_y / T' − logsumexp(z / T')

    The tokens equal the loop's own draw at the same uniforms ``u`` (:func:`filter_scores`,
    ``softmax``, :func:`draw_inverse_cdf`: the same operations, bit for bit when run
    eagerly); the log-probs are :func:`chosen_logprobs`' formula."""
    probs = (logits / temperature + held_back).softmax(dim=-1)  # (R, V)
    chosen = inverse_cdf_index(probs, uniforms)  # (R,)
    scaled = logits / logprob_temperature  # (R, V)
    logprobs = (scaled.gather(1, chosen[:, None]).squeeze(1)
                - torch.logsumexp(scaled, dim=-1))  # (R,)
    return chosen, logprobs


def forward_and_draw(model: nn.Module, uniforms: torch.Tensor, temperature: torch.Tensor,
                     held_back: torch.Tensor, logprob_temperature: torch.Tensor,
                     **inputs: Any) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A decode step and its draw (:data:`DrawingStep`, run as it is or compiled): the
    model's own forward over ``inputs``, then :func:`draw_from_logits` on the last
    position's logits; returns ``(past_key_values, logits (R, V), tokens (R,),
    log-probs (R,))``."""
    out = model.forward(**inputs)
    logits = out.logits[:, -1].float()  # (R, V)
    chosen, logprobs = draw_from_logits(logits, uniforms, temperature, held_back,
                                        logprob_temperature)
    return out.past_key_values, logits, chosen, logprobs


def draw_multinomial(probs: torch.Tensor) -> torch.Tensor:
    """``torch.multinomial(probs, 1)`` per row (what ``generate`` draws); ``(B, V) → (B,)``."""
    return torch.multinomial(probs, num_samples=1).squeeze(1)


def missing_cache_api(cache_type: type | None = None) -> str | None:
    """Why the installed ``transformers`` cannot share prompts (``None`` if it can): the
    loop needs ``DynamicCache`` and its ``batch_select_indices`` (expanding a prefilled
    cache over the samples). ``cache_type``: the class to check (default: transformers'
    ``DynamicCache``)."""
    import transformers

    if cache_type is None:
        cache_type = getattr(transformers, "DynamicCache", None)
        if cache_type is None:
            return f"transformers {transformers.__version__} has no DynamicCache"
    if not callable(getattr(cache_type, "batch_select_indices", None)):
        return (f"transformers {transformers.__version__}: {cache_type.__name__} has no "
                "batch_select_indices")
    return None


def accepts_keyword(function: Callable[..., object], name: str) -> bool:
    """Whether ``function`` takes a keyword argument ``name`` (a bound method is read
    through its function: its ``self`` takes no keyword)."""
    target = getattr(function, "__func__", function)
    try:
        return _remembered_accepts_keyword(target, name)
    except TypeError:  # an unhashable callable: read every time
        return _signature_accepts_keyword(target, name)


@functools.lru_cache(maxsize=256)
def _remembered_accepts_keyword(function: Callable[..., object], name: str) -> bool:
    """:func:`accepts_keyword`, remembered: reading a signature costs ~50 µs, and every
    decode call asks it of the model's ``forward``."""
    return _signature_accepts_keyword(function, name)


def _signature_accepts_keyword(function: Callable[..., object], name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def takes_key_mask(model: nn.Module) -> bool:
    """Whether ``model``'s decode steps can take a boolean key mask ``(R, 1, 1, L)`` as it
    is: an sdpa attention (``transformers``' own or :mod:`rft.engines.gqa_attention`'s,
    which take boolean masks and get a 4-D one unchanged), every layer full attention (a
    sliding window or attention chunks need masks ``transformers`` builds; linear-attention
    or state-space layers of hybrid models read the 2-D mask)."""
    config = getattr(model, "config", None)
    layer_types = getattr(config, "layer_types", None) or ()
    return (getattr(config, "_attn_implementation", None) in ("sdpa", GQA_ATTENTION)
            and getattr(config, "sliding_window", None) is None
            and getattr(config, "attention_chunk_size", None) is None
            and all(kind == "full_attention" for kind in layer_types))


class _CachedForward:
    """The model's own forward over a :class:`transformers.DynamicCache`.

    :meth:`prefill` runs the ``B`` prompt rows once, then expands the cache, the mask and
    the last logits to the ``R`` sample rows with ``batch_select_indices`` (sample row ``r``
    continues prompt row ``source[r]``); :meth:`step` decodes the ``R`` rows together.
    Where :func:`takes_key_mask` (``key_mask=None``) or ``key_mask=True``, a step's mask is
    the boolean key mask ``(R, 1, 1, L)``, a slice of one buffer that grows by doubling;
    otherwise the 2-D mask ``(R, L)`` that ``transformers`` expands at every step.
    """

    def __init__(self, model: nn.Module, key_mask: bool | None = None,
                 step_forward: Callable[..., Any] | None = None,
                 prefill_forward: Callable[..., Any] | None = None) -> None:
        from transformers import DynamicCache

        self.model = model
        self.step_forward: Callable[..., Any] = model if step_forward is None else step_forward
        """What runs the decode steps: the model, or the model's forward compiled
        (:class:`rft.engines.compiled_step.CompiledStep`)."""
        self.prefill_forward: Callable[..., Any] = (model if prefill_forward is None
                                                    else prefill_forward)
        """What runs the prefill: the model, or its compiled prompt graph
        (:meth:`rft.engines.compiled_step.CompiledStep.prefill`)."""
        config = getattr(model, "config", None)
        # with the model's config the cache knows sliding-window layers, as generate's does
        self.cache: Any = (DynamicCache(config=config)
                           if config is not None and accepts_keyword(DynamicCache, "config")
                           else DynamicCache())
        self.mask = torch.zeros(0, 0, dtype=torch.long)  # (R, L): 2-D mode
        self.uses_key_mask = takes_key_mask(model) if key_mask is None else key_mask
        self.key_mask = torch.zeros(0, 1, 1, 0, dtype=torch.bool)  # (R, 1, 1, capacity)
        self.length = 0
        """``L``: the columns the cache holds."""
        self.keep: dict[str, int] = ({"logits_to_keep": 1}
                                     if accepts_keyword(model.forward, "logits_to_keep") else {})

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor, source: torch.Tensor | None = None) -> torch.Tensor:
        """Run the prompts ``(B, P)`` once; returns the last position's logits ``(R, V)``,
        the cache holding ``R`` rows: ``source`` ``(R,)`` long, the prompt row of each
        sample row (``None``: the ``B`` rows as they are)."""
        self.mask = attention_mask  # (B, P)
        logits = self._forward(self.prefill_forward, self._inputs(input_ids, position_ids,
                                                         attention_mask))  # (B, V)
        if source is not None:
            self.cache.batch_select_indices(source)  # (R, kv, P, d) per layer
            self.mask = self.mask.index_select(0, source)  # (R, P)
            logits = logits.index_select(0, source)  # (R, V)
        self.length = self.mask.shape[1]
        if self.uses_key_mask:
            self.key_mask = self.mask.new_ones(self.mask.shape[0], 1, 1, 2 * self.length,
                                               dtype=torch.bool)  # (R, 1, 1, 2P)
            self.key_mask[:, 0, 0, :self.length] = self.mask.bool()
        return logits

    def step(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """One new token per row: ``input_ids`` ``(B·n, 1)``; returns logits ``(B·n, V)``."""
        return self._forward(self.step_forward,
                             self._step_inputs(input_ids, position_ids))  # (B·n, V)

    def step_and_draw(self, draw_step: DrawingStep, input_ids: torch.Tensor,
                      position_ids: torch.Tensor, draw: StepDraw
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`step` and its draw in one call of ``draw_step``; returns ``(logits (B·n, V),
        tokens (B·n,), log-probs (B·n,))``."""
        self.cache, logits, chosen, logprobs = draw_step(
            uniforms=draw.uniforms, temperature=draw.temperature, held_back=draw.held_back,
            logprob_temperature=draw.logprob_temperature,
            **self._step_inputs(input_ids, position_ids))
        return logits, chosen, logprobs

    def _step_inputs(self, input_ids: torch.Tensor, position_ids: torch.Tensor
                     ) -> dict[str, Any]:
        """The keyword inputs of the next decode step's forward (the cache grows by one
        column)."""
        self.length += 1
        if not self.uses_key_mask:
            self.mask = torch.cat([self.mask, self.mask.new_ones(self.mask.shape[0], 1)], dim=1)
            return self._inputs(input_ids, position_ids, self.mask)
        if self.length >= self.key_mask.shape[-1]:  # never the whole buffer: one stride kind
            grown = self.key_mask.new_ones(*self.key_mask.shape[:-1],
                                           2 * self.key_mask.shape[-1])  # (R, 1, 1, 2C)
            grown[..., :self.key_mask.shape[-1]] = self.key_mask
            self.key_mask = grown
        return self._inputs(input_ids, position_ids, self.key_mask[..., :self.length])

    def _inputs(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> dict[str, Any]:
        return dict(input_ids=input_ids, attention_mask=attention_mask,
                    position_ids=position_ids, past_key_values=self.cache, use_cache=True,
                    **self.keep)

    def _forward(self, forward: Callable[..., Any], inputs: dict[str, Any]) -> torch.Tensor:
        """``forward(**inputs)``, keeping its cache; the last position's logits ``(B, V)``."""
        out = forward(**inputs)
        self.cache = out.past_key_values
        return out.logits[:, -1]  # (B, V)


@torch.no_grad()
def sample_tokens(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  settings: DecodeSettings, *,
                  draw: Callable[[torch.Tensor], torch.Tensor] = draw_inverse_cdf,
                  repeats: int = 1, rows: torch.Tensor | None = None,
                  share_prompts: bool = True,
                  step_forward: Callable[..., Any] | None = None,
                  draw_step: DrawingStep | None = None,
                  prefill_forward: Callable[..., Any] | None = None) -> DecodeResult:
    """Draw up to ``max_new_tokens`` for each left-padded row of ``input_ids`` ``(B, P)``
    repeated ``repeats`` times (rows ``i·repeats … i·repeats + repeats − 1`` continue
    prompt ``i``, as ``repeat_interleave``), stopping when every row has drawn a stop
    token. Uses the global torch RNG; needs :func:`missing_cache_api` to be ``None``.

    :param draw: picks one token per row from the step's probabilities ``(R, V)``.
    :param repeats: completions per prompt row (``R = B·repeats``).
    :param rows: instead of ``repeats``: ``(R,)`` long, the prompt row each completion
        continues (a prompt may have any number of completions, none included).
    :param share_prompts: prefill each prompt row once and expand its cache over its
        completions (``False``: prefill one row per completion — the same logits, more
        work; kept for comparison).
    :param step_forward: what runs the decode steps, called as the model is (``None``: the
        model; the ``hf`` engine's ``compile_decode``: its forward compiled,
        :class:`rft.engines.compiled_step.CompiledStep`).
    :param draw_step: a decode step that also draws (:data:`DrawingStep`; the ``hf``
        engine's ``compile_decode``: the forward and the draw in one compiled graph), run for
        the steps after the first where :func:`draws_in_step` (the default draw, ``T > 0``,
        no top-k, no top-p): the same uniform numbers, the same tokens up to the rounding of
        the step's kernels, the log-probs by :func:`chosen_logprobs`' formula.
    :param prefill_forward: what runs the prompts' forward, called as the model is
        (``None``: the model; the ``hf`` engine's ``compile_decode``: a compiled prompt
        graph, :meth:`rft.engines.compiled_step.CompiledStep.prefill`).
    """
    device = input_ids.device
    mask = attention_mask.long()  # (B, P)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)  # (B, P)
    stop_ids = torch.tensor(settings.stop_token_ids, dtype=torch.long, device=device)
    can_stop = bool(stop_ids.numel()) or settings.stop_check is not None
    source: torch.Tensor | None = (rows.to(device=device, dtype=torch.long) if rows is not None
                                   else None if repeats == 1 else torch.arange(
                                       input_ids.shape[0], device=device).repeat_interleave(
                                           repeats))  # (R,)
    if source is not None and not share_prompts:
        input_ids, mask, positions = (t.index_select(0, source)  # (R, P) each
                                      for t in (input_ids, mask, positions))
        source = None
    forward = _CachedForward(model, step_forward=step_forward, prefill_forward=prefill_forward)
    step_logits = forward.prefill(input_ids, mask, positions, source)  # (R, V)
    positions = positions[:, -1:]  # (B, 1)
    if source is not None:
        positions = positions.index_select(0, source)  # (R, 1)
    unfinished = torch.ones(step_logits.shape[0], dtype=torch.long, device=device)  # (R,)
    draws = (_StepDraws(settings, step_logits.shape[-1], device)
             if draw_step is not None and draws_in_step(settings, draw) else None)
    tokens: list[torch.Tensor] = []
    logits: list[torch.Tensor] = []
    logprobs: list[torch.Tensor] = []  # (B,) per step
    interrupted = False
    for step in range(settings.max_new_tokens):
        if step and settings.interrupt is not None and settings.interrupt():
            interrupted = True
            break
        if step and draw_step is not None and draws is not None:
            raw, chosen, drawn = forward.step_and_draw(
                draw_step, tokens[-1][:, None], positions,
                draws.at(step, rows=step_logits.shape[0]))  # (B, V), (B,), (B,)
            if settings.keep_logits:
                logits.append(raw)
            if settings.logprob_temperature is not None:
                logprobs.append(drawn)
        else:
            if step:
                step_logits = forward.step(tokens[-1][:, None], positions)  # (B, V)
            chosen = _draw_eagerly(step_logits.float(), step, settings, draw, logits, logprobs)
        if can_stop:
            chosen = chosen * unfinished + settings.pad_token_id * (1 - unfinished)
            unfinished = unfinished & ~torch.isin(chosen, stop_ids)
        tokens.append(chosen)
        if settings.stop_check is not None:
            hit = settings.stop_check(torch.stack(tokens, dim=1)).to(device)  # (B,)
            unfinished = unfinished & ~hit.long()
        if can_stop and int(unfinished.max()) == 0:
            break
        positions = positions[:, -1:] + 1  # (B, 1)
    return DecodeResult(torch.stack(tokens, dim=1), logits,
                        logprobs=(torch.stack(logprobs, dim=1)  # (B, N)
                                  if settings.logprob_temperature is not None else None),
                        interrupted=interrupted)


def _draw_eagerly(raw: torch.Tensor, step: int, settings: DecodeSettings,
                  draw: Callable[[torch.Tensor], torch.Tensor], logits: list[torch.Tensor],
                  logprobs: list[torch.Tensor]) -> torch.Tensor:
    """Step ``step``'s tokens ``(B,)`` from its raw float32 logits ``raw`` ``(B, V)`` (never
    modified) by the loop's own operations; appends the logits to ``logits`` when
    :attr:`DecodeSettings.keep_logits` and the tokens' log-probs to ``logprobs`` when
    :attr:`DecodeSettings.logprob_temperature` is set."""
    if settings.keep_logits:
        logits.append(raw)
    scores = filter_scores(raw, step, settings)
    probs: torch.Tensor | None = None
    if settings.temperature == 0:
        chosen = torch.argmax(scores, dim=-1)  # (B,)
    else:
        probs = scores.softmax(dim=-1)  # (B, V)
        chosen = draw(probs)  # (B,)
    if settings.logprob_temperature is not None:
        logprobs.append(
            drawn_logprobs(probs, chosen) if probs is not None and unfiltered(step, settings)
            else chosen_logprobs(raw, chosen, settings.logprob_temperature))  # (B,)
    return chosen


def draws_in_step(settings: DecodeSettings,
                  draw: Callable[[torch.Tensor], torch.Tensor] = draw_inverse_cdf) -> bool:
    """Whether a :data:`DrawingStep` can draw these settings' tokens
    (:func:`draw_from_logits`): the inverse-CDF draw, ``T > 0``, no top-k, no top-p."""
    return (draw is draw_inverse_cdf and settings.temperature > 0 and settings.top_k <= 0
            and settings.top_p >= 1.0)


class _StepDraws:
    """The :class:`StepDraw` of each step of one :func:`sample_tokens` call: fresh uniform
    numbers from the global RNG, the minimum length's held-back stop tokens while it
    holds them."""

    def __init__(self, settings: DecodeSettings, vocab: int, device: torch.device) -> None:
        self.device = device
        self.min_new_tokens = settings.min_new_tokens
        self.temperature = torch.tensor(settings.temperature, dtype=torch.float32,
                                        device=device)  # ()
        self.logprob_temperature = torch.tensor(
            settings.logprob_temperature or 1.0, dtype=torch.float32, device=device)  # ()
        self.free = torch.zeros(vocab, dtype=torch.float32, device=device)  # (V,)
        self.held_back = self.free.clone()  # (V,)
        if settings.stop_token_ids:
            self.held_back[settings.stop_token_ids] = -float("inf")

    def at(self, step: int, rows: int) -> StepDraw:
        """Step ``step``'s draw over ``rows`` rows (its uniforms drawn now)."""
        uniforms = torch.rand(rows, 1, dtype=torch.float64, device=self.device)  # (R, 1)
        return StepDraw(uniforms, self.temperature,
                        self.held_back if step < self.min_new_tokens else self.free,
                        self.logprob_temperature)


def unfiltered(step: int, settings: DecodeSettings) -> bool:
    """Whether step ``step`` draws from ``softmax(z_t / T')`` itself: no filter applies
    (:func:`filter_scores`: no top-k, no top-p, no minimum length holding stop tokens back)
    and the sampling temperature is the log-prob temperature ``T'``."""
    return (settings.temperature == settings.logprob_temperature and settings.top_k <= 0
            and settings.top_p >= 1.0
            and not (step < settings.min_new_tokens and settings.stop_token_ids))


def drawn_logprobs(probs: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """The drawn tokens' log-probabilities from the probabilities they were drawn from,
    ``probs = softmax(z_t / T')`` ``(B, V)`` (:func:`unfiltered`), ``chosen`` ``(B,)`` →
    ``(B,)``::

        log π(y) = log p_y

    It equals :func:`chosen_logprobs` to float32 rounding (~1e-7 relative in ``p_y``, so
    ~1e-7 absolute in ``log p_y``) while ``p_y`` is a normal float32 (``p_y ≥ 1.2e-38``,
    ``log p_y ≥ −87``); a draw picks a token below that with chance ``< V · 1.2e-38``.
    It saves :func:`chosen_logprobs`' second pass over the logits (``logsumexp``: on the
    CPU ~40 µs per step at ``(32, 964)``)."""
    return probs.gather(1, chosen[:, None]).squeeze(1).log()  # (B,)


def chosen_logprobs(logits: torch.Tensor, chosen: torch.Tensor,
                    temperature: float) -> torch.Tensor:
    """The drawn tokens' log-probabilities at ``temperature`` ``T'``::

        log π(y) = z_y / T' − logsumexp(z / T')

    ``logits`` ``(B, V)`` float32, ``chosen`` ``(B,)`` → ``(B,)``."""
    scaled = logits if temperature == 1.0 else logits / temperature  # (B, V)
    return (scaled.gather(1, chosen[:, None]).squeeze(1)
            - torch.logsumexp(scaled, dim=-1))  # (B,)
