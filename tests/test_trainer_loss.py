"""Loss assembly of the native trainer (:mod:`rft.trainer.loss`).

The total loss ``agg(pg) − entropy_term + kl_coef·agg(kl)`` is checked against a
hand-written formula for every aggregation mode, against veRL 0.9.1's own total actor loss
``verl.workers.utils.losses.ppo_loss`` (a hypothesis property test), and for micro-batch
additivity: the gradients of the micro-batch losses, normalised by the mini-batch's
counts, add up to the full-batch gradient. All in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rft.builtin.entropy import EntropyArgs, entropy_bonus, no_entropy
from rft.builtin.kl import KL_FNS, KLArgs
from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.config.validate import Selected
from rft.contracts import AdvantageInputs, PolicyLossInputs
from rft.errors import RftError
from rft.ops import LOSS_AGG_MODES
from rft.testing.algorithms import FEW, Batch, batches, close
from rft.config.plan import LossPlan
from rft.trainer.loss import (AggContext, LossInputs, actor_loss, apply_kl_penalty,
                              compute_advantages, policy_loss_term)

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
B, R = 6, 7


def sel(key: str, name: str, fn, args=None) -> Selected:
    return Selected(f"algorithm.{key}", name, fn, args)


def make_fns(mode: str, *, kl_coef: float = 0.1, entropy_coef: float = 0.01,
             kl: str = "low_var_kl") -> LossPlan:
    return LossPlan(
        policy_loss=sel("policy_loss_fn", "ppo", ppo_policy_loss,
                        PPOArgs(clip_range=0.2, clip_range_high=0.28, clip_ratio_c=3.0)),
        kl_loss=sel("kl_loss_fn", kl, KL_FNS[kl], KLArgs(kl_coef=kl_coef)),
        entropy=sel("entropy_loss_fn", "default", entropy_bonus, EntropyArgs(entropy_coef)),
        loss_agg_mode=mode)


@dataclass
class Tensors:
    logps: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor
    adv: torch.Tensor
    entropy: torch.Tensor
    mask: torch.Tensor


def tensors(seed: int = 0) -> Tensors:
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, R, generator=g, dtype=torch.float64) * 3
    logps = (old + 0.3 * torch.randn(B, R, generator=g, dtype=torch.float64)).requires_grad_()
    ref = old + 0.2 * torch.randn(B, R, generator=g, dtype=torch.float64)
    adv = torch.randn(B, R, generator=g, dtype=torch.float64)
    entropy = (torch.rand(B, R, generator=g, dtype=torch.float64) * 2).requires_grad_()
    lengths = torch.tensor([7, 3, 0, 5, 1, 6])  # one empty response
    mask = (torch.arange(R) < lengths[:, None]).double()
    return Tensors(logps, old, ref, adv, entropy, mask)


def hand_agg(x: torch.Tensor, mask: torch.Tensor, mode: str, n_tok: float, n_seq: float,
             scale: float) -> torch.Tensor:
    """The four aggregation formulas, written out."""
    if mode == "token-mean":
        return (x * mask).sum() / n_tok
    per_seq_sum = (x * mask).sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq_sum / (mask.sum(-1) + 1e-8)
        return per_seq.sum() / n_seq
    loss = per_seq_sum.sum() / n_seq
    return loss / scale if mode == "seq-mean-token-sum-norm" else loss


def hand_ppo(logps, old, adv, low=0.2, high=0.28, c=3.0):
    ratio = torch.exp(torch.clamp(logps - old, -20, 20))
    surrogate = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high))
    return torch.where(adv < 0, torch.minimum(surrogate, -adv * c), surrogate)


def hand_k3(logps, ref):
    r = torch.clamp(ref - logps, -20, 20)
    return torch.clamp(torch.exp(r) - r - 1, -10, 10)


def loss_of(fns: LossPlan, t: Tensors, rows: slice | list[int], agg: AggContext):
    return actor_loss(fns, LossInputs(log_prob=t.logps[rows], response_mask=t.mask[rows],
                                      old_log_prob=t.old[rows], advantages=t.adv[rows],
                                      entropy=t.entropy[rows], ref_log_prob=t.ref[rows]), agg)


@pytest.mark.parametrize("mode", MODES)
def test_total_loss_matches_hand_formula(mode: str) -> None:
    t = tensors()
    agg = AggContext.for_mini_batch(t.mask, mode, loss_scale_factor=float(R))
    out = loss_of(make_fns(mode), t, slice(None), agg)
    n_tok, n_seq = t.mask.sum().item(), float(B)  # veRL: every sequence counts in N_seq
    expected = (hand_agg(hand_ppo(t.logps, t.old, t.adv), t.mask, mode, n_tok, n_seq, R)
                - 0.01 * hand_agg(t.entropy, t.mask, mode, n_tok, n_seq, R)
                + 0.1 * hand_agg(hand_k3(t.logps, t.ref), t.mask, mode, n_tok, n_seq, R))
    torch.testing.assert_close(out.loss, expected, rtol=0, atol=1e-10)
    assert set(out.summed) == {"actor/pg_loss", "actor/entropy_loss", "actor/kl_loss"}
    assert {"actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl",
            "actor/kl_coef"} <= set(out.averaged)
    assert out.averaged["actor/kl_coef"] == 0.1


def verl_layout(values: torch.Tensor, prompt_lens: list[int], resp_lens: list[int]) -> torch.Tensor:
    """veRL's padding-free model output: per sequence ``prompt_len + resp_len`` entries, entry
    ``i`` scoring token ``i + 1``, so the response's scores sit at
    ``[prompt_len − 1, prompt_len + resp_len − 1)``; the rest is filler. ``values`` (B, R) →
    (Σ (prompt_len + resp_len),)."""
    pieces = []
    for row, (p_len, r_len) in enumerate(zip(prompt_lens, resp_lens)):
        pieces += [values.new_full((p_len - 1,), 7.0), values[row, :r_len], values.new_full((1,), 7.0)]
    return torch.cat(pieces)


@FEW
@given(batches(max_b=8, max_t=10), st.sampled_from(list(LOSS_AGG_MODES)),
       st.sampled_from(["none", "low_var_kl", "k1", "k2", "abs", "k3+"]),
       st.sampled_from([0.0, 0.01, 0.5]), st.sampled_from([0.0, 0.001, 0.1]),
       st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.5)]))
def test_total_loss_matches_verl_ppo_loss(batch: Batch, mode: str, kl: str, kl_coef: float,
                                           entropy_coef: float, clips: tuple[float, float]) -> None:
    """Our total actor loss equals ``verl.workers.utils.losses.ppo_loss`` (veRL 0.9.1's actor
    loss: vanilla dual-clip PPO − entropy_coeff·agg(entropy) + kl_loss_coef·agg(kl), with the
    global token / sequence counts) in value and in gradients w.r.t. the per-token logprobs
    and entropies. veRL's inputs are built in its own padding-free layout. Responses have
    right padding (veRL's layout has no holes); all-empty batches give NaN in veRL and 0 here."""
    from tensordict import TensorDict
    from verl.workers.config import ActorConfig
    from verl.workers.utils.losses import ppo_loss

    resp_lens = [int(n) for n in batch.mask.sum(-1)]
    mask = (torch.arange(batch.T) < torch.tensor(resp_lens)[:, None]).to(torch.float64)
    prompt_lens = torch.randint(1, 4, (batch.B,), generator=batch.gen).tolist()
    P = max(prompt_lens)
    old = batch.logps(2.0)
    logps = (old + 0.3 * batch.randn()).requires_grad_()
    ref = old + 0.2 * batch.randn()
    adv = batch.randn()
    entropy = (batch.randn().abs() * 2).requires_grad_()
    scale = float(batch.T)

    prompt_mask = (torch.arange(P) >= P - torch.tensor(prompt_lens)[:, None]).long()
    data = TensorDict({"prompts": torch.ones(batch.B, P, dtype=torch.long),
                       "responses": torch.ones(batch.B, batch.T, dtype=torch.long),
                       "attention_mask": torch.cat([prompt_mask, mask.long()], dim=1),
                       "response_mask": mask.long(), "old_log_probs": old, "advantages": adv,
                       "ref_log_prob": ref}, batch_size=[batch.B])
    data.set_non_tensor("dp_size", 1)
    data.set_non_tensor("batch_num_tokens", int(mask.sum()))
    data.set_non_tensor("global_batch_size", batch.B)
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=batch.B,
                         clip_ratio_low=clips[0], clip_ratio_high=clips[1], clip_ratio_c=3.0,
                         loss_agg_mode=mode, entropy_coeff=entropy_coef,
                         use_kl_loss=kl != "none", kl_loss_coef=kl_coef, kl_loss_type=kl,
                         loss_scale_factor=scale)
    output = {"log_probs": verl_layout(logps, prompt_lens, resp_lens),
              "entropy": verl_layout(entropy, prompt_lens, resp_lens)}
    theirs, their_metrics = ppo_loss(config, output, data)

    fns = LossPlan(
        policy_loss=sel("policy_loss_fn", "ppo", ppo_policy_loss,
                        PPOArgs(clip_range=clips[0], clip_range_high=clips[1], clip_ratio_c=3.0)),
        kl_loss=sel("kl_loss_fn", kl, KL_FNS[kl], KLArgs(kl_coef=kl_coef)),
        entropy=sel("entropy_loss_fn", "default", entropy_bonus, EntropyArgs(entropy_coef)),
        loss_agg_mode=mode)
    ours = actor_loss(fns, LossInputs(log_prob=logps, response_mask=mask, old_log_prob=old,
                                      advantages=adv, entropy=entropy, ref_log_prob=ref),
                      AggContext.for_mini_batch(mask, mode, loss_scale_factor=scale))
    if torch.isnan(theirs):
        assert mask.sum() == 0 and ours.loss.item() == 0.0
        return
    close(ours.loss, theirs)
    for key in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
        close(torch.as_tensor(ours.averaged[f"actor/{key}"]),
              float(their_metrics[f"actor/{key}"].aggregate()))
    g_ours = torch.autograd.grad(ours.loss, [logps, entropy], retain_graph=True, allow_unused=True)
    g_theirs = torch.autograd.grad(theirs, [logps, entropy], allow_unused=True)
    for a, b in zip(g_ours, g_theirs):
        close(torch.zeros_like(logps) if a is None else a,
              torch.zeros_like(logps) if b is None else b)


