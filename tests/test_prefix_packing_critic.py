"""The critic's forward over prefix-tree packs (:func:`rft.trainer.models.response_values`
with ``shared_prompts``, ``trainer.prefix_sharing: auto``): each shared prompt runs once
through the value model, and the values of every response token and the gradients equal
the plain forward's (float32 within 1e-5)."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from fixtures_packing import grpo_batch, multi_turn_batch, shared_layouts
from rft.trainer.batching import TensorBatch
from rft.trainer.models import load_value_model, response_values

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _values_and_grads(critic: torch.nn.Module, batch: TensorBatch, shared: bool
                      ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The critic's values ``(B, R)`` and the gradients of a weighted sum of them over the
    valid response tokens."""
    critic.zero_grad()
    values = response_values(critic, batch, device=CPU, shared_prompts=shared)  # (B, R)
    valid = batch["response_mask"].bool()
    weights = torch.linspace(0.5, 1.5, values.numel()).reshape(values.shape)
    (values * weights * valid).sum().backward()
    grads = {k: p.grad.clone() for k, p in critic.named_parameters() if p.grad is not None}
    return values.detach(), grads


@pytest.mark.parametrize("rows", ["grpo", "multi_turn"])
def test_packed_critic_values_and_gradients_equal_the_plain_forward(
        tiny_model_dir: Path, rows: str, shared_layouts: list[str]) -> None:
    torch.manual_seed(0)
    critic = load_value_model(str(tiny_model_dir)).train()
    vocab = critic.config.vocab_size
    batch = grpo_batch(vocab) if rows == "grpo" else multi_turn_batch(vocab)
    valid = batch["response_mask"].bool()
    plain, plain_grads = _values_and_grads(critic, batch, shared=False)
    packed, grads = _values_and_grads(critic, batch, shared=True)
    assert packed.shape == plain.shape == valid.shape
    torch.testing.assert_close(packed[valid], plain[valid], rtol=0, atol=1e-5)
    # the shared path ran: prompt groups for GRPO rows, the prefix tree for turns
    assert shared_layouts[-1] == ("groups" if rows == "grpo" else "packs")
    assert grads.keys() == plain_grads.keys() and "score.weight" in grads
    for name, grad in plain_grads.items():
        scale = grad.abs().max().item()
        assert scale > 0, name
        assert (grads[name] - grad).abs().max().item() <= 1e-5 * scale, name


def test_prefix_sharing_off_keeps_the_critics_plain_forward(tiny_model_dir: Path) -> None:
    critic = load_value_model(str(tiny_model_dir)).eval()
    batch = grpo_batch(critic.config.vocab_size)
    with torch.no_grad():
        off = response_values(critic, batch, device=CPU)
        width = batch.response_width
        plain = critic(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits[:, -width - 1: -1, 0]
    assert torch.equal(off, plain)
