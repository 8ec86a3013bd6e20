"""The trainer's prefix-tree packed forward (:mod:`rft.trainer.prefix_tree`,
:mod:`rft.trainer.packed_forward`): each shared prefix runs once, through the model's own
forward with a 4-D mask; logits and gradients are the plain forward's (float32 within
1e-5; bfloat16 autocast within the plain forward's own noise) for Qwen2, Llama and
Mistral, with LoRA and gradient checkpointing; multi-turn rows form one tree; the cases
left to the plain forward say why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from rft.trainer.batching import TensorBatch
from rft.trainer.models import response_logprobs, uses_shared_prompts
from rft.trainer.packed_forward import fallback_reason, probe_reason, shared_prompt_logits
from rft.trainer.prefix_tree import pack_rows, unpackable_reason


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _qwen2(tiny_model_dir: Path, **kwargs: Any) -> torch.nn.Module:
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


def _mistral() -> torch.nn.Module:
    """A random Mistral (a third family: its own modelling code, sliding-window config)."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(4)
    config = MistralConfig(vocab_size=300, hidden_size=64, intermediate_size=96,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, sliding_window=64, attn_implementation="sdpa")
    return MistralForCausalLM(config).train()


def _model(which: str, tiny_model_dir: Path) -> torch.nn.Module:
    return {"qwen2": lambda: _qwen2(tiny_model_dir), "llama": _llama,
            "mistral": _mistral}[which]()


def grpo_batch(vocab: int, prompts: int = 3, repeats: int = 4, width: int = 7,
               responses: int = 6, seed: int = 0) -> TensorBatch:
    """``prompts`` left-padded prompts, each repeated ``repeats`` times, plus one row with a
    prompt of its own; right-padded responses of different lengths (one of one token)."""
    generator = torch.Generator().manual_seed(seed)
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


def multi_turn_batch(vocab: int, episodes: int = 2, turns: int = 5, prompt: int = 6,
                     reply: int = 4, user: int = 3, seed: int = 0) -> TensorBatch:
    """``episodes`` episodes of ``turns`` turns, one row per turn: turn ``k``'s prompt is
    the episode's history (first prompt, then each earlier reply and user message), its
    response the turn's reply. Rows left-pad prompts and right-pad responses."""
    generator = torch.Generator().manual_seed(seed)
    rows: list[tuple[list[int], list[int]]] = []
    for _ in range(episodes):
        history = torch.randint(3, vocab, (prompt,), generator=generator).tolist()
        for _ in range(turns):
            answer = torch.randint(3, vocab, (reply,), generator=generator).tolist()
            rows.append((list(history), answer))
            history = history + answer + torch.randint(3, vocab, (user,),
                                                       generator=generator).tolist()
    width = max(len(p) for p, _ in rows)
    right = max(len(r) for _, r in rows)
    ids = torch.zeros(len(rows), width + right, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (p, r) in enumerate(rows):
        ids[row, width - len(p): width] = torch.tensor(p)
        ids[row, width: width + len(r)] = torch.tensor(r)
        mask[row, width - len(p): width + len(r)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return TensorBatch(width, {"input_ids": ids, "attention_mask": mask,
                               "position_ids": positions,
                               "response_mask": mask[:, width:].clone()})


def model_logits(model: torch.nn.Module, batch: TensorBatch) -> torch.Tensor:
    """The plain forward's logits ``(B, R, V)`` scoring the response tokens."""
    width = batch.response_width
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], use_cache=False, logits_to_keep=width + 1)
    return out.logits[:, -width - 1: -1]  # (B, R, V)


def packed(model: torch.nn.Module, batch: TensorBatch) -> torch.Tensor:
    return shared_prompt_logits(model, batch["input_ids"], batch["attention_mask"],
                                batch["position_ids"], batch.prompt_width)