@pytest.mark.parametrize("mode", MODES)
def test_micro_batch_gradients_add_up(mode: str) -> None:
    t = tensors(2)
    fns = make_fns(mode)
    agg = AggContext.for_mini_batch(t.mask, mode, loss_scale_factor=float(R))
    full = loss_of(fns, t, slice(None), agg)
    g_full = torch.autograd.grad(full.loss, [t.logps, t.entropy])
    total = sum(loss_of(fns, t, rows, agg).loss for rows in ([0, 1], [2], [3, 4, 5]))
    g_micro = torch.autograd.grad(total, [t.logps, t.entropy])
    torch.testing.assert_close(total, full.loss, rtol=0, atol=1e-10)
    for a, b in zip(g_micro, g_full):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_no_entropy_no_kl_is_the_policy_loss() -> None:
    t = tensors(3)
    fns = LossPlan(policy_loss=sel("policy_loss_fn", "ppo", ppo_policy_loss, PPOArgs()),
                  kl_loss=sel("kl_loss_fn", "none", KL_FNS["none"], KLArgs()),
                  entropy=sel("entropy_loss_fn", "none", no_entropy))
    assert not fns.needs_ref and not fns.uses_entropy_loss
    out = actor_loss(fns, LossInputs(t.logps, t.mask, t.old, t.adv, entropy=t.entropy.detach()),
                     AggContext.for_mini_batch(t.mask, "token-mean"))
    expected = (hand_ppo(t.logps, t.old, t.adv, 0.2, 0.2) * t.mask).sum() / t.mask.sum()
    torch.testing.assert_close(out.loss, expected, rtol=0, atol=1e-10)
    assert "actor/kl_loss" not in out.summed and "actor/entropy_loss" in out.summed


