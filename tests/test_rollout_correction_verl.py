"""rft's off-policy corrections (:mod:`rft.trainer.rollout_correction`) equal veRL 0.9.1's
``rollout_corr_helper`` on random batches: importance weights at both levels (TIS and
IcePop bounds, with and without batch normalisation), every rejection option alone and
chained, the off-policy metrics, and the threshold parsing (same accepted values, same
refusals). Tensors are float64 from :mod:`rft.testing.algorithms` (all-zero rows and
holes included); log-ratios stay within ±20 where the comparison needs finite values."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from verl.trainer.ppo import rollout_corr_helper as verl_rc

from rft.config import rollout_correction_spec as parsing
from rft.testing.algorithms import SETTINGS, Batch, batches, close
from rft.trainer import rollout_correction as rc

torch.set_num_threads(1)

IS_THRESHOLDS = [2.0, 1.5, "5.0", "0.5_5.0", "0.8_1.25", 10]
RS_SPECS = [
    ("token_k1", "0.5_2.0"), ("token_k1", 2.0), ("token_k2", 0.5), ("token_k3", "0.3"),
    ("seq_sum_k1", "0.2_5.0"), ("seq_sum_k2", 2.0), ("seq_sum_k3", 1.0),
    ("seq_mean_k1", "0.7_1.5"), ("seq_mean_k2", 0.1), ("seq_mean_k3", 0.2),
    ("seq_max_k2", 0.8), ("seq_max_k3", 1.5),
    ("token_k1,seq_mean_k3", "0.5_2.0,0.2"), ("seq_max_k2,seq_sum_k3,token_k3", "1.0"),
    ("token_k2,token_k2", "0.5"),
]


def assert_metrics_equal(ours: dict[str, float], theirs: dict[str, float]) -> None:
    """Same keys, same values (NaN where veRL's is NaN)."""
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(ours[key]), key
        else:
            assert ours[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key


def drifted_pair(batch: Batch, drift: float) -> tuple[torch.Tensor, torch.Tensor]:
    old = batch.logps()
    return old, batch.drifted(old, drift)


@SETTINGS
@given(batches(min_tokens=1), st.sampled_from(["token", "sequence"]),
       st.sampled_from(IS_THRESHOLDS), st.booleans(), st.sampled_from([0.05, 0.5, 3.0]))
def test_is_weights_equal_verl(batch: Batch, level: str, threshold: object, normalize: bool,
                               drift: float) -> None:
    old, rollout = drifted_pair(batch, drift)
    log_ratio = old - rollout
    theirs, their_metrics = verl_rc.compute_rollout_correction_weights(
        log_ratio, batch.mask, rollout_is=level, rollout_is_threshold=threshold,
        rollout_is_batch_normalize=normalize)
    level_ = "token" if level == "token" else "sequence"
    ours, our_metrics = rc.is_weights(log_ratio, batch.mask, level_,
                                      parsing.parse_is_threshold(threshold), normalize)
    close(ours, theirs)
    assert not ours.requires_grad
    assert_metrics_equal(our_metrics, their_metrics)


@SETTINGS
@given(batches(min_tokens=1), st.sampled_from(RS_SPECS), st.sampled_from([0.05, 0.5, 3.0]))
def test_rejection_mask_equal_verl(batch: Batch, spec: tuple[str, object], drift: float) -> None:
    options, threshold = spec
    old, rollout = drifted_pair(batch, drift)
    log_ratio = old - rollout
    theirs, their_metrics = verl_rc.compute_rollout_rejection_mask(
        log_ratio, batch.mask, rollout_rs=options, rollout_rs_threshold=threshold)
    ours, our_metrics = rc.rejection_mask(log_ratio, batch.mask,
                                          parsing.parse_rejection(options, threshold))
    assert ours.dtype == batch.mask.dtype
    close(ours, theirs)
    assert_metrics_equal(our_metrics, their_metrics)


@SETTINGS
@given(batches(min_tokens=1), st.sampled_from([None, "token", "sequence"]),
       st.sampled_from(IS_THRESHOLDS), st.booleans(),
       st.sampled_from([None, *RS_SPECS[:6]]), st.sampled_from([0.05, 1.0]))
def test_correct_equals_verl(batch: Batch, level: str | None, threshold: object,
                             normalize: bool, rs: tuple[str, object] | None,
                             drift: float) -> None:
    """The whole correction (weights, mask, ``rollout_corr/…`` metrics incl. the
    off-policy diagnostics) equals ``compute_rollout_correction_and_rejection_mask``."""
    old, rollout = drifted_pair(batch, drift)
    rs_options, rs_threshold = rs if rs is not None else (None, None)
    spec = parsing.parse_correction(level, threshold, normalize, rs_options, rs_threshold)
    ours = rc.correct(old, rollout, batch.mask, spec)
    try:
        proto, their_mask, their_metrics = verl_rc.compute_rollout_correction_and_rejection_mask(
            old, rollout, batch.mask, rollout_is=level, rollout_is_threshold=threshold,
            rollout_is_batch_normalize=normalize, rollout_rs=rs_options,
            rollout_rs_threshold=rs_threshold)
    except ZeroDivisionError:  # veRL's effective sample size when IcePop zeroes every weight
        assert ours.weights is not None and not bool(ours.weights.any())
        assert ours.metrics["rollout_corr/rollout_is_eff_sample_size"] == 0.0
        return
    close(ours.response_mask, their_mask)
    if proto is None:
        assert ours.weights is None
    else:
        assert ours.weights is not None
        close(ours.weights, proto.batch["rollout_is_weights"])
    assert_metrics_equal(ours.metrics, their_metrics)


@SETTINGS
@given(batches(min_tokens=1), st.sampled_from([0.0, 0.3, 2.0]))
def test_offpolicy_metrics_equal_verl(batch: Batch, drift: float) -> None:
    old, rollout = drifted_pair(batch, drift)
    assert_metrics_equal(rc.offpolicy_metrics(old, rollout, batch.mask),
                         verl_rc.compute_offpolicy_metrics(old, rollout, batch.mask))


@pytest.mark.parametrize("spec", [2.0, 3, "2.5", " 0.5_4 ", "1_1", 0.0, -1.0, "0", "a",
                                  "2_1", "0_2", "", "x_2", True, None, [1.0]])
def test_is_threshold_parsing_equals_verl(spec: object) -> None:
    """Accepted by both with the same bounds, or refused by both."""
    try:
        upper, lower = verl_rc._parse_rollout_is_threshold(spec)
    except (TypeError, ValueError):
        with pytest.raises(ValueError):
            parsing.parse_is_threshold(spec)
        return
    assert parsing.parse_is_threshold(spec) == parsing.IsBounds(upper, lower)


@pytest.mark.parametrize("options,spec", [
    ("token_k1", "0.5_2"), ("token_k1", 4), ("seq_sum_k2", "1.5"), ("seq_max_k3", "0.5_2"),
    ("token_k1,seq_sum_k2", "0.5_2,1"), ("token_k1,seq_sum_k2", "0.5_2,1,3"),
    ("token_k2", -1), ("token_k1", "2_0.5"), ("seq_max_k1", 2.0), ("bogus", 1.0),
    ("token_k2", None), ("", 1.0), ("token_k3", "abc")])
def test_rs_threshold_parsing_equals_verl(options: str, spec: object) -> None:
    """Same options and bounds, or refused by both (veRL parses when it builds a mask)."""
    mask = torch.ones(2, 3, dtype=torch.float64)
    try:
        verl_rc.compute_rollout_rejection_mask(torch.zeros(2, 3, dtype=torch.float64), mask,
                                               rollout_rs=options, rollout_rs_threshold=spec)
    except (TypeError, ValueError):
        with pytest.raises(ValueError):
            parsing.parse_rejection(options, spec)
        return
    parsed = parsing.parse_rejection(options, spec)
    names = list(dict.fromkeys(o.strip() for o in options.split(",") if o.strip()))
    their = verl_rc._parse_rollout_rs_thresholds(names, spec)
    assert [o.name for o in parsed] == names
    for option in parsed:
        assert option.upper == their[option.name]["upper"]
        assert option.lower == their[option.name]["lower"]


def test_every_weight_zeroed_is_no_effective_sample_where_verl_divides_by_zero() -> None:
    """IcePop bounds that zero the only token: veRL's effective sample size divides by
    zero; rft's is 0 and the step goes on."""
    old = torch.tensor([[0.0]], dtype=torch.float64)
    rollout = torch.tensor([[-2.0]], dtype=torch.float64)  # ratio e² ≈ 7.4, outside [0.8, 1.25]
    mask = torch.ones(1, 1, dtype=torch.float64)
    with pytest.raises(ZeroDivisionError):
        verl_rc.compute_rollout_correction_and_rejection_mask(
            old, rollout, mask, rollout_is="token", rollout_is_threshold="0.8_1.25")
    ours = rc.correct(old, rollout, mask,
                      parsing.parse_correction("token", "0.8_1.25", False, None, None))
    assert ours.weights is not None and not bool(ours.weights.any())
    assert ours.metrics["rollout_corr/rollout_is_eff_sample_size"] == 0.0
