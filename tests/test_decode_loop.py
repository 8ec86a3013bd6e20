"""The hf engine's decode loop over the model's own forward and a transformers cache:
each prompt prefilled once and its cache expanded over the samples gives the logits,
caches and draws of the repeated rows (Qwen2, Llama, Qwen3, Mistral with a sliding
window, GPT-2; float32 and bfloat16), and they agree with a plain forward over the whole
sequence; grouped-query attention without copied heads equal to sdpa; the version guard;
the inverse-CDF draw; stop strings ending the loop."""

from __future__ import annotations

import logging
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from rft.engines import decode_loop  # noqa: E402
from rft.engines.decode_loop import (  # noqa: E402
    DecodeSettings, draw_inverse_cdf, draw_multinomial, missing_cache_api, sample_tokens)
from rft.engines.gqa_attention import unavailable_reason, use_gqa_attention  # noqa: E402

ARCHITECTURES = ("qwen2", "llama", "qwen3", "mistral", "gpt2")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _qwen2(tiny_model_dir: Path, **kwargs) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), **kwargs).eval()


def _model(which: str, tiny_model_dir: Path, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A tiny decoder of the family ``which``, random weights (seed 3), built offline:
    Llama with biases on every projection, Qwen3 (q/k norms), Mistral with a 4-token sliding
    window (shorter than the prompts), GPT-2 (learned positions, no RoPE); grouped-query
    attention where the family has it."""
    if which == "qwen2":
        return _qwen2(tiny_model_dir, dtype=dtype)
    import transformers

    common = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    configs = {
        "llama": lambda: transformers.LlamaConfig(**common, attention_bias=True, mlp_bias=True),
        "qwen3": lambda: transformers.Qwen3Config(**common, head_dim=16),
        "mistral": lambda: transformers.MistralConfig(**common, sliding_window=4),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4),
    }
    config = configs[which]()
    config._attn_implementation = "sdpa"
    torch.manual_seed(3)
    return transformers.AutoModelForCausalLM.from_config(config).to(dtype).eval()


def _batch(vocab: int, rows: int = 3, width: int = 9,
           seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` left-padded prompts of ``width`` columns (row 0 half padding, row 1 all but
    one column padding when ``rows > 1``): ids, mask, each ``(rows, width)``."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, width), generator=generator)
    mask = torch.ones(rows, width, dtype=torch.long)
    mask[0, : width // 2] = 0
    if rows > 1:
        mask[1, : width - 1] = 0
    ids[mask == 0] = 0
    return ids, mask


SETTINGS = DecodeSettings(max_new_tokens=6, min_new_tokens=0, temperature=1.0, top_k=0,
                          top_p=1.0, stop_token_ids=[], pad_token_id=0)


@pytest.mark.parametrize("which", ARCHITECTURES)
@torch.no_grad()
def test_prompt_once_cache_equals_the_repeated_rows_cache(tiny_model_dir: Path,
                                                          which: str) -> None:
    """``prefill(…, source)`` runs each prompt once and expands the cache to its ``n`` rows:
    its logits and every layer's keys / values equal those of the ``n`` repeated rows
    prefilled one by one, and so do the decode steps after it — to rounding (≤ 1e-6): a
    matrix product over fewer rows may take another CPU kernel (on some CPUs every
    shape here agrees bit for bit, on others the prefill differs by ~1e-7)."""
    model = _model(which, tiny_model_dir)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(5)
    for rows, repeats, width in ((3, 8, 9), (1, 4, 6), (5, 2, 13)):
        ids, mask = _batch(vocab, rows, width, seed=rows)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        new = torch.randint(3, vocab, (rows * repeats, 3), generator=generator)
        shared = decode_loop._CachedForward(model)
        repeated = decode_loop._CachedForward(model)
        big = [t.repeat_interleave(repeats, dim=0) for t in (ids, mask, positions)]
        source = torch.arange(rows).repeat_interleave(repeats)  # (rows·repeats,)
        logits = [(shared.prefill(ids, mask, positions, source), repeated.prefill(*big))]
        step_positions = big[2][:, -1:]
        for column in range(3):
            step_positions = step_positions + 1
            logits.append((shared.step(new[:, column:column + 1], step_positions),
                           repeated.step(new[:, column:column + 1], step_positions)))
        atol = 1e-6
        for a, b in logits:
            assert a.shape == b.shape == (rows * repeats, vocab)
            torch.testing.assert_close(a, b, rtol=0, atol=atol)
        layers = list(zip(shared.cache.layers, repeated.cache.layers, strict=True))
        assert layers and all(s.keys.shape[0] == rows * repeats for s, _ in layers)
        assert all(s.is_sliding == (which == "mistral") for s, _ in layers)
        for s, r in layers:
            torch.testing.assert_close(s.keys, r.keys, rtol=0, atol=atol)
            torch.testing.assert_close(s.values, r.values, rtol=0, atol=atol)


@pytest.mark.parametrize("which", ARCHITECTURES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@torch.no_grad()
def test_sampling_with_a_shared_prompt_matches_repeated_rows_and_a_plain_forward(
        tiny_model_dir: Path, which: str, dtype: torch.dtype) -> None:
    """``sample_tokens(…, repeats=n)`` on the distinct prompts draws the tokens and returns
    the logits of the repeated rows (``share_prompts=False``); and each step's logits are
    the plain (uncached) forward's over prompt + tokens drawn so far (float32 ≤ 1e-5;
    bfloat16 within the plain forward's own rounding, 5e-2)."""
    model = _model(which, tiny_model_dir, dtype)
    ids, mask = _batch(model.config.vocab_size)
    torch.manual_seed(7)
    shared = sample_tokens(model, ids, mask, SETTINGS, repeats=4)
    torch.manual_seed(7)
    repeated = sample_tokens(model, ids, mask, SETTINGS, repeats=4, share_prompts=False)
    assert shared.tokens.shape == (12, 6)
    assert torch.equal(shared.tokens, repeated.tokens)
    for a, b in zip(shared.logits, repeated.logits, strict=True):
        assert a.dtype == torch.float32 and torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6 if dtype == torch.float32 else 0)
    # the cache against no cache: one forward over each whole sequence
    full_ids = torch.cat([ids.repeat_interleave(4, 0), shared.tokens], dim=1)  # (12, 15)
    full_mask = torch.cat([mask.repeat_interleave(4, 0), torch.ones_like(shared.tokens)], dim=1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    plain = model(input_ids=full_ids, attention_mask=full_mask, position_ids=positions,
                  use_cache=False).logits.float()  # (12, 15, V)
    width = ids.shape[1]
    tolerance = 1e-5 if dtype == torch.float32 else 5e-2
    for step, step_logits in enumerate(shared.logits):
        torch.testing.assert_close(step_logits, plain[:, width - 1 + step], rtol=0,
                                   atol=tolerance)


@pytest.mark.parametrize("which", ("qwen2", "llama", "qwen3", "mistral"))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@torch.no_grad()
def test_grouped_query_attention_without_copied_heads_is_sdpa_bit_for_bit(
        tiny_model_dir: Path, which: str, dtype: torch.dtype) -> None:
    """:mod:`rft.engines.gqa_attention` through the model's attention interface: the
    decode loop's draws and logits and a plain padded forward equal ``transformers``' sdpa
    attention bit for bit (grouped-query models, left padding)."""
    reference = _model(which, tiny_model_dir, dtype)
    model = _model(which, tiny_model_dir, dtype)
    assert unavailable_reason(model) is None and use_gqa_attention(model)
    assert model.config._attn_implementation == "rft_sdpa_gqa"
    assert reference.config._attn_implementation == "sdpa"
    assert model.model.layers[0].self_attn.num_key_value_groups == 2
    ids, mask = _batch(model.config.vocab_size)
    runs = []
    for candidate in (model, reference):
        torch.manual_seed(7)
        runs.append(sample_tokens(candidate, ids, mask, SETTINGS, repeats=4))
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert all(torch.equal(a, b) for a, b in zip(runs[0].logits, runs[1].logits, strict=True))
    assert torch.equal(model(input_ids=ids, attention_mask=mask).logits,
                       reference(input_ids=ids, attention_mask=mask).logits)


@pytest.mark.parametrize("heads, kv_heads", [(8, 2), (4, 4)], ids=["grouped", "plain"])
@pytest.mark.parametrize("boolean", [True, False], ids=["bool-mask", "float-mask"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_one_query_attention_is_sdpa(heads: int, kv_heads: int, boolean: bool,
                                     dtype: torch.dtype) -> None:
    """The compiled decode steps' attention (one query per row as batched products) equals
    SDPA's, with a boolean or an additive mask wider than the keys (its first ``T``
    columns count), grouped or not; in bf16 within one bf16 rounding of SDPA's."""
    from rft.engines.gqa_attention import one_query_attention

    generator = torch.Generator().manual_seed(0)
    rows, keys, width = 5, 11, 16
    query = torch.randn(rows, heads, 1, width, generator=generator)
    key, value = (torch.randn(rows, kv_heads, keys, width, generator=generator)
                  for _ in range(2))
    attend = torch.rand(rows, 1, 1, keys + 3, generator=generator) > 0.3  # (B, 1, 1, T + 3)
    attend[..., keys - 1] = True
    mask = attend if boolean else torch.zeros(attend.shape).masked_fill(~attend, -1e9)
    query, key, value = (t.to(dtype) for t in (query, key, value))
    mask = mask if boolean else mask.to(dtype)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask[..., :keys], scale=0.3,
        enable_gqa=heads != kv_heads).transpose(1, 2)  # (B, 1, H, d)
    got = one_query_attention(query, key, value, mask, scaling=0.3)
    assert got.shape == (rows, 1, heads, width) and got.dtype == dtype
    torch.testing.assert_close(got, expected, rtol=0,
                               atol=1e-6 if dtype == torch.float32 else 2 ** -7)


def test_one_query_attention_serves_compiled_steps_only(monkeypatch) -> None:
    """Eager decode steps keep SDPA (bit for bit, above); inside ``torch.compile``'s trace
    a one-query step takes :func:`one_query_attention`."""
    from rft.engines import gqa_attention

    calls: list[bool] = []
    monkeypatch.setattr(gqa_attention, "one_query_attention",
                        lambda *a: calls.append(True) or torch.zeros(1))
    query = torch.zeros(2, 4, 1, 8)
    key = value = torch.zeros(2, 2, 3, 8)
    mask = torch.ones(2, 1, 1, 3, dtype=torch.bool)
    module = torch.nn.Module()
    module.num_key_value_groups = 2  # type: ignore[assignment]
    out, _ = gqa_attention.gqa_sdpa_forward(module, query, key, value, mask)
    assert not calls and out.shape == (2, 1, 4, 8)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    gqa_attention.gqa_sdpa_forward(module, query, key, value, mask)
    assert calls == [True]


def test_grouped_query_attention_stays_off_where_it_does_not_apply(tiny_model_dir: Path) -> None:
    eager = _qwen2(tiny_model_dir, attn_implementation="eager")
    assert unavailable_reason(eager) == "the attention backend is not sdpa"
    assert not use_gqa_attention(eager) and eager.config._attn_implementation == "eager"


@torch.no_grad()
def test_prompts_with_uneven_sample_counts_share_one_prefill(tiny_model_dir: Path) -> None:
    """``rows``: any number of completions per prompt (the engine's repeated prompts of one
    call): one prefill of the distinct prompts, then the draws and logits of the prompt
    rows laid out one per completion."""
    model = _model("qwen2", tiny_model_dir)
    ids, mask = _batch(model.config.vocab_size)
    rows = torch.tensor([2, 0, 0, 2, 2, 0])  # prompt 1: no completion
    seen: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    torch.manual_seed(3)
    shared = sample_tokens(model, ids, mask, SETTINGS, rows=rows)
    hook.remove()
    torch.manual_seed(3)
    laid_out = sample_tokens(model, ids[rows], mask[rows], SETTINGS)
    assert seen == [3] + [6] * 5  # one prefill of the 3 prompts, 5 decode steps of 6 rows
    assert torch.equal(shared.tokens, laid_out.tokens)
    for a, b in zip(shared.logits, laid_out.logits, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_missing_cache_api_names_what_is_missing() -> None:
    """The version guard: this transformers has the cache API; a cache class without
    ``batch_select_indices`` (transformers before it) is named in one line."""
    from transformers import DynamicCache

    assert missing_cache_api() is None

    class OldCache:  # DynamicCache's layout before batch_select_indices
        pass

    reason = missing_cache_api(OldCache)
    assert reason is not None and "OldCache has no batch_select_indices" in reason
    assert "\n" not in reason and missing_cache_api(DynamicCache) is None


def test_engine_without_the_cache_api_samples_with_generate(
        tiny_model_dir: Path, monkeypatch, caplog) -> None:
    """A transformers without the cache API: the engine says why in one log line and
    samples with ``generate`` (each prompt once per sample), what ``generate`` draws."""
    from rft.engines import SamplingArgs
    from rft.engines.hf_engine import HFEngine

    monkeypatch.setattr(decode_loop, "missing_cache_api",
                        lambda cache_type=None: "transformers 4.0: DynamicCache has no "
                                                "batch_select_indices")
    with caplog.at_level(logging.WARNING, logger="rft.engines.hf_engine"):
        engine = HFEngine(str(tiny_model_dir), seed=3)
    lines = [r.getMessage() for r in caplog.records if r.name == "rft.engines.hf_engine"]
    assert lines == ["hf engine: transformers 4.0: DynamicCache has no batch_select_indices;"
                     " sampling with model.generate, one prompt prefill per sample"]
    assert not engine.shares_prompts
    called: list[int] = []
    generate = engine.model.generate

    def counting(*args, **kwargs):
        called.append(kwargs["input_ids"].shape[0])
        return generate(*args, **kwargs)

    monkeypatch.setattr(engine.model, "generate", counting)
    results = engine.generate([[5, 6, 7], [8, 9]], SamplingArgs(max_tokens=4, seed=1), n=3)
    assert called == [2]  # two prompts, three return sequences each
    assert [len(group) for group in results] == [3, 3]
    assert all(1 <= len(c.token_ids) <= 4 for group in results for c in group)



def test_inverse_cdf_draw_has_the_distribution_and_never_draws_zero_mass() -> None:
    torch.manual_seed(0)
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.15, 0.05, 0.0])
    rows = 200_000
    drawn = draw_inverse_cdf(probs.expand(rows, -1))  # (rows,)
    counts = torch.bincount(drawn, minlength=probs.numel()).double()
    assert counts[probs == 0].sum() == 0
    expected = probs.double() * rows
    positive = probs > 0
    chi2 = (((counts - expected) ** 2)[positive] / expected[positive]).sum()
    assert chi2 < 16.3  # χ²(3 degrees of freedom) at p = 0.001
    # unnormalised weights give the same distribution
    torch.manual_seed(0)
    assert torch.equal(draw_inverse_cdf(3 * probs.expand(rows, -1)), drawn)
    # the same statistic for torch.multinomial, as a yardstick for the bound above
    torch.manual_seed(0)
    reference = torch.bincount(draw_multinomial(probs.expand(rows, -1)),
                               minlength=probs.numel()).double()
    assert (((reference - expected) ** 2)[positive] / expected[positive]).sum() < 16.3


def test_inverse_cdf_draw_caps_a_rounded_up_threshold(monkeypatch) -> None:
    """A threshold that rounds up to the total mass picks the last token with mass, not a
    zero-mass token after it (nor an index past the vocabulary)."""
    probs = torch.tensor([[0.25, 0.75, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.ones(*shape, **kw))
    assert draw_inverse_cdf(probs).tolist() == [1, 3]
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.zeros(*shape, **kw))
    assert draw_inverse_cdf(probs).tolist() == [0, 3]


def test_stop_strings_end_rows_inside_the_decode_loop(tiny_model_dir: Path) -> None:
    """A row whose text holds a stop string finishes (pad ids after it); when every row has,
    the loop stops before ``max_new_tokens``."""
    model = _qwen2(tiny_model_dir)
    ids, mask = _batch(model.config.vocab_size)
    calls: list[int] = []

    def after_three(tokens: torch.Tensor) -> torch.Tensor:  # row r "sees" its stop at r + 3
        calls.append(tokens.shape[1])
        return torch.tensor([tokens.shape[1] >= 3 + row for row in range(tokens.shape[0])])

    settings = DecodeSettings(max_new_tokens=10, min_new_tokens=0, temperature=1.0, top_k=0,
                              top_p=1.0, stop_token_ids=[], pad_token_id=0,
                              stop_check=after_three)
    torch.manual_seed(4)
    out = sample_tokens(model, ids, mask, settings)
    assert out.tokens.shape == (3, 5) and calls == [1, 2, 3, 4, 5]
    assert (out.tokens[0, 3:] == 0).all() and (out.tokens[1, 4:] == 0).all()
    torch.manual_seed(4)
    free = sample_tokens(model, ids, mask, DecodeSettings(
        max_new_tokens=10, min_new_tokens=0, temperature=1.0, top_k=0, top_p=1.0,
        stop_token_ids=[], pad_token_id=0))
    assert free.tokens.shape == (3, 10)
    assert torch.equal(free.tokens[0, :3], out.tokens[0, :3])
    assert torch.equal(free.tokens[2, :5], out.tokens[2, :5])


@pytest.mark.parametrize("which", ARCHITECTURES)
@torch.no_grad()
def test_decode_steps_with_a_key_mask_equal_the_two_d_mask(tiny_model_dir: Path,
                                                          which: str) -> None:
    """The decode steps' boolean key mask ``(R, 1, 1, L)`` (one buffer, sliced; grown by
    doubling past twice the prompt) gives the logits and tokens of the 2-D mask that
    ``transformers`` expands itself, bit for bit; it is used for sdpa models without a
    sliding window only (Mistral's 4-token window keeps the 2-D mask, as does eager)."""
    model = _model(which, tiny_model_dir)
    assert decode_loop.takes_key_mask(model) == (which != "mistral")
    ids, mask = _batch(model.config.vocab_size, rows=3, width=5)
    settings = DecodeSettings(max_new_tokens=14, min_new_tokens=14, temperature=1.0, top_k=0,
                              top_p=1.0, stop_token_ids=[1], pad_token_id=0)
    runs, used = [], []
    for key_mask in (None, False):  # automatic, and forced off
        original = decode_loop._CachedForward

        def recording(m: torch.nn.Module, key_mask: bool | None = key_mask,
                      step_forward: object = None, prefill_forward: object = None) -> object:
            forward = original(m, key_mask=key_mask, step_forward=step_forward,
                               prefill_forward=prefill_forward)
            used.append(forward.uses_key_mask)
            return forward

        torch.manual_seed(11)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(decode_loop, "_CachedForward", recording)
            runs.append(sample_tokens(model, ids, mask, settings, repeats=2))
    assert used == [which != "mistral", False]
    assert runs[0].tokens.shape == (6, 14)  # 5 prompt columns + 14: the buffer grew once
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert all(torch.equal(a, b) for a, b in zip(runs[0].logits, runs[1].logits, strict=True))
    if which == "qwen2":  # a hybrid's linear-attention layers read the 2-D mask
        model.config.layer_types = ["full_attention", "linear_attention"]
        assert not decode_loop.takes_key_mask(model)
    model.config._attn_implementation = "eager"
    assert not decode_loop.takes_key_mask(model)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@torch.no_grad()
def test_log_probs_taken_in_the_loop_equal_the_kept_logits_log_softmax(
        tiny_model_dir: Path, temperature: float) -> None:
    """``logprob_temperature`` ``T'``: each drawn token's ``log_softmax(z / T')`` from the
    loop equals the one from the kept logits (≤ 1e-6); ``keep_logits=False`` draws the
    same tokens and keeps no logits."""
    model = _qwen2(tiny_model_dir)
    ids, mask = _batch(model.config.vocab_size)
    kept, dropped = (DecodeSettings(max_new_tokens=6, min_new_tokens=0, temperature=0.9,
                                    top_k=0, top_p=1.0, stop_token_ids=[], pad_token_id=0,
                                    logprob_temperature=temperature, keep_logits=keep)
                     for keep in (True, False))
    torch.manual_seed(3)
    full = sample_tokens(model, ids, mask, kept, repeats=2)
    torch.manual_seed(3)
    lean = sample_tokens(model, ids, mask, dropped, repeats=2)
    assert torch.equal(full.tokens, lean.tokens) and lean.logits == []
    stacked = torch.stack(full.logits, dim=1) / temperature  # (6, N, V)
    want = torch.log_softmax(stacked, -1).gather(-1, full.tokens[..., None]).squeeze(-1)
    assert full.logprobs is not None and lean.logprobs is not None
    assert lean.logprobs.shape == (6, full.tokens.shape[1])
    torch.testing.assert_close(lean.logprobs, want, rtol=0, atol=1e-6)
    assert sample_tokens(model, ids, mask, SETTINGS).logprobs is None


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@torch.no_grad()
def test_log_probs_read_from_the_draws_probabilities_equal_log_softmax(
        tiny_model_dir: Path, temperature: float) -> None:
    """Sampling at the log-prob temperature with no filter: the drawn tokens' log-probs are
    read from the probabilities they were drawn from (``log p_y``, no second pass over the
    logits) and equal ``log_softmax(z / T')`` of the kept logits to 1e-6; with a top-k
    filter the loop takes the exact formula, and that equals it too."""
    model = _qwen2(tiny_model_dir)
    ids, mask = _batch(model.config.vocab_size)
    for top_k in (0, 5):
        settings = DecodeSettings(max_new_tokens=6, min_new_tokens=0, temperature=temperature,
                                  top_k=top_k, top_p=1.0, stop_token_ids=[], pad_token_id=0,
                                  logprob_temperature=temperature, keep_logits=True)
        assert decode_loop.unfiltered(0, settings) == (top_k == 0)
        torch.manual_seed(5)
        result = sample_tokens(model, ids, mask, settings, repeats=3)
        stacked = torch.stack(result.logits, dim=1) / temperature  # (6, N, V)
        want = torch.log_softmax(stacked, -1).gather(-1, result.tokens[..., None]).squeeze(-1)
        assert result.logprobs is not None
        torch.testing.assert_close(result.logprobs, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_unfiltered_holds_exactly_where_filter_scores_only_divides_by_t(
        temperature: float) -> None:
    """:func:`decode_loop.unfiltered` and :func:`filter_scores` agree: a step is unfiltered
    exactly when its scores are the raw logits over ``T'`` (so reading ``log p_y`` from the
    draw's probabilities is ``log_softmax(z / T')``); each filter, or another sampling
    temperature, alone makes it filtered."""
    raw = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    base = dict(max_new_tokens=4, min_new_tokens=0, temperature=temperature, top_k=0,
                top_p=1.0, stop_token_ids=[1], pad_token_id=0,
                logprob_temperature=temperature)
    cases = [({}, 0), ({"top_k": 5}, 0), ({"top_p": 0.9}, 0), ({"min_new_tokens": 2}, 1),
             ({"min_new_tokens": 2}, 2), ({"logprob_temperature": 0.5}, 0)]
    for change, step in cases:
        settings = DecodeSettings(**{**base, **change})
        scores = decode_loop.filter_scores(raw, step, settings)
        same = torch.equal(scores, raw / settings.logprob_temperature)
        assert decode_loop.unfiltered(step, settings) == same, (change, step)


@pytest.mark.parametrize("temperature,min_new_tokens,step", [
    (1.0, 0, 1), (0.7, 0, 1), (1.3, 3, 1), (1.3, 3, 3)])
def test_draw_from_logits_is_the_loops_own_draw(temperature: float, min_new_tokens: int,
                                                step: int) -> None:
    """:func:`decode_loop.draw_from_logits` (what a step that draws in its graph runs) picks,
    at the same uniform numbers, the tokens of the loop's filters, softmax and inverse-CDF
    draw, bit for bit when run eagerly, the held-back stop tokens included; its log-probs
    are :func:`chosen_logprobs`' formula."""
    generator = torch.Generator().manual_seed(1)
    raw = 3 * torch.randn(64, 50, generator=generator)  # (R, V)
    raw[:, 7] += 8.0  # the stop token: drawn almost always unless held back
    settings = DecodeSettings(max_new_tokens=4, min_new_tokens=min_new_tokens,
                              temperature=temperature, top_k=0, top_p=1.0,
                              stop_token_ids=[7], pad_token_id=0, logprob_temperature=0.9)
    assert decode_loop.draws_in_step(settings)
    draws = decode_loop._StepDraws(settings, vocab=50, device=torch.device("cpu"))
    torch.manual_seed(4)
    draw = draws.at(step, rows=64)
    torch.manual_seed(4)
    want = draw_inverse_cdf(decode_loop.filter_scores(raw, step, settings).softmax(-1))
    chosen, logprobs = decode_loop.draw_from_logits(
        raw, draw.uniforms, draw.temperature, draw.held_back, draw.logprob_temperature)
    assert torch.equal(chosen, want)
    if step < min_new_tokens:  # held back
        assert not bool((chosen == 7).any())
    else:
        assert float((chosen == 7).float().mean()) > 0.5
    torch.testing.assert_close(logprobs, decode_loop.chosen_logprobs(raw, chosen, 0.9),
                               rtol=0, atol=0)


def test_a_step_that_draws_serves_only_the_settings_it_covers() -> None:
    base = dict(max_new_tokens=4, min_new_tokens=2, temperature=0.8, top_k=0, top_p=1.0,
                stop_token_ids=[1], pad_token_id=0)
    assert decode_loop.draws_in_step(DecodeSettings(**base))
    for change in ({"temperature": 0.0}, {"top_k": 5}, {"top_p": 0.9}):
        assert not decode_loop.draws_in_step(DecodeSettings(**{**base, **change}))
    assert not decode_loop.draws_in_step(DecodeSettings(**base), draw_multinomial)


@torch.no_grad()
def test_sampling_with_a_step_that_draws_equals_the_loops_own_draws(
        tiny_model_dir: Path) -> None:
    """``draw_step`` (run eagerly here: :func:`decode_loop.forward_and_draw`; the ``hf``
    engine compiles it, tests/test_compiled_decode.py) takes every step after the first
    and gives the loop's own tokens from the same RNG stream, its log-probs within 1e-6,
    its kept logits bit for bit, and the minimum length's held-back stop tokens; with
    top-k the loop draws itself."""
    model = _qwen2(tiny_model_dir)
    ids, mask = _batch(model.config.vocab_size)
    calls = []

    def draw_step(**inputs: object) -> tuple:
        calls.append(inputs["uniforms"])
        return decode_loop.forward_and_draw(model, **inputs)

    for top_k in (0, 5):
        settings = DecodeSettings(max_new_tokens=6, min_new_tokens=6, temperature=1.2,
                                  top_k=top_k, top_p=1.0, stop_token_ids=[2, 5],
                                  pad_token_id=0, logprob_temperature=1.0, keep_logits=True)
        calls.clear()
        torch.manual_seed(6)
        own = sample_tokens(model, ids, mask, settings, repeats=3)
        torch.manual_seed(6)
        drawn = sample_tokens(model, ids, mask, settings, repeats=3, draw_step=draw_step)
        assert len(calls) == (5 if top_k == 0 else 0)
        assert torch.equal(own.tokens, drawn.tokens)
        assert not bool(torch.isin(drawn.tokens, torch.tensor([2, 5])).any())
        assert all(torch.equal(a, b) for a, b in zip(own.logits, drawn.logits, strict=True))
        assert own.logprobs is not None and drawn.logprobs is not None
        torch.testing.assert_close(drawn.logprobs, own.logprobs, rtol=0, atol=1e-6)
