"""Batches, models and forwards shared by the prefix-packing tests
(``tests/test_prefix_packing.py``) and the two-rank worker they spawn (a module of its own,
so that ``torch.multiprocessing`` can import it in the child processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rft.trainer.batching import TensorBatch
from rft.trainer.packed_forward import packed_logits
from rft.trainer.prefix_tree import pack_rows
from rft.trainer.prompt_groups import group_rows, use_prompt_group_attention


def qwen2(tiny_model_dir: Path, **kwargs: Any) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), **kwargs).train()


def llama() -> torch.nn.Module:
    """A random Llama with biases on every projection and two query heads per key head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).train()


def mistral() -> torch.nn.Module:
    """A random Mistral (a third family: its own modelling code, sliding-window config)."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(4)
    config = MistralConfig(vocab_size=300, hidden_size=64, intermediate_size=96,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=16, sliding_window=64, attn_implementation="sdpa")
    return MistralForCausalLM(config).train()


def build_model(which: str, tiny_model_dir: Path) -> torch.nn.Module:
    return {"qwen2": lambda: qwen2(tiny_model_dir), "llama": llama,
            "mistral": mistral}[which]()


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
                     reply: int = 4, user: int = 3, seed: int = 0,
                     same_task: bool = False) -> TensorBatch:
    """``episodes`` episodes of ``turns`` turns, one row per turn: turn ``k``'s prompt is
    the episode's history (first prompt, then each earlier reply and user message), its
    response the turn's reply. Rows left-pad prompts and right-pad responses.
    ``same_task``: every episode starts from the same first prompt (a GRPO group)."""
    generator = torch.Generator().manual_seed(seed)
    rows: list[tuple[list[int], list[int]]] = []
    first = torch.randint(3, vocab, (prompt,), generator=generator).tolist()
    for _ in range(episodes):
        history = (list(first) if same_task else
                   torch.randint(3, vocab, (prompt,), generator=generator).tolist())
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
    """The prefix-tree packs' logits ``(B, R, V)`` (dense 4-D masks)."""
    layout = pack_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                       batch.prompt_width)
    return packed_logits(model, layout)


def grouped(model: torch.nn.Module, batch: TensorBatch) -> torch.Tensor:
    """The prompt groups' logits ``(B, R, V)`` (cascade attention; the model switched to
    it first)."""
    assert use_prompt_group_attention(model)
    groups = group_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                        batch.prompt_width)
    assert groups is not None
    return packed_logits(model, groups)


SHARED_FORWARDS = {"packs": packed, "groups": grouped}
"""The two shared-prefix layouts, by name (tests parametrize over them)."""


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
                             atol: float = 1e-5, forward: Any = packed) -> None:
    """``forward``'s logits (default: the prefix-tree packs) within ``atol`` of the plain
    ones, every gradient within ``atol`` of its largest element."""
    valid = batch["response_mask"].bool()
    reference, ref_grads = logits_and_grads(model, batch, model_logits)
    ours, grads = logits_and_grads(model, batch, forward)
    assert ours.shape == reference.shape and torch.isfinite(ours).all()
    torch.testing.assert_close(ours[valid], reference[valid], rtol=0, atol=atol)
    assert ref_grads.keys() == grads.keys() and ref_grads
    for name, grad in ref_grads.items():  # float32 sums in another order
        scale = grad.abs().max().item()
        assert scale > 0, name
        assert (grads[name] - grad).abs().max().item() <= atol * scale, name


def rank_worker(rank: int, port: int, model_dir: str, lora: bool, out: str) -> None:
    """One of two gloo ranks: the tiny Qwen2 sharded with FSDP2 (optionally with a LoRA
    adapter and gradient checkpointing), this rank's half of a GRPO batch through the plain
    and the packed forward; rank 0 saves both logits and full gradients to ``out``."""
    import torch.distributed as dist
    from rft.trainer.fsdp import shard_model
    from rft.trainer.parallel import RankGroup

    torch.set_num_threads(1)
    group = RankGroup.initialize(rank, 2, "127.0.0.1", port, torch.device("cpu"), 120.0)
    try:
        model = qwen2(Path(model_dir))
        if lora:
            from peft import LoraConfig, get_peft_model

            torch.manual_seed(5)
            model = get_peft_model(model, LoraConfig(
                r=4, lora_alpha=8, init_lora_weights=False,
                target_modules=["q_proj", "v_proj", "up_proj"])).train()
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        shard_model(model, group)
        batch = grpo_batch(model.config.vocab_size, prompts=4)  # 17 rows: 8 and 9
        rows = torch.arange(rank * 8, rank * 8 + 8 if rank == 0 else len(batch))
        mine = TensorBatch(batch.prompt_width, {k: v[rows] for k, v in batch.tensors.items()})
        results = {}
        for name, forward in (("plain", model_logits), ("packed", packed),
                              ("groups", grouped)):
            logits, grads = logits_and_grads(model, mine, forward)
            full = {k: (g.full_tensor() if hasattr(g, "full_tensor") else g)
                    for k, g in grads.items()}
            results[name] = (logits, full)
        if rank == 0:
            torch.save({"results": results, "valid": mine["response_mask"].bool()}, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture
def shared_layouts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The layouts the trainer's shared-prefix forwards ran, in order: ``"groups"``
    (:func:`rft.trainer.packed_forward.group_node_logits`) or ``"packs"``
    (:func:`~rft.trainer.packed_forward.packed_node_logits`) — the CPU's cascade attention
    can give the plain forward's values bit for bit, so equality does not tell."""
    import rft.trainer.packed_forward as packed_forward

    ran: list[str] = []
    for kind, name in (("groups", "group_node_logits"), ("packs", "packed_node_logits")):
        original = getattr(packed_forward, name)

        def recorded(*args: Any, _original: Any = original, _kind: str = kind,
                     **kwargs: Any) -> Any:
            ran.append(_kind)
            return _original(*args, **kwargs)

        monkeypatch.setattr(packed_forward, name, recorded)
    return ran
