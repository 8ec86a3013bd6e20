"""rft-plugin-sft: the loss is the mean token NLL (== cross-entropy on the response
tokens), and the preset after validation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from rft import ops
from rft.contracts import AggContext, PolicyLossInputs
from rft.plugins import PluginRegistry
from rft.testing.algorithms import SETTINGS, Batch, batches, close, validated
from rft.testing.checks import check_policy_loss
from rft.testing.strategies import policy_loss_inputs
from rft_plugin_sft import sft_loss

torch.set_num_threads(1)


@SETTINGS
@given(policy_loss_inputs())
def test_sft_keeps_the_policy_loss_contract(inputs: PolicyLossInputs) -> None:
    """Masking, finite gradients, micro-batches add up in every agg mode.
    ``zero_advantage_zero_loss=False``: the NLL does not use the advantages (the trainer
    passes zeros for SFT batches), so zero advantages leave it as it is."""
    check_policy_loss(sft_loss, None, inputs, zero_advantage_zero_loss=False)


@SETTINGS
@given(batches(min_tokens=1, max_b=6, max_t=8), st.integers(2, 30))
def test_token_mean_is_cross_entropy(batch: Batch, vocab: int) -> None:
    """``token-mean`` of the loss = ``F.cross_entropy`` over the masked tokens, in value
    and in gradient w.r.t. the logits; advantages and old log-probs play no part."""
    logits = batch.randn(batch.B, batch.T, vocab, scale=2.0).requires_grad_()
    labels = torch.randint(0, vocab, (batch.B, batch.T), generator=batch.gen)
    logps = ops.logprobs_from_logits(logits, labels)
    pg_loss, metrics = sft_loss(
        PolicyLossInputs(logps, batch.logps(), batch.randn(), batch.mask, AggContext()), None)
    ours = ops.agg_loss(pg_loss, batch.mask, "token-mean")
    keep = batch.mask.bool()
    ref = F.cross_entropy(logits[keep], labels[keep])
    close(ours, ref)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_ref,) = torch.autograd.grad(ref, logits)
    close(g_ours, g_ref)
    assert metrics == {}


def test_seq_mean_token_mean_averages_sequences() -> None:
    logps = torch.tensor([[-1.0, -3.0], [-2.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    pg_loss, _ = sft_loss(
        PolicyLossInputs(logps, logps, torch.zeros_like(logps), mask, AggContext()), None)
    assert ops.agg_loss(pg_loss, mask, "seq-mean-token-mean").item() == pytest.approx(2.0)
    assert ops.agg_loss(pg_loss, mask, "token-mean").item() == pytest.approx(6.0 / 3)


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "sft").distribution == "rft-plugin-sft"
    assert registry.registration("policy_loss_fn", "sft").distribution == "rft-plugin-sft"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "sft"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == (None, "sft", "none", "none", "none", "default", 1)
    preset = plan.preset
    assert preset.train_only and preset.experience_format == "sft"
    assert not preset.use_reference and not preset.use_critic
    assert plan.loss.advantage is None