def logits_and_grads(model: torch.nn.Module, batch: TensorBatch, forward: Any,
                     dtype: torch.dtype | None = None
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``forward``'s logits and the gradients of a weighted sum of them over the valid
    response tokens (every logit gets its own weight)."""
    valid = batch["response_mask"].bool()  # (B, R)
    model.zero_grad()
    context = (torch.autocast("cpu", dtype=dtype) if dtype is not None
               else torch.autocast("cpu", enabled=False))
    with context:
        out = forward(model, batch).float()  # (B, R, V)
    weights = torch.linspace(0.5, 1.5, out.shape[-1])
    ((out * weights).sum(-1) * valid).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads


def assert_equal_to_rounding(model: torch.nn.Module, batch: TensorBatch,
                             atol: float = 1e-5) -> None:
    """Packed logits within ``atol`` of the plain ones, every gradient within ``atol`` of
    its largest element."""
    valid = batch["response_mask"].bool()
    reference, ref_grads = logits_and_grads(model, batch, model_logits)
    ours, grads = logits_and_grads(model, batch, packed)
    assert ours.shape == reference.shape and torch.isfinite(ours).all()
    torch.testing.assert_close(ours[valid], reference[valid], rtol=0, atol=atol)
    assert ref_grads.keys() == grads.keys() and ref_grads
    for name, grad in ref_grads.items():  # float32 sums in another order
        scale = grad.abs().max().item()
        assert scale > 0, name
        assert (grads[name] - grad).abs().max().item() <= atol * scale, name


# ---- the layout ------------------------------------------------------------------------


def test_grpo_rows_share_their_prompt_once() -> None:
    batch = grpo_batch(300)
    layout = pack_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                       batch.prompt_width)
    prompt_lengths = batch["attention_mask"][:, : batch.prompt_width].sum(-1)
    response_lengths = batch["response_mask"].sum(-1)
    # 3 prompts shared by 4 rows each, one alone: each prompt once, every response once
    # (rows that start their responses alike share those tokens too)
    shared = int(prompt_lengths[::4][:3].sum() + prompt_lengths[-1])
    assert layout.input_ids.shape[0] == 4  # one pack per distinct prompt
    assert layout.tokens <= shared + int(response_lengths.sum())
    assert layout.tokens < int(batch["attention_mask"].sum())
    # each scored column points at a node holding the token before it
    flat_ids = layout.input_ids.reshape(-1)
    flat_pos = layout.position_ids.reshape(-1)
    for row in range(len(batch)):
        for j in range(int(response_lengths[row])):
            node = int(layout.source[row, j])
            column = batch.prompt_width + j - 1
            assert int(flat_ids[node]) == int(batch["input_ids"][row, column])
            assert int(flat_pos[node]) == int(batch["position_ids"][row, column])
        assert (layout.source[row, int(response_lengths[row]):] == -1).all()


def test_multi_turn_rows_pack_as_one_tree_per_episode() -> None:
    """Five turns per episode: the tree holds each episode's last row's tokens once,
    against one row per turn (the ≥ 2× fewer tokens of #31's goal)."""
    batch = multi_turn_batch(300, episodes=2, turns=5)
    layout = pack_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                       batch.prompt_width)
    lengths = batch["attention_mask"].sum(-1)  # (10,)
    assert layout.input_ids.shape[0] == 2
    assert layout.tokens == int(lengths[4] + lengths[9])  # each episode's last turn, once
    assert int(lengths.sum()) >= 2 * layout.tokens


def test_rows_that_are_not_prompt_then_response_are_not_packed() -> None:
    batch = grpo_batch(300)
    mask = batch["attention_mask"].clone()
    assert unpackable_reason(mask, batch.prompt_width) is None
    assert unpackable_reason(mask, 0) == "a row has an empty prompt"
    holed = mask.clone()
    holed[0, batch.prompt_width + 1] = 0
    holed[0, batch.prompt_width + 2] = 1
    assert unpackable_reason(holed, batch.prompt_width) == "a response is not right-padded"
    right = mask.clone()
    right[4, 0] = 1  # row 4 is left-padded by 2: a hole in its prompt
    assert unpackable_reason(right, batch.prompt_width) == "a prompt is not left-padded"


# ---- equality ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["qwen2", "llama", "mistral"])
def test_logits_and_gradients_equal_the_models_forward(tiny_model_dir: Path, which: str) -> None:
    model = _model(which, tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    assert fallback_reason(model, batch["input_ids"], batch["attention_mask"],
                           batch["position_ids"], batch.prompt_width) is None
    assert_equal_to_rounding(model, batch)


@pytest.mark.parametrize("which", ["qwen2", "llama"])
def test_multi_turn_tree_equals_one_row_per_turn(tiny_model_dir: Path, which: str) -> None:
    model = _model(which, tiny_model_dir)
    assert_equal_to_rounding(model, multi_turn_batch(model.config.vocab_size))


@pytest.mark.parametrize("which", ["qwen2", "mistral"])
def test_lora_and_gradient_checkpointing_keep_the_equality(tiny_model_dir: Path,
                                                           which: str) -> None:
    from peft import LoraConfig, get_peft_model

    model = _model(which, tiny_model_dir)
    torch.manual_seed(5)
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                            target_modules=["q_proj", "v_proj", "up_proj"]))
    lora.train()
    batch = grpo_batch(model.config.vocab_size)
    assert_equal_to_rounding(lora, batch)
    lora.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert_equal_to_rounding(lora, batch)


def test_eager_attention_packs_with_an_additive_mask(tiny_model_dir: Path) -> None:
    model = _qwen2(tiny_model_dir, attn_implementation="eager")
    assert_equal_to_rounding(model, grpo_batch(model.config.vocab_size))


