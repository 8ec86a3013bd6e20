"""The trainer's shared-prompt forward (:mod:`rft.trainer.lean_forward`): each distinct
prompt runs once, the logits and gradients are the model's own forward's (to rounding),
the cases it leaves to the model's forward, and a trainer step through it."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from rft.trainer.batching import TensorBatch
from rft.trainer.lean_forward import (
    distinct_prompts,
    shared_prompt_logits,
    unsupported_reason,
)
from rft.trainer.models import response_logprobs, uses_shared_prompts


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _qwen2(tiny_model_dir: Path, **kwargs) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), **kwargs).train()


def _llama() -> torch.nn.Module:
    """A random Llama with biases on every projection and two query heads per key head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).train()


def _grpo_batch(vocab: int, prompts: int = 3, repeats: int = 4, width: int = 7,
                responses: int = 6) -> TensorBatch:
    """``prompts`` left-padded prompts, each repeated ``repeats`` times, plus one row with a
    prompt of its own; right-padded responses of different lengths (one of one token)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (prompts, width), generator=generator)
    mask = torch.ones(prompts, width, dtype=torch.long)
    for row in range(prompts):
        mask[row, : (2 * row) % width] = 0  # 0, 2, 4 … columns of left padding
    ids, mask = ids.repeat_interleave(repeats, 0), mask.repeat_interleave(repeats, 0)
    ids, mask = torch.cat([ids, ids[:1]]), torch.cat([mask, mask[:1]])
    ids[-1, -1] += 1  # the last row's prompt differs in one token
    rows = ids.shape[0]
    response = torch.randint(3, vocab, (rows, responses), generator=generator)
    response_mask = torch.ones(rows, responses, dtype=torch.long)
    for row in range(rows):
        response_mask[row, max(1, responses - row % 5):] = 0
    ids = torch.cat([ids, response], 1) * torch.cat([mask, response_mask], 1)
    attention = torch.cat([mask, response_mask], 1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return TensorBatch(width, {"input_ids": ids, "attention_mask": attention,
                               "position_ids": positions, "response_mask": response_mask})


def _model_logits(model: torch.nn.Module, batch: TensorBatch) -> torch.Tensor:
    width = batch.response_width
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], use_cache=False, logits_to_keep=width + 1)
    return out.logits[:, -width - 1: -1]  # (B, R, V)


@pytest.mark.parametrize("which", ["qwen2", "llama"])
def test_logits_and_gradients_equal_the_models_forward(tiny_model_dir: Path, which: str) -> None:
    model = _qwen2(tiny_model_dir) if which == "qwen2" else _llama()
    assert unsupported_reason(model) is None
    batch = _grpo_batch(model.config.vocab_size)
    unique, inverse = distinct_prompts(batch["input_ids"], batch["attention_mask"],
                                       batch["position_ids"], batch.prompt_width)
    assert unique.shape[0] == 4 and inverse.shape == (13,)  # 3 shared prompts + 1 alone
    assert len(set(inverse[:4].tolist())) == 1 and inverse[-1] not in inverse[:12]
    valid = batch["response_mask"].bool()  # (B, R)
    grads = []
    logits = []
    for forward in (_model_logits, lambda m, b: shared_prompt_logits(
            m, b["input_ids"], b["attention_mask"], b["position_ids"], b.prompt_width)):
        model.zero_grad()
        out = forward(model, batch)  # (B, R, V)
        weights = torch.linspace(0.5, 1.5, out.shape[-1])
        ((out * weights).sum(-1) * valid).sum().backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
        logits.append(out.detach())
    ours, reference = logits[1], logits[0]
    assert ours.shape == reference.shape and torch.isfinite(ours).all()
    torch.testing.assert_close(ours[valid], reference[valid], rtol=0, atol=1e-5)
    for name, grad in grads[0].items():  # float32 sums in another order: ≤ 1e-5 of the scale
        scale = grad.abs().max().item()
        assert scale > 0, name
        assert (grads[1][name] - grad).abs().max().item() <= 1e-5 * scale, name


def test_response_logprobs_takes_the_shared_path_only_where_it_applies(
        tiny_model_dir: Path) -> None:
    model = _qwen2(tiny_model_dir)
    batch = _grpo_batch(model.config.vocab_size)
    shared, _ = response_logprobs(model, batch, device=torch.device("cpu"), shared_prompts=True)
    plain, _ = response_logprobs(model, batch, device=torch.device("cpu"))
    valid = batch["response_mask"].bool()
    torch.testing.assert_close(shared[valid], plain[valid], rtol=0, atol=1e-5)
    assert uses_shared_prompts(model, batch, None)
    assert uses_shared_prompts(model, batch, torch.float32)
    assert not uses_shared_prompts(model, batch, torch.bfloat16)  # autocast: model's forward
    no_prompt = TensorBatch(0, dict(batch.tensors))
    assert not uses_shared_prompts(model, no_prompt, None)


def test_models_it_does_not_reproduce_keep_their_own_forward(tiny_model_dir: Path) -> None:
    eager = _qwen2(tiny_model_dir, attn_implementation="eager")
    assert unsupported_reason(eager) == "attention backend is not sdpa"
    checkpointed = _qwen2(tiny_model_dir)
    checkpointed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert unsupported_reason(checkpointed) == "gradient checkpointing"
    dropout = _qwen2(tiny_model_dir)
    dropout.config.attention_dropout = 0.1
    assert unsupported_reason(dropout) == "active attention dropout"
    assert unsupported_reason(dropout.eval()) is None  # no dropout in eval mode
    half = _qwen2(tiny_model_dir, dtype=torch.bfloat16)
    assert "float32" in (unsupported_reason(half) or "")
    adapted = _qwen2(tiny_model_dir)
    adapted.model.layers[0].mlp.up_proj = torch.nn.Sequential(adapted.model.layers[0].mlp.up_proj)
    assert "nn.Linear" in (unsupported_reason(adapted) or "")
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=2))
    assert "GPT2LMHeadModel is not one of" in (unsupported_reason(gpt2) or "")


def test_metric_entropy_shares_the_log_prob_logsumexp_bit_for_bit(tiny_model_dir: Path) -> None:
    """Entropy as a metric (no gradient) reuses the log-probs' ``logsumexp``: the same
    log-probs and entropies, bit for bit, as :func:`rft.ops.logprobs_from_logits` and
    :func:`rft.ops.entropy_from_logits` on the model's logits."""
    from rft.ops import entropy_from_logits, logprobs_from_logits

    model = _qwen2(tiny_model_dir)
    batch = _grpo_batch(model.config.vocab_size)
    for temperature in (1.0, 0.7):
        logps, entropy = response_logprobs(model, batch, device=torch.device("cpu"),
                                           temperature=temperature, with_entropy=True,
                                           entropy_grad=False)
        assert logps.requires_grad and entropy is not None and not entropy.requires_grad
        logits = _model_logits(model, batch).float() / temperature
        labels = batch["input_ids"][:, batch.prompt_width:]
        assert torch.equal(logps, logprobs_from_logits(logits, labels))
        assert torch.equal(entropy, entropy_from_logits(logits))
