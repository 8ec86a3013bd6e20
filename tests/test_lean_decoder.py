"""The hf engine's lean decoder and token draws: logits equal to the model's own forward
(Qwen2 and Llama, padding, weight updates, bfloat16), the cases it hands back to the model,
the inverse-CDF draw's distribution, and stop strings ending the decode loop."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from rft.engines.decode_loop import (  # noqa: E402
    DecodeSettings, draw_inverse_cdf, draw_multinomial, sample_tokens)
from rft.engines.lean_decoder import LeanDecoder, lean_decoder_for, unsupported_reason  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _qwen2(tiny_model_dir: Path, **kwargs) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), **kwargs).eval()


def _llama() -> torch.nn.Module:
    """A random Llama with biases on every projection and two query heads per key head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).eval()


def _batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three left-padded rows of 9, 5 and 1 tokens: ids, mask, positions, each ``(3, 9)``."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (3, 9), generator=generator)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, :8] = 0
    ids[mask == 0] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def _reference_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                      positions: torch.Tensor, new: torch.Tensor) -> list[torch.Tensor]:
    """Last-position logits of the model's own forward with a DynamicCache: the prompt,
    then one column of ``new`` ``(B, N)`` at a time."""
    from transformers import DynamicCache

    out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1)
    logits = [out.logits[:, -1]]
    step_positions = positions[:, -1:]
    for column in range(new.shape[1]):
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        step_positions = step_positions + 1
        out = model(input_ids=new[:, column:column + 1], attention_mask=mask,
                    position_ids=step_positions, past_key_values=out.past_key_values,
                    use_cache=True, logits_to_keep=1)
        logits.append(out.logits[:, -1])
    return logits


def _lean_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                 positions: torch.Tensor, new: torch.Tensor) -> list[torch.Tensor]:
    decoder = lean_decoder_for(model)
    assert isinstance(decoder, LeanDecoder)
    logits = [decoder.prefill(ids, mask, positions, new.shape[1])]
    step_positions = positions[:, -1:]
    for column in range(new.shape[1]):
        step_positions = step_positions + 1
        logits.append(decoder.step(new[:, column:column + 1], step_positions))
    return logits


@pytest.mark.parametrize("which", ["qwen2", "llama"])
@torch.no_grad()
def test_lean_logits_equal_the_models_forward_bit_for_bit(tiny_model_dir: Path,
                                                          which: str) -> None:
    model = _qwen2(tiny_model_dir) if which == "qwen2" else _llama()
    ids, mask, positions = _batch(model.config.vocab_size)
    new = torch.randint(3, model.config.vocab_size, (3, 6),
                        generator=torch.Generator().manual_seed(1))
    ours = _lean_logits(model, ids, mask, positions, new)
    reference = _reference_logits(model, ids, mask, positions, new)
    assert len(ours) == len(reference) == 7
    for a, b in zip(ours, reference):
        assert torch.isfinite(a).all()
        assert torch.equal(a, b), (a - b).abs().max()


@torch.no_grad()
def test_lean_logits_follow_in_place_weight_updates_and_bfloat16(tiny_model_dir: Path) -> None:
    model = _qwen2(tiny_model_dir)
    ids, mask, positions = _batch(model.config.vocab_size)
    new = ids[:, -2:]
    before = _lean_logits(model, ids, mask, positions, new)
    model.model.layers[1].mlp.up_proj.weight.mul_(1.5)
    after = _lean_logits(model, ids, mask, positions, new)
    assert not torch.equal(before[-1], after[-1])
    assert all(torch.equal(a, b) for a, b in
               zip(after, _reference_logits(model, ids, mask, positions, new)))

    half = _qwen2(tiny_model_dir, dtype=torch.bfloat16)
    ours = _lean_logits(half, ids, mask, positions, new)
    reference = _reference_logits(half, ids, mask, positions, new)
    assert all(a.dtype == torch.bfloat16 for a in ours)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=0)