@pytest.mark.parametrize("which", ["qwen2", "llama"])
def test_bf16_autocast_is_within_the_plain_forwards_own_noise(tiny_model_dir: Path,
                                                              which: str) -> None:
    """Under bfloat16 autocast the packed forward is as close to the float32 forward as
    the plain bfloat16 forward is (bfloat16's own rounding noise, within 2×), for logits
    and every gradient; and it is not the plain bfloat16 result bit for bit (it ran)."""
    model = _model(which, tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    valid = batch["response_mask"].bool()
    exact, exact_grads = logits_and_grads(model, batch, model_logits)
    plain, plain_grads = logits_and_grads(model, batch, model_logits, torch.bfloat16)
    ours, grads = logits_and_grads(model, batch, packed, torch.bfloat16)
    noise = (plain - exact)[valid].abs().max().item()
    assert noise > 10 * 1e-5  # bfloat16 rounding, far above float32's
    assert (ours - exact)[valid].abs().max().item() <= 2 * noise
    for name, grad in exact_grads.items():
        bound = (plain_grads[name] - grad).abs().max().item()
        assert (grads[name] - grad).abs().max().item() <= 2 * bound + 1e-6, name


# ---- the trainer's path ----------------------------------------------------------------


def test_response_logprobs_takes_the_packed_path_where_it_applies(tiny_model_dir: Path) -> None:
    model = _qwen2(tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    shared, _ = response_logprobs(model, batch, device=torch.device("cpu"), shared_prompts=True)
    plain, _ = response_logprobs(model, batch, device=torch.device("cpu"))
    valid = batch["response_mask"].bool()
    torch.testing.assert_close(shared[valid], plain[valid], rtol=0, atol=1e-5)
    assert not torch.equal(shared[valid], plain[valid])  # the packed path ran
    assert uses_shared_prompts(model, batch, None)
    assert uses_shared_prompts(model, batch, torch.bfloat16)  # autocast packs too
    no_prompt = TensorBatch(0, dict(batch.tensors))
    assert not uses_shared_prompts(model, no_prompt, None)


def test_models_it_cannot_pack_keep_their_own_forward_and_say_why(
        tiny_model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    batch = grpo_batch(300)
    args = (batch["input_ids"], batch["attention_mask"], batch["position_ids"],
            batch.prompt_width)
    model = _qwen2(tiny_model_dir)
    model.config._attn_implementation = "flash_attention_2"
    assert fallback_reason(model, *args) == ("attention implementation 'flash_attention_2' "
                                             "is not sdpa or eager")
    with caplog.at_level(logging.INFO, logger="rft.trainer.packed_forward"):
        assert not uses_shared_prompts(model, batch, None)
        assert not uses_shared_prompts(model, batch, None)
    lines = [r.getMessage() for r in caplog.records if "prefix sharing off" in r.getMessage()]
    assert len(lines) == 1 and "flash_attention_2" in lines[0]  # one line per reason
    mistral = _mistral()
    mistral.config.sliding_window = 4
    assert fallback_reason(mistral, *args) == "rows longer than the sliding window (4)"


def test_the_probe_refuses_a_model_whose_positions_packing_cannot_express() -> None:
    """ALiBi (Bloom) derives positions from the 2-D mask's cumulative sum, not from
    ``position_ids``: its packed logits differ, the probe says so, the plain forward runs."""
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    bloom = BloomForCausalLM(BloomConfig(vocab_size=50, hidden_size=32, n_layer=1, n_head=2,
                                         attn_implementation="eager"))
    reason = probe_reason(bloom)
    assert reason is not None and "BloomForCausalLM" in reason
    model_args = grpo_batch(50)
    assert fallback_reason(bloom, model_args["input_ids"], model_args["attention_mask"],
                           model_args["position_ids"], model_args.prompt_width) == reason


def test_version_guard_names_the_old_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers
    from rft.trainer import packed_forward

    assert packed_forward.version_reason() is None
    monkeypatch.setattr(transformers, "__version__", "4.46.3")
    assert packed_forward.version_reason() == "transformers 4.46.3 < 4.53"
    monkeypatch.setattr(torch, "__version__", "2.4.1+cpu")
    assert packed_forward.version_reason() == "torch 2.4.1+cpu < 2.5"


def test_metric_entropy_shares_the_log_prob_logsumexp_bit_for_bit(tiny_model_dir: Path) -> None:
    """Entropy as a metric (no gradient) reuses the log-probs' ``logsumexp``: the same
    log-probs and entropies, bit for bit, as :func:`rft.ops.logprobs_from_logits` and
    :func:`rft.ops.entropy_from_logits` on the model's logits."""
    from rft.ops import entropy_from_logits, logprobs_from_logits

    model = _qwen2(tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    for temperature in (1.0, 0.7):
        logps, entropy = response_logprobs(model, batch, device=torch.device("cpu"),
                                           temperature=temperature, with_entropy=True,
                                           entropy_grad=False)
        assert logps.requires_grad and entropy is not None and not entropy.requires_grad
        logits = model_logits(model, batch).float() / temperature
        labels = batch["input_ids"][:, batch.prompt_width:]
        assert torch.equal(logps, logprobs_from_logits(logits, labels))
        assert torch.equal(entropy, entropy_from_logits(logits))