def test_sft_loss_gets_detached_old_logps_and_zero_advantages() -> None:
    seen = {}

    def nll(inputs: PolicyLossInputs, args: None):
        seen.update(old=inputs.old_log_prob, adv=inputs.advantages)
        return -inputs.log_prob, {}

    t = tensors(4)
    fns = LossPlan(policy_loss=sel("policy_loss_fn", "test_sft", nll))
    out = actor_loss(fns, LossInputs(t.logps, t.mask), AggContext.for_mini_batch(t.mask, "token-mean"))
    torch.testing.assert_close(out.loss, -(t.logps * t.mask).sum() / t.mask.sum())
    assert not seen["old"].requires_grad and torch.equal(seen["old"], t.logps.detach())
    assert torch.count_nonzero(seen["adv"]) == 0


def test_sequence_level_policy_loss_hook() -> None:
    """A DPO-like loss declares ``needs_ref_log_prob``, reads ``inputs.ref_log_prob`` and
    ``inputs.agg.global_batch_size``, and returns a scalar, which is used as is (not
    aggregated again)."""
    received = {}

    @dataclass
    class PairArgs:
        beta: float = 0.5

    def pair_loss(inputs: PolicyLossInputs, args: PairArgs):
        n = inputs.agg.global_batch_size
        received.update(ref=inputs.ref_log_prob, n=n, beta=args.beta)
        seq = ((inputs.log_prob - inputs.ref_log_prob) * inputs.response_mask).sum(-1)
        margin = args.beta * (seq[0::2] - seq[1::2])
        return -torch.nn.functional.logsigmoid(margin).sum() / (n / 2), {}

    pair_loss.Args = PairArgs
    pair_loss.needs_ref_log_prob = True

    t = tensors(5)
    fns = LossPlan(policy_loss=sel("policy_loss_fn", "test_dpo", pair_loss, PairArgs()))
    assert fns.needs_ref
    agg = AggContext.for_mini_batch(t.mask, "token-mean")
    pg, _ = policy_loss_term(fns, LossInputs(t.logps, t.mask, ref_log_prob=t.ref), agg)
    assert received["n"] == B and received["beta"] == 0.5 and received["ref"] is t.ref
    assert pg.dim() == 0
    with pytest.raises(RftError, match="test_dpo.*ref_log_prob"):
        policy_loss_term(fns, LossInputs(t.logps, t.mask), agg)


