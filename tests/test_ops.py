"""Properties of rft's loss maths that need no veRL twin: micro-batch additivity of
``agg_loss``, empty masks, argument errors, the KL / entropy / policy-loss plugins and the
group segment helpers of :mod:`rft.group_ops`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft import ops
from rft import group_ops
from rft.builtin import entropy, kl, policy_loss
from rft.contracts import AggContext, EntropyInputs, KLInputs, PolicyLossInputs
from rft.plugins import PluginRegistry, args_type_of

torch.set_num_threads(1)

SETTINGS = settings(max_examples=40, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _batch(seed: int, B: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    loss_mat = torch.randn(B, T, generator=gen, dtype=torch.float64)
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    mask = (torch.arange(T) < lengths[:, None]).to(torch.float64)
    return loss_mat, mask


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 16), st.integers(1, 12),
       st.sampled_from(ops.LOSS_AGG_MODES), st.integers(1, 5))
def test_micro_batch_losses_add_up_to_the_mini_batch_loss(
        seed: int, B: int, T: int, mode: str, num_micro: int) -> None:
    """With the mini-batch's token and sequence counts passed to every micro-batch, the
    micro-batch losses (and so the accumulated gradients) sum to the mini-batch loss."""
    loss_mat, mask = _batch(seed, B, T)
    loss_mat.requires_grad_()
    counts = {"batch_num_tokens": mask.sum(),
              "global_batch_size": (mask.sum(-1) > 0).sum()}
    whole = ops.agg_loss(loss_mat, mask, mode)
    parts = [ops.agg_loss(l, m, mode, **counts)
             for l, m in zip(loss_mat.chunk(num_micro), mask.chunk(num_micro), strict=True)]
    total = torch.stack(parts).sum()
    torch.testing.assert_close(total, whole, atol=1e-10, rtol=1e-10)
    (g_whole,) = torch.autograd.grad(whole, loss_mat)
    (g_parts,) = torch.autograd.grad(total, loss_mat)
    torch.testing.assert_close(g_parts, g_whole, atol=1e-10, rtol=1e-10)


def test_token_sum_and_token_mean() -> None:
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert ops.agg_loss(loss_mat, mask, "token-sum").item() == 7.0
    assert ops.agg_loss(loss_mat, mask, "token-sum", dp_size=4).item() == 28.0
    assert ops.agg_loss(loss_mat, mask, "token-mean").item() == pytest.approx(7 / 3)
    assert ops.agg_loss(loss_mat, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    assert ops.agg_loss(loss_mat, mask, "seq-mean-token-mean").item() == pytest.approx(
        (1.5 + 4.0) / 2)
    assert ops.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm").item() == pytest.approx(3.5 / 3)
    assert ops.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm",
                        loss_scale_factor=7).item() == pytest.approx(0.5)


def test_nan_outside_the_mask_does_not_leak() -> None:
    loss_mat = torch.tensor([[1.0, float("nan")], [2.0, float("inf")]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    assert ops.agg_loss(loss_mat, mask, "token-mean").item() == 1.5
    assert ops.masked_mean(loss_mat, mask).item() == pytest.approx(1.5)


@pytest.mark.parametrize("mode", ops.LOSS_AGG_MODES)
def test_empty_mask_gives_zero_loss_and_zero_gradient(mode: str) -> None:
    loss_mat = torch.randn(3, 4, requires_grad=True)
    loss = ops.agg_loss(loss_mat, torch.zeros(3, 4), mode)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.all(loss_mat.grad == 0)


def test_agg_loss_argument_errors() -> None:
    x = torch.ones(2, 2)
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'token-avg'"):
        ops.agg_loss(x, x, "token-avg")
    with pytest.raises(ValueError, match="batch_num_tokens"):
        ops.agg_loss(x, x, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="global_batch_size"):
        ops.agg_loss(x, x, "seq-mean-token-mean", dp_size=2)


def test_logprobs_from_logits_in_bfloat16_goes_through_log_softmax() -> None:
    logits = torch.randn(2, 3, 11)
    labels = torch.randint(0, 11, (2, 3))
    full = ops.logprobs_from_logits(logits, labels)
    low = ops.logprobs_from_logits(logits.bfloat16(), labels)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), full, atol=0.1, rtol=0.05)


# --------------------------------------------------------------------------------------
# KL / entropy / policy loss plugins
# --------------------------------------------------------------------------------------


def test_builtin_plugins_are_registered() -> None:
    registry = PluginRegistry.create(autoload=False)
    assert set(registry.names("kl_fn")) == set(kl.KL_FNS)
    assert {"none", "k1", "k2", "k3", "low_var_kl", "abs", "k3+", "low_var_kl+"} <= set(
        registry.names("kl_fn"))
    assert registry.names("entropy_loss_fn") == ["default", "mix", "none"]
    assert "ppo" in registry.names("policy_loss_fn")
    assert registry.get("kl_fn", "low_var_kl") is kl.k3


@pytest.mark.parametrize("implementation", [
    kl.k3, kl.KL_FNS["k3+"], entropy.entropy_bonus, policy_loss.ppo_policy_loss])
def test_args_dataclasses_have_defaults(implementation: object) -> None:
    args_type = args_type_of(implementation)
    assert dataclasses.is_dataclass(args_type)
    args = args_type()  # every field has a default
    assert dataclasses.asdict(args)


def test_policy_loss_is_called_with_its_inputs_and_args() -> None:
    """``ppo_policy_loss(PolicyLossInputs(...), PPOArgs(...))`` is how a trainer calls it."""
    x = torch.zeros(2, 3)
    args = policy_loss.PPOArgs(clip_range_low=0.2, clip_range_high=0.28)
    pg_loss, metrics = policy_loss.ppo_policy_loss(
        PolicyLossInputs(x, x, x + 1, x + 1, AggContext()), args)
    assert pg_loss.shape == (2, 3)
    assert set(metrics) == {"pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"}


@pytest.mark.parametrize("name", ["k1", "abs", "k3", "low_var_kl"])
def test_straight_through_kl_has_the_value_of_its_estimator_and_the_gradient_of_k2(name: str) -> None:
    logp = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    ref = torch.randn(4, 5, dtype=torch.float64)
    inputs, args = KLInputs(logp, ref), kl.KLArgs()
    plus = kl.KL_FNS[f"{name}+"](inputs, args)
    torch.testing.assert_close(plus, kl.KL_FNS[name](inputs, args))
    (g_plus,) = torch.autograd.grad(plus.sum(), logp)
    (g_k2,) = torch.autograd.grad(kl.k2(inputs, args).sum(), logp)
    torch.testing.assert_close(g_plus, g_k2)


def test_no_entropy_is_a_zero_scalar() -> None:
    term = entropy.no_entropy(EntropyInputs(torch.ones(2, 2, dtype=torch.float64),
                                            torch.ones(2, 2), AggContext()), None)
    assert term.shape == () and term.item() == 0.0 and term.dtype == torch.float64


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", 0.5 * (1 + 2 + 6) / 6),                  # over the batch's 6 tokens
    ("seq-mean-token-mean", 0.5 * ((1 + 2) / 2 + 6) / 3),   # over the batch's 3 rows
    ("token-sum", 0.5 * (1 + 2 + 6)),
])
def test_mix_entropy_counts_rollout_rows_only(mode: str, expected: float) -> None:
    """``mix`` (Trinity-RFT's entropy bonus of mix): row 1 is expert data and adds nothing;
    the rollout rows' entropy is aggregated with the trainer's counts (all rows)."""
    ent = torch.tensor([[1.0, 2.0, 9.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]],
                       dtype=torch.float64, requires_grad=True)  # (B, T)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    agg = AggContext.for_mini_batch(mask, mode)  # 6 tokens, 3 rows
    inputs = EntropyInputs(ent, mask, agg, torch.tensor([False, True, False]))
    term = entropy.rollout_entropy_bonus(inputs, entropy.EntropyArgs(entropy_coef=0.5))
    torch.testing.assert_close(term, torch.tensor(expected, dtype=torch.float64))
    (grad,) = torch.autograd.grad(term, ent)
    assert grad[1].abs().sum() == 0 and grad[0, 0] > 0
    no_expert = dataclasses.replace(inputs, is_expert_mask=None)  # every row a rollout
    args = entropy.EntropyArgs(entropy_coef=0.5)
    torch.testing.assert_close(entropy.rollout_entropy_bonus(no_expert, args),
                               entropy.entropy_bonus(no_expert, args))
    all_expert = dataclasses.replace(inputs, is_expert_mask=torch.ones(3, dtype=torch.bool))
    assert entropy.rollout_entropy_bonus(all_expert, args).item() == 0.0


# --------------------------------------------------------------------------------------
# Group segment helpers (the advantages themselves are tested in their plugins)
# --------------------------------------------------------------------------------------


def test_group_ids_accept_tensors_arrays_and_lists() -> None:
    expected = [0, 1, 0, 2]
    assert group_ops.group_ids(torch.tensor([7, 9, 7, 11])).tolist() == expected
    assert group_ops.group_ids(np.array(["a", "b", "a", "c"])).tolist() == expected
    assert group_ops.group_ids(["b", "a", "b", "c"]).tolist() == [1, 0, 1, 2]
    assert group_ops.group_ids(np.array([("x", 1), "y", ("x", 1)], dtype=object)).tolist() == [0, 1, 0]


def test_group_stats_and_segments() -> None:
    ids = group_ops.group_ids(["a", "b", "a", "a", "c"])
    scores = torch.tensor([1.0, 5.0, 2.0, 6.0, 7.0], dtype=torch.float64)
    counts, mean, std = group_ops.group_stats(scores, ids)
    assert counts.tolist() == [3, 1, 3, 3, 1]
    assert mean.tolist() == pytest.approx([3.0, 5.0, 3.0, 3.0, 7.0])
    assert std.tolist() == pytest.approx([7 ** 0.5, 0.0, 7 ** 0.5, 7 ** 0.5, 0.0])
    assert group_ops.segment_sum(scores, ids, 3).tolist() == [9.0, 5.0, 7.0]
    assert group_ops.segment_max(scores, ids, 3).tolist() == [6.0, 5.0, 7.0]
    assert group_ops.group_counts(ids).tolist() == [3, 1, 3, 3, 1]
    assert group_ops.num_groups(torch.zeros(0, dtype=torch.long)) == 0


def test_known_providers_match_the_installed_algorithm_plugins() -> None:
    """Every name an installed algorithm distribution registers is in the install-hint
    table under that distribution, and every table entry of an installed one is real."""
    import importlib.metadata as metadata

    from rft.plugins import KINDS, plugin_catalog

    registry = PluginRegistry.create()
    catalog = plugin_catalog()
    algorithm_distributions = {catalog.providers[key] for key in catalog.providers
                               if key[0] == "algorithm"}
    for distribution in sorted(algorithm_distributions):
        try:
            metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
        registered = {(kind, name) for kind in KINDS for name in registry.names(kind)
                      if registry.registration(kind, name).distribution == distribution}
        listed = {key for key, value in catalog.providers.items() if value == distribution}
        assert registered == listed, (distribution, registered ^ listed)


# ---- the expected entropy signal (Clip_V's N) --------------------------------------------


def test_expected_entropy_signal_is_the_mean_entropy_signal_under_the_policy() -> None:
    """``N = H Σ p² + Σ p² log p`` equals a direct loop over the vocabulary and equals
    ``E_{v~p}[S_v]`` with ``S_v = p_v (H + log p_v)``; bfloat16 logits are computed in
    float32."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=gen, dtype=torch.float64) * 3  # (B, T, V)
    got = ops.expected_entropy_signal_from_logits(logits)  # (B, T)
    assert got.shape == (2, 3) and got.dtype == torch.float64
    for b in range(2):
        for t in range(3):
            probs = [float(x) for x in torch.softmax(logits[b, t], dim=-1)]
            h = -sum(p * np.log(p) for p in probs)
            direct = h * sum(p * p for p in probs) + sum(p * p * np.log(p) for p in probs)
            signals = [p * (h + np.log(p)) for p in probs]  # S_v
            expected = sum(p * s for p, s in zip(probs, signals, strict=True))
            assert got[b, t].item() == pytest.approx(direct, abs=1e-12)
            assert got[b, t].item() == pytest.approx(expected, abs=1e-12)
    uniform = ops.expected_entropy_signal_from_logits(torch.zeros(4, 5))  # S_v = 0 for all v
    assert torch.allclose(uniform, torch.zeros(4), atol=1e-7)
    low = ops.expected_entropy_signal_from_logits(logits.to(torch.bfloat16))
    assert low.dtype == torch.float32
    assert torch.allclose(low.double(), got, atol=2e-2)