def test_models_it_does_not_reproduce_keep_their_own_forward(tiny_model_dir: Path) -> None:
    assert unsupported_reason(_qwen2(tiny_model_dir)) is None
    assert unsupported_reason(_llama()) is None
    eager = _qwen2(tiny_model_dir, attn_implementation="eager")
    assert unsupported_reason(eager) == "attention backend is not sdpa"
    assert unsupported_reason(_qwen2(tiny_model_dir).train()) == "model is in training mode"
    sliding = _qwen2(tiny_model_dir)
    sliding.config.use_sliding_window = True
    assert unsupported_reason(sliding) == "sliding-window attention"
    adapted = _qwen2(tiny_model_dir)
    adapted.model.layers[0].mlp.up_proj = torch.nn.Sequential(adapted.model.layers[0].mlp.up_proj)
    assert "nn.Linear" in (unsupported_reason(adapted) or "")

    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=2)).eval()
    assert "GPT2LMHeadModel is not one of" in (unsupported_reason(gpt2) or "")
    assert lean_decoder_for(gpt2) is None
    # the decode loop then runs the model's own forward: the same draws as lean=False
    ids = torch.tensor([[5, 6, 7], [0, 8, 9]])
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    settings = DecodeSettings(max_new_tokens=4, min_new_tokens=0, temperature=1.0, top_k=0,
                              top_p=1.0, stop_token_ids=[], pad_token_id=0)
    results = []
    for lean in (True, False):
        torch.manual_seed(0)
        results.append(sample_tokens(gpt2, ids, mask, settings, lean=lean).tokens)
    assert results[0].shape == (2, 4) and torch.equal(results[0], results[1])


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
    ids, mask, _ = _batch(model.config.vocab_size)
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


@pytest.mark.parametrize("which", ["qwen2", "llama"])
@torch.no_grad()
def test_shared_prompt_prefill_equals_repeated_rows_bit_for_bit(tiny_model_dir: Path,
                                                                which: str) -> None:
    """``prefill(…, repeats=n)`` runs each prompt once: its logits, cache and the decode
    steps after it equal those of the prompt rows repeated ``n`` times, bit for bit (also
    against the model's own forward) at several batch shapes. One prompt of 6 tokens
    (a matrix product over few rows may take another CPU kernel) agrees to rounding."""
    model = _qwen2(tiny_model_dir) if which == "qwen2" else _llama()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(5)
    for rows, repeats, width in ((3, 8, 9), (1, 4, 6), (5, 2, 13), (2, 3, 9)):
        ids = torch.randint(3, vocab, (rows, width), generator=generator)
        mask = torch.ones(rows, width, dtype=torch.long)
        mask[0, : width // 2] = 0  # left padding
        ids[mask == 0] = 0
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        new = torch.randint(3, vocab, (rows * repeats, 3), generator=generator)
        big = [t.repeat_interleave(repeats, dim=0) for t in (ids, mask, positions)]
        shared = LeanDecoder(model)
        logits = [shared.prefill(ids, mask, positions, 3, repeats=repeats)]
        step_positions = big[2][:, -1:]
        for column in range(3):
            step_positions = step_positions + 1
            logits.append(shared.step(new[:, column:column + 1], step_positions))
        repeated = _lean_logits(model, *big, new)
        reference = _reference_logits(model, *big, new)
        for a, b, c in zip(logits, repeated, reference, strict=True):
            assert a.shape == (rows * repeats, vocab)
            if rows == 1:
                torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
                continue
            assert torch.equal(a, b), (rows, repeats, width, (a - b).abs().max())
            assert torch.equal(a, c), (rows, repeats, width, (a - c).abs().max())


def test_sample_tokens_with_repeats_draws_what_repeated_rows_draw(tiny_model_dir: Path) -> None:
    """``sample_tokens(…, repeats=n)`` on the distinct prompts draws the same tokens and
    returns the same logits as on the rows repeated ``n`` times (lean decoder and the
    model's own forward)."""
    model = _qwen2(tiny_model_dir)
    ids, mask, _ = _batch(model.config.vocab_size)
    settings = DecodeSettings(max_new_tokens=5, min_new_tokens=0, temperature=1.0, top_k=0,
                              top_p=1.0, stop_token_ids=[2], pad_token_id=0)
    for lean in (True, False):
        torch.manual_seed(7)
        shared = sample_tokens(model, ids, mask, settings, lean=lean, repeats=4)
        torch.manual_seed(7)
        repeated = sample_tokens(model, ids.repeat_interleave(4, 0),
                                 mask.repeat_interleave(4, 0), settings, lean=lean)
        assert shared.tokens.shape == (12, 5)
        assert torch.equal(shared.tokens, repeated.tokens)
        assert all(torch.equal(a, b) for a, b in zip(shared.logits, repeated.logits, strict=True))