def test_mix_loss_receives_the_expert_rows() -> None:
    """The real ``mix`` policy loss gets ``is_expert_mask`` and weighs expert rows by the
    SFT term: with every row expert and mu=1 it is the mean token NLL."""
    from rft_plugin_mix import MixArgs, mix_policy_loss

    t = tensors(6)
    fns = LossPlan(policy_loss=sel("policy_loss_fn", "mix", mix_policy_loss, MixArgs(mu=1.0)))
    agg = AggContext.for_mini_batch(t.mask, "token-mean")
    experts = torch.ones(t.mask.shape[0], dtype=torch.bool)
    pg, _ = policy_loss_term(fns, LossInputs(t.logps, t.mask, is_expert_mask=experts), agg)
    torch.testing.assert_close(pg, -(t.logps * t.mask).sum() / t.mask.sum())
    rl_only, _ = policy_loss_term(fns, LossInputs(t.logps, t.mask), agg)
    assert not torch.allclose(pg, rl_only)


def test_policy_loss_of_wrong_shape_is_named() -> None:
    fns = LossPlan(policy_loss=sel("policy_loss_fn", "bad",
                                  lambda inputs, args: (inputs.log_prob[:, :2], {})))
    t = tensors()
    with pytest.raises(RftError, match=r"algorithm.policy_loss_fn: 'bad' returned a loss of shape"):
        actor_loss(fns, LossInputs(t.logps, t.mask), AggContext.for_mini_batch(t.mask, "token-mean"))


def test_kl_penalty_in_reward() -> None:
    t = tensors(6)
    scores = torch.zeros(B, R, dtype=torch.float64)
    scores[:, -1] = 1.0
    selected = sel("kl_penalty_fn", "k1", KL_FNS["k1"], KLArgs(kl_coef=0.05))
    rewards, metrics = apply_kl_penalty(scores, t.old, t.ref, t.mask, selected)
    kl = (t.old - t.ref) * t.mask
    torch.testing.assert_close(rewards, scores - 0.05 * kl)
    per_seq = kl.sum(-1) / (t.mask.sum(-1) + 1e-8)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(per_seq.mean().item())
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.05


def test_advantage_fn_gets_typed_inputs() -> None:
    from rft_plugin_grpo import GRPOArgs, grpo_advantages
    from rft_plugin_ppo import gae_advantages

    t = tensors(7)
    rewards = torch.zeros(B, R, dtype=torch.float64)
    rewards[:, 0] = torch.arange(B, dtype=torch.float64)
    index = ["a", "a", "b", "b", "c", "c"]
    inputs = AdvantageInputs(token_level_rewards=rewards, response_mask=t.mask, index=index)
    adv, ret = compute_advantages(sel("advantage_fn", "grpo", grpo_advantages,
                                      GRPOArgs(norm_adv_by_std_in_grpo=False)),
                                  inputs)
    expected = torch.tensor([-0.5, 0.5] * 3, dtype=torch.float64)[:, None] * t.mask
    torch.testing.assert_close(adv, expected.float())
    with pytest.raises(RftError, match=r"algorithm.advantage_fn: 'gae' needs values"):
        compute_advantages(sel("advantage_fn", "gae", gae_advantages), inputs)
