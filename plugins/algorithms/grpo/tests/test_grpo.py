"""rft-plugin-grpo: veRL 0.9.1 equivalence (hypothesis, float64), hand-computed cases,
the preset after validation, and the registry entries."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from rft.config.plan import Selected
from rft.contracts import AdvantageInputs, MissingInputError
from rft.errors import RftError
from rft.trainer.loss import advantages_and_mask
from rft.plugins import PluginRegistry
from rft.testing.algorithms import (REWARD_KINDS, SETTINGS, Batch, batches, close, rewards_for,
                                    validated)
from rft.testing.checks import assert_equals_verl, check_advantage
from rft.testing.strategies import advantage_inputs
from rft_plugin_grpo import (ClipBArgs, ClipVArgs, GRPOArgs, GRPONoStdArgs, clipb_advantages,
                             clipv_advantages, grpo_advantages, grpo_no_std_advantages,
                             opo_advantages)

torch.set_num_threads(1)


# ---- the advantage contract (rft.testing.checks) ---------------------------------------


@SETTINGS
@given(advantage_inputs(), st.sampled_from([1e-6, 1e-2]))
def test_every_registered_fn_keeps_the_contract(inputs: AdvantageInputs, epsilon: float) -> None:
    """Finite (B, T) outputs, zero on padding, no gradient, and invariant to a constant
    added to a group's rewards (singletons use a fixed baseline, ``μ = 0``, and are left
    out by the check). GRPO with the std is also scale invariant, up to ``ε / σ`` (checked
    with the default ``ε``)."""
    check_advantage(grpo_advantages, GRPOArgs(), inputs, shift_invariant=True,
                    scale_invariant=True)
    check_advantage(grpo_advantages, GRPOArgs(epsilon=epsilon), inputs, shift_invariant=True)
    check_advantage(grpo_advantages, GRPOArgs(epsilon, norm_adv_by_std_in_grpo=False), inputs,
                    shift_invariant=True)
    check_advantage(grpo_no_std_advantages, GRPONoStdArgs(epsilon=epsilon), inputs,
                    shift_invariant=True)
    check_advantage(opo_advantages, None, inputs, shift_invariant=True)


# ---- veRL equivalence ----------------------------------------------------------------


@SETTINGS
@given(advantage_inputs(), st.booleans(), st.sampled_from([1e-6, 1e-2]))
def test_grpo_equals_verl(inputs: AdvantageInputs, norm_by_std: bool, epsilon: float) -> None:
    """GRPO and Dr.GRPO (``norm_adv_by_std_in_grpo=False``), singletons (``μ=0, σ=1``)
    and constant-reward groups included; group ids as strings (veRL's uids), lists and
    non-contiguous integer tensors (the strategy draws the form)."""
    verl = {"epsilon": epsilon, "norm_adv_by_std_in_grpo": norm_by_std}
    args = GRPOArgs(epsilon=epsilon, norm_adv_by_std_in_grpo=norm_by_std)
    assert_equals_verl(grpo_advantages, args, "compute_grpo_outcome_advantage", inputs, **verl)
    if not norm_by_std:
        assert_equals_verl(grpo_no_std_advantages, GRPONoStdArgs(epsilon=epsilon),
                           "compute_grpo_outcome_advantage", inputs, **verl)


@SETTINGS
@given(batches(max_b=24), REWARD_KINDS)
def test_opo_equals_verl(batch: Batch, kind: str) -> None:
    """OPO's length-weighted baseline.

    Divergence: when every response of a group (of two or more) is empty, veRL's baseline
    is 0/0 = NaN, which the zero mask does not remove (NaN·0 = NaN); rft's baseline is 0
    there, so those rows are 0. Checked explicitly; all other rows must match."""
    from verl.trainer.ppo import core_algos
    rewards = rewards_for(batch, kind)
    ref_adv, ref_ret = core_algos.compute_opo_outcome_advantage(
        rewards.clone(), batch.mask, batch.groups)
    ours, returns = opo_advantages(AdvantageInputs(rewards, batch.mask, batch.groups), None)
    nan_rows = torch.isnan(ref_adv).any(dim=-1)
    if nan_rows.any():
        event("veRL NaN rows (all-empty group)")
        assert torch.all(batch.mask[nan_rows] == 0)
        assert torch.all(ours[nan_rows] == 0)
    close(ours[~nan_rows], ref_adv[~nan_rows])
    close(returns[~nan_rows], ref_ret[~nan_rows])


# ---- by hand -------------------------------------------------------------------------


def test_grpo_by_hand() -> None:
    rewards = torch.zeros(5, 3, dtype=torch.float64)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0, 2.0])
    mask = torch.ones(5, 3, dtype=torch.float64)
    mask[1, 2] = 0.0
    index = ["a", "a", "b", "b", "c"]  # a: {1, 0}; b: constant; c: singleton
    inputs = AdvantageInputs(rewards, mask, index)
    advantages, returns = grpo_advantages(inputs, GRPOArgs())
    std = 2 ** -0.5
    assert advantages[:, 0].tolist() == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0, 2.0],
                                                      rel=1e-5)
    assert advantages[1, 2].item() == 0.0
    assert returns is advantages
    dr, _ = grpo_advantages(inputs, GRPOArgs(norm_adv_by_std_in_grpo=False))
    assert dr[:, 0].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0, 2.0])
    no_std, _ = grpo_no_std_advantages(inputs, GRPONoStdArgs())
    assert torch.equal(no_std, dr)


def test_opo_by_hand() -> None:
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [3.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    adv, _ = opo_advantages(AdvantageInputs(rewards, mask, [0, 0, 1]), None)
    baseline = (2 * 1.0 + 1 * 0.0) / 3  # length-weighted mean of group 0
    assert adv[:, 0].tolist() == pytest.approx([1 - baseline, -baseline, 3.0])


# ---- preset and registry -------------------------------------------------------------


def test_registered_by_this_distribution() -> None:
    registry = PluginRegistry.create()
    assert registry.registration("algorithm", "grpo").distribution == "rft-plugin-grpo"
    for name in ("grpo", "grpo_no_std", "opo"):
        assert registry.registration("advantage_fn", name).distribution == "rft-plugin-grpo"


def test_preset_fills_defaults(tmp_path) -> None:
    algorithm, plan = validated({"algorithm_type": "grpo"}, str(tmp_path))
    assert (algorithm.advantage_fn, algorithm.policy_loss_fn, algorithm.kl_loss_fn,
            algorithm.kl_penalty_fn, algorithm.entropy_loss_fn, algorithm.sample_strategy,
            algorithm.repeat_times) == ("grpo", "ppo", "k2", "none", "default", "default", 2)
    args = plan.loss.advantage.args
    assert (args.epsilon, args.norm_adv_by_std_in_grpo) == (1e-6, True)
    assert plan.preset.use_reference and not plan.preset.use_critic


def test_user_values_win_and_repeat_times_is_checked(tmp_path) -> None:
    algorithm, plan = validated(
        {"algorithm_type": "grpo", "repeat_times": 8, "advantage_fn": "grpo_no_std",
         "kl_loss_fn": "none"}, str(tmp_path))
    assert (algorithm.repeat_times, algorithm.advantage_fn, algorithm.kl_loss_fn) == (
        8, "grpo_no_std", "none")
    assert plan.loss.advantage.args.norm_adv_by_std_in_grpo is False
    from rft.errors import ConfigError

    with pytest.raises(ConfigError, match="repeat_times >= 2"):
        validated({"algorithm_type": "grpo", "repeat_times": 1}, str(tmp_path))


def test_std_threshold_zeroes_groups_without_signal():
    """Trinity-RFT's ``std_threshold``: a group whose reward std is at most τ gets zero
    advantage; other groups and singletons are unchanged."""
    rewards = torch.tensor([[1.0], [1.0], [0.0], [1.0], [0.5]], dtype=torch.float64)  # (B, 1)
    mask = torch.ones_like(rewards)
    index = ["a", "a", "b", "b", "c"]
    plain, _ = grpo_advantages(AdvantageInputs(rewards, mask, index), GRPOArgs())
    gated, _ = grpo_advantages(AdvantageInputs(rewards, mask, index),
                               GRPOArgs(std_threshold=0.1))
    assert torch.equal(gated[:2], torch.zeros(2, 1, dtype=torch.float64))  # std 0 ≤ 0.1
    assert torch.equal(gated[2:], plain[2:])  # std 0.707 > 0.1, and the singleton
    assert gated[2:4].abs().sum() > 0


# ---- clipb (Trinity-RFT's Clip_B entropy control) ---------------------------------------


def _clipb_inputs(entropy: torch.Tensor | None = None) -> AdvantageInputs:
    """Two groups of two rows, two tokens each: rows 1 and 2 have negative advantages.
    Every token has ``p = 0.5, H = log 2`` (``S = 0``) except row 0 token 1 (positive
    advantage) and row 1 token 0 (negative) with ``p = 0.9, H = 0`` (``S = 0.9 log 0.9``)."""
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0]],
                           dtype=torch.float64)  # (B, T)
    log_p = torch.full((4, 2), math.log(0.5), dtype=torch.float64)  # (B, T)
    h = torch.full((4, 2), math.log(2.0), dtype=torch.float64)  # (B, T)
    for row, col in ((0, 1), (1, 0)):
        log_p[row, col], h[row, col] = math.log(0.9), 0.0
    return AdvantageInputs(rewards, torch.ones_like(rewards), ["g1", "g1", "g2", "g2"],
                           rollout_log_prob=log_p, entropy=h if entropy is None else entropy)


def test_clipb_by_hand() -> None:
    """``S = p (H + log p)``; μ_S, σ_S over the 8 tokens (population std); a negative-
    advantage token with ``S − μ_S < −μ σ_S`` leaves the mask, a positive one never does."""
    inputs = _clipb_inputs()
    s_low = 0.9 * math.log(0.9)
    mean = 2 * s_low / 8
    std = math.sqrt((2 * (s_low - mean) ** 2 + 6 * mean ** 2) / 8)
    assert s_low - mean < -1.0 * std < -mean  # μ = 1 drops row 1 token 0 only
    advantages, returns, kept = clipb_advantages(inputs, ClipBArgs(mu=1.0))
    grpo, _ = grpo_advantages(inputs, GRPOArgs())
    close(advantages, grpo)
    assert torch.equal(returns, advantages)
    assert advantages[0, 1] > 0 and advantages[1, 0] < 0
    assert kept.tolist() == [[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    _, _, kept = clipb_advantages(inputs, ClipBArgs(mu=2.5))  # Trinity-RFT's default μ
    assert kept.tolist() == [[1.0] * 2] * 4
    flat = _clipb_inputs(entropy=-torch.log(torch.full((4, 2), 0.5, dtype=torch.float64)))
    flat = dataclasses.replace(flat, rollout_log_prob=torch.full((4, 2), math.log(0.5),
                                                                 dtype=torch.float64))
    _, _, kept = clipb_advantages(flat, ClipBArgs(mu=0.0))  # σ_S = 0: every token kept
    assert kept.tolist() == [[1.0] * 2] * 4


@SETTINGS
@given(advantage_inputs())
def test_clipb_advantages_equal_verls_grpo(inputs: AdvantageInputs) -> None:
    """Clip_B's advantages are veRL's GRPO advantages; only the mask is its own."""
    shape = inputs.response_mask.shape
    gen = torch.Generator().manual_seed(shape[0] * 31 + shape[1])
    inputs = dataclasses.replace(
        inputs, rollout_log_prob=-torch.rand(shape, generator=gen, dtype=torch.float64) * 4,
        entropy=torch.rand(shape, generator=gen, dtype=torch.float64) * 3)

    def advantages_only(inputs: AdvantageInputs, args: ClipBArgs):
        advantages, returns, kept = clipb_advantages(inputs, args)
        assert bool((kept <= inputs.response_mask).all())
        return advantages, returns

    assert_equals_verl(advantages_only, ClipBArgs(epsilon=1e-6, mu=0.5),
                       "compute_grpo_outcome_advantage", inputs, epsilon=1e-6,
                       norm_adv_by_std_in_grpo=True)


def test_clipb_needs_entropies_and_validates_as_trinitys_example(tmp_path) -> None:
    """Trinity-RFT's examples/entropy/clipb.yaml: ``advantage_fn: clipb`` with
    ``advantage_fn_args: {mu: 2.5}``; a batch without entropies is one line."""
    algorithm, plan = validated({"algorithm_type": "grpo", "advantage_fn": "clipb",
                                 "advantage_fn_args": {"mu": 2.5}}, str(tmp_path))
    assert plan.loss.advantage.args == ClipBArgs(mu=2.5) and algorithm.advantage_fn == "clipb"
    assert PluginRegistry.create().registration("advantage_fn", "clipb").distribution == \
        "rft-plugin-grpo"
    with pytest.raises(MissingInputError, match="clipb needs entropy"):
        clipb_advantages(dataclasses.replace(_clipb_inputs(), entropy=None), ClipBArgs())


def test_clipb_drops_tokens_from_the_trainers_mask() -> None:
    """The trainer's rule (:func:`rft.trainer.loss.advantages_and_mask`) hands the kept
    mask on; a mask keeping a padded token is refused in one line."""
    selected = Selected("algorithm.advantage_fn", "clipb", clipb_advantages, ClipBArgs(mu=1.0))
    inputs = _clipb_inputs()
    _, _, kept = advantages_and_mask(selected, inputs)
    assert kept.sum().item() == 7 and kept[1, 0] == 0

    def keeps_padding(inputs, args):
        return inputs.response_mask * 0, inputs.response_mask * 0, torch.ones_like(
            inputs.response_mask)
    padded = dataclasses.replace(inputs, response_mask=torch.tensor(
        [[1.0, 0.0]] * 4, dtype=torch.float64))
    with pytest.raises(RftError, match="^algorithm.advantage_fn: 'bad' returned a response_mask "
                                       "that keeps tokens the input mask drops$"):
        advantages_and_mask(Selected("algorithm.advantage_fn", "bad", keeps_padding, None),
                            padded)


# ---- clipv (Trinity-RFT's Clip_V entropy control) ---------------------------------------


def _clipv_inputs(deviation: list[list[float]]) -> AdvantageInputs:
    """Three groups of two rows, two tokens each: row 0 and 3 have positive advantages,
    rows 1 and 2 negative ones, rows 4 and 5 (equal rewards) zero. Every token has
    ``p = 0.5, H = log 2`` (``S = 0``), so ``D = N`` is ``deviation``."""
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.5],
                            [0.0, 0.5]], dtype=torch.float64)  # (B, T)
    return AdvantageInputs(
        rewards, torch.ones_like(rewards), ["g1", "g1", "g2", "g2", "g3", "g3"],
        old_log_prob=torch.full((6, 2), math.log(0.5), dtype=torch.float64),
        entropy=torch.full((6, 2), math.log(2.0), dtype=torch.float64),
        expected_entropy_signal=torch.tensor(deviation, dtype=torch.float64))


D_BY_HAND = [[10.0, 0.0], [10.0, 0.0], [5.0, 0.0], [0.0, 0.0], [10.0, 0.0], [0.0, 0.0]]
"""``D`` of :func:`_clipv_inputs`: μ_D = 35/12, σ_D = sqrt(325/12 − μ_D²) ≈ 4.31."""


def test_clipv_by_hand() -> None:
    """``D = N − S`` compared with ``μ σ_D`` itself (not centred: row 2's ``D = 5`` is
    dropped although ``5 − μ_D < σ_D``); tokens with ``A = 0`` take the negative test,
    positive ones always stay."""
    inputs = _clipv_inputs(D_BY_HAND)
    mean = 35 / 12
    std = math.sqrt(325 / 12 - mean ** 2)
    assert 5 - mean < std < 5  # μ = 1 separates "D" from "D − μ_D"
    advantages, returns, kept = clipv_advantages(inputs, ClipVArgs(mu=1.0, max_frac=1.0))
    close(advantages, grpo_advantages(inputs, GRPOArgs())[0])
    assert torch.equal(returns, advantages)
    assert [row[0] > 0 for row in advantages.tolist()] == [True, False, False, True, False,
                                                           False]
    assert advantages[4:].abs().max() == 0  # the equal-reward group
    assert kept.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0],
                             [1.0, 1.0]]
    _, _, kept = clipv_advantages(inputs, ClipVArgs(max_frac=1.0))  # μ = 8.5: 36.6 > 10
    assert kept.tolist() == [[1.0] * 2] * 6
    # S enters as N − S: only row 1 token 0 has S ≠ 0 (p = 0.9, H = 0), so D = −S > 0 there
    log_p = inputs.old_log_prob.clone()
    entropy = inputs.entropy.clone()
    log_p[1, 0], entropy[1, 0] = math.log(0.9), 0.0
    signed = dataclasses.replace(inputs, old_log_prob=log_p, entropy=entropy,
                                 expected_entropy_signal=torch.zeros(6, 2, dtype=torch.float64))
    _, _, kept = clipv_advantages(signed, ClipVArgs(mu=1.0, max_frac=1.0))
    assert kept.sum() == 11 and kept[1, 0] == 0


def test_clipv_caps_the_dropped_share_at_the_largest_deviations() -> None:
    """3 of 12 tokens fail the test (μ = 1): above ``max_frac`` the ``max(⌊max_frac n⌋, 1)``
    negative-advantage candidates with the largest ``D`` are dropped and the others kept;
    the ``A = 0`` token stays dropped; with no more candidates than the cap nothing
    changes; a batch whose ``σ_D < 1e-12`` keeps every token."""
    inputs = _clipv_inputs(D_BY_HAND)
    capped = [[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [1.0, 1.0]]
    for max_frac in (0.1, 1e-4):  # cap 1: row 1 (D = 10) goes, row 2 (D = 5) comes back
        _, _, kept = clipv_advantages(inputs, ClipVArgs(mu=1.0, max_frac=max_frac))
        assert kept.tolist() == capped, max_frac
    _, _, kept = clipv_advantages(inputs, ClipVArgs(mu=1.0, max_frac=0.2))  # cap 2 = 2 cands
    assert kept.sum() == 9 and kept[2, 0] == 0
    flat = _clipv_inputs([[0.3, 0.3]] * 6)  # σ_D = 0
    _, _, kept = clipv_advantages(flat, ClipVArgs(mu=0.0, max_frac=1.0))
    assert kept.tolist() == [[1.0] * 2] * 6
    padded = dataclasses.replace(inputs, response_mask=torch.tensor(
        [[1.0, 0.0]] * 6, dtype=torch.float64))  # D off the mask does not count
    _, _, kept = clipv_advantages(padded, ClipVArgs(mu=1.0, max_frac=1.0))
    assert kept.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0],
                             [1.0, 0.0]]


@SETTINGS
@given(advantage_inputs())
def test_clipv_advantages_equal_verls_grpo(inputs: AdvantageInputs) -> None:
    """Clip_V's advantages are veRL's GRPO advantages; its mask never keeps padding."""
    shape = inputs.response_mask.shape
    gen = torch.Generator().manual_seed(shape[0] * 17 + shape[1])
    inputs = dataclasses.replace(
        inputs, old_log_prob=-torch.rand(shape, generator=gen, dtype=torch.float64) * 4,
        entropy=torch.rand(shape, generator=gen, dtype=torch.float64) * 3,
        expected_entropy_signal=torch.rand(shape, generator=gen, dtype=torch.float64) - 0.5)

    def advantages_only(inputs: AdvantageInputs, args: ClipVArgs):
        advantages, returns, kept = clipv_advantages(inputs, args)
        assert bool((kept <= inputs.response_mask).all())
        return advantages, returns

    assert_equals_verl(advantages_only, ClipVArgs(epsilon=1e-6, mu=0.5, max_frac=0.5),
                       "compute_grpo_outcome_advantage", inputs, epsilon=1e-6,
                       norm_adv_by_std_in_grpo=True)


def test_clipv_validates_as_trinitys_example_and_names_what_it_needs(tmp_path) -> None:
    """Trinity-RFT's examples/entropy/clipv.yaml: ``advantage_fn: clipv`` with
    ``advantage_fn_args: {mu: 8.5}``; it declares the trainer inputs it reads, and a batch
    without them is one line."""
    from rft.contracts import needs_entropy, needs_expected_entropy_signal

    algorithm, plan = validated({"algorithm_type": "grpo", "advantage_fn": "clipv",
                                 "advantage_fn_args": {"mu": 8.5}}, str(tmp_path))
    assert plan.loss.advantage.args == ClipVArgs(mu=8.5) and algorithm.advantage_fn == "clipv"
    assert plan.loss.advantage.args.max_frac == 1e-4
    assert PluginRegistry.create().registration("advantage_fn", "clipv").distribution == \
        "rft-plugin-grpo"
    assert needs_entropy(clipv_advantages) and needs_expected_entropy_signal(clipv_advantages)
    assert not needs_expected_entropy_signal(clipb_advantages)
    inputs = _clipv_inputs(D_BY_HAND)
    for field in ("old_log_prob", "entropy", "expected_entropy_signal"):
        with pytest.raises(MissingInputError, match=f"^clipv needs {field}, which this run"):
            clipv_advantages(dataclasses.replace(inputs, **{field: None}), ClipVArgs())


class _DropEverything:
    """A test plugin: ``drop_all`` reads the entropies the trainer computed and drops every
    token from the update."""

    seen: list[tuple[int, ...]] = []

    @staticmethod
    def drop_all(inputs: AdvantageInputs, args: None):
        entropy = inputs.require("entropy", "drop_all")
        _DropEverything.seen.append(tuple(entropy.shape))
        assert bool(torch.isfinite(entropy).all()) and float(entropy.max()) > 0
        zeros = torch.zeros_like(inputs.response_mask)
        return zeros, zeros, zeros

    from rft import hookimpl

    @staticmethod
    @hookimpl
    def register_advantage_fns():
        _DropEverything.drop_all.needs_entropy = True
        return {"drop_all": _DropEverything.drop_all}


@pytest.mark.slow
def test_the_torch_trainer_hands_entropies_over_and_trains_on_the_kept_mask(rft_run) -> None:
    """The torch trainer computes the policy's entropies for a fn declaring
    ``needs_entropy`` and trains on the mask it returns: with every token dropped the loss
    and the gradient are 0. ``clipb`` itself runs by name."""
    outcome = rft_run({"algorithm.advantage_fn": "drop_all"}, plugins=[_DropEverything],
                      steps=1)
    assert _DropEverything.seen and len(_DropEverything.seen[0]) == 2
    step = outcome.metrics[0]  # the entropy metric is aggregated over the kept mask too
    assert step["actor/pg_loss"] == 0.0 and step["actor/grad_norm"] == 0.0
    assert step["actor/entropy_loss"] == 0.0
    outcome = rft_run({"algorithm.advantage_fn": "clipb",
                       "algorithm.advantage_fn_args": {"mu": 0.5}}, steps=1)
    assert outcome.metrics[0]["actor/entropy_loss"] > 0  # the tiny model's rewards are all 0


@pytest.mark.slow
def test_clipv_runs_by_name_end_to_end(rft_run) -> None:
    """``clipv`` by name: the torch trainer computes its inputs and trains on the kept mask
    (μ = 0: the tiny model's rewards are all 0, so every token takes the ``D ≤ 0`` test and
    some stay)."""
    outcome = rft_run({"algorithm.advantage_fn": "clipv",
                       "algorithm.advantage_fn_args": {"mu": 0.0, "max_frac": 1.0}}, steps=1)
    step = outcome.metrics[0]
    assert step["actor/entropy_loss"] > 0 and math.isfinite(step["actor/pg_loss"])
    assert step["timing_s/entropy"] >= 0  # the one forward pass that gives H, log p and N
