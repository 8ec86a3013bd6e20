"""Off-policy correction of rollout tokens (veRL 0.9.1's ``rollout_is`` / ``rollout_rs``).

The engine sampled each response with the behaviour policy ``μ`` (its log-probs are
``rollout_log_prob``, carried by the experiences); the trainer's proximal policy before
the update is ``π_old`` (``old_log_prob``, its own forward pass). Decoupled PPO keeps the
clipped ratio ``π_θ / π_old`` and corrects the gap between ``π_old`` and ``μ`` with

    log ρ_t = log π_old(y_t) − log μ(y_t)                                  (B, T)

- **importance weights** (``rollout_is``): ``w = ρ_t`` per token (``token``) or
  ``w = Π_t ρ_t`` per sequence (``sequence``), from ``exp`` of the log-ratio clamped to
  ``±20``; truncated to ``min(w, U)`` (TIS, a single threshold ``U``) or zeroed outside
  ``[L, U]`` (IcePop, ``"L_U"``); optionally divided by their batch mean. The per-token
  policy loss is multiplied by ``w`` before aggregation (veRL's ``pg_losses *
  rollout_is_weights``).
- **rejection** (``rollout_rs``): tokens or whole sequences whose divergence estimate
  leaves its bound are dropped from the response mask. Per token, with ``l = log ρ``
  clamped to ``±20``: ``k1 = −l``, ``k2 = l²/2``, ``k3 = eᵗ − 1 − l`` (``t = l``);
  ``token_kN`` bounds each token's value, ``seq_sum_kN`` / ``seq_mean_kN`` /
  ``seq_max_kN`` the sum / mean / max over the sequence's tokens. ``k1`` options keep
  ``log L ≤ k1 ≤ log U`` (one number ``U``: ``L = 1/U``); ``k2`` / ``k3`` keep ``≤ U``.
  Several options (comma separated) must all pass. ``seq_mean_k1`` is the geometric-mean
  ratio (veRL's "Geo-RS").

Every function equals its veRL counterpart in ``verl/trainer/ppo/rollout_corr_helper.py``
(weights, masks and metrics; ``tests/test_rollout_correction_verl.py`` proves it with
hypothesis). Thresholds are parsed once by :func:`rft.config.rollout_correction_spec.parse_correction` at validation; a bad
one is a :class:`ValueError` whose text the config check puts after the dotted key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rft.config.rollout_correction_spec import (
    CorrectionSpec,
    Estimator,
    IsBounds,
    IsLevel,
    RejectionOption,
    spec_of,
)
from rft.errors import RftError
from rft.ops import masked_mean, masked_sum

SAFETY_BOUND = 20.0
"""Log-ratios are clamped to ``±SAFETY_BOUND`` before ``exp`` (``e²⁰ ≈ 4.9e8``)."""

@dataclass
class Correction:
    """The result of :func:`correct`."""

    weights: torch.Tensor | None
    """``(B, T)`` detached importance weights (0 on padding); ``None``: no ``rollout_is``."""
    response_mask: torch.Tensor
    """``(B, T)`` the response mask with rejected tokens set to 0 (its input dtype)."""
    metrics: dict[str, float]
    """``rollout_corr/…`` metrics (veRL's names)."""


# --------------------------------------------------------------------------------------
# Importance weights
# --------------------------------------------------------------------------------------


def is_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: IsLevel, bounds: IsBounds,
               batch_normalize: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance weights ``(B, T)`` and their metrics (veRL's
    ``compute_rollout_correction_weights``).

    ``raw = exp(clamp(l, ±20))`` per token (``token``) or ``exp(clamp(Σ_t l_t, ±20))``
    broadcast over the row (``sequence``), times ``mask``; TIS: ``w = min(raw, U)``;
    IcePop: ``w = raw · 1[L ≤ raw ≤ U]``; ``batch_normalize``: ``w / mean(w)`` (the mean
    over tokens, or over rows with tokens for ``sequence``), unless the mean is ≤ 1e-8.

    :param log_ratio: ``(B, T)`` ``log π_old − log μ``.
    :param mask: ``(B, T)`` response mask.
    """
    if level == "token":
        stat_log = log_ratio  # (B, T) the log-ratios the metrics read
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))  # (B, T)
    else:
        stat_log = masked_sum(log_ratio, mask, dim=-1).unsqueeze(-1)  # (B, 1)
        raw = torch.exp(stat_log.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = raw * mask  # (B, T)
    if bounds.lower is None:
        weights = raw.clamp(max=bounds.upper)
    else:
        kept = (raw >= bounds.lower) & (raw <= bounds.upper)  # (B, T)
        weights = torch.where(kept, raw, torch.zeros_like(raw))
    metrics = _is_metrics(weights, raw, stat_log, mask, level, bounds)
    if bounds.lower is not None:
        outside = (raw < bounds.lower) | (raw > bounds.upper)
        metrics["rollout_is_oob_ratio"] = masked_mean(outside.float(), mask).item()
    weights = weights.detach()
    if batch_normalize:
        if level == "token":
            mean = masked_mean(weights, mask)
        else:
            per_row = masked_mean(weights, mask, dim=-1)  # (B,)
            has_tokens = (mask.sum(dim=-1) > 0).to(weights.dtype)  # (B,)
            mean = (per_row * has_tokens).sum() / has_tokens.sum().clamp_min(1e-8)
        if mean > 1e-8:
            weights = weights / mean
            metrics["rollout_is_batch_norm_factor"] = mean.item()
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return weights, metrics


def _is_metrics(weights: torch.Tensor, raw: torch.Tensor, stat_log: torch.Tensor,
                mask: torch.Tensor, level: IsLevel, bounds: IsBounds) -> dict[str, float]:
    """``rollout_is_*`` metrics of the applied ``weights`` ``(B, T)`` (veRL's
    ``compute_is_metrics``): mean / max / min, the fractions of raw ratios above ``U`` /
    below ``L`` (``1/U`` for TIS), std and ESS ``1 / mean((w / mean w)²)`` of the weights
    clamped to ``[0, U]``, and per-row means (``seq_*``)."""
    upper = bounds.upper
    lower = bounds.lower if bounds.lower is not None else 1.0 / upper
    out: dict[str, float] = {}
    mask_bool = mask.bool()
    out["rollout_is_mean"] = masked_mean(weights, mask).item()
    if level == "sequence":
        out["rollout_is_max"] = torch.exp(stat_log.max().clamp(max=SAFETY_BOUND)).item()
        out["rollout_is_min"] = torch.exp(stat_log.min()).item()
        out["rollout_is_ratio_fraction_high"] = (stat_log > math.log(upper)).float().mean().item()
        out["rollout_is_ratio_fraction_low"] = (stat_log < math.log(lower)).float().mean().item()
    else:
        out["rollout_is_ratio_fraction_high"] = masked_mean((raw > upper).float(), mask).item()
        out["rollout_is_ratio_fraction_low"] = masked_mean((raw < lower).float(), mask).item()
        out["rollout_is_max"] = weights.masked_fill(~mask_bool, float("-inf")).max().item()
        out["rollout_is_min"] = weights.masked_fill(~mask_bool, float("inf")).min().item()
    clamped = weights.clamp(min=0.0, max=upper)  # (B, T)
    mean = masked_mean(clamped, mask)
    if mask.sum() > 1:
        var = masked_mean(clamped.square(), mask) - mean.square()
        out["rollout_is_std"] = torch.sqrt(var.clamp(min=0.0)).item()
    else:
        out["rollout_is_std"] = 0.0
    normalised = clamped / (mean + 1e-8)
    second_moment = masked_mean(normalised.square(), mask).item()
    # every weight zeroed (IcePop bounds): no effective sample (veRL divides by zero here)
    out["rollout_is_eff_sample_size"] = 1.0 / second_moment if second_moment > 0 else 0.0
    row_mean = masked_mean(weights, mask, dim=-1)  # (B,)
    out["rollout_is_seq_mean"] = row_mean.mean().item()
    out["rollout_is_seq_std"] = row_mean.std().item() if row_mean.numel() > 1 else 0.0
    out["rollout_is_seq_max"] = row_mean.max().item()
    out["rollout_is_seq_min"] = row_mean.min().item()
    out["rollout_is_seq_max_deviation"] = (row_mean - 1.0).abs().max().item()
    raw_row_mean = masked_mean(raw, mask, dim=-1)  # (B,)
    out["rollout_is_seq_fraction_high"] = (raw_row_mean > upper).float().mean().item()
    out["rollout_is_seq_fraction_low"] = (raw_row_mean < lower).float().mean().item()
    return out


# --------------------------------------------------------------------------------------
# Rejection
# --------------------------------------------------------------------------------------


def token_divergences(log_ratio: torch.Tensor) -> dict[Estimator, torch.Tensor]:
    """Per-token divergence estimates ``(B, T)`` with ``l = clamp(log ρ, ±20)``:
    ``k1 = −l``, ``k2 = l²/2``, ``k3 = exp(l) − 1 − l``."""
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B, T)
    return {"k1": -safe, "k2": 0.5 * safe ** 2, "k3": torch.exp(safe) - 1.0 - safe}


def _row_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B,)`` max of ``values`` over each row's masked tokens, 0 for an empty row."""
    neg_inf = torch.tensor(float("-inf"), dtype=values.dtype)
    top = values.masked_fill(~mask.bool(), neg_inf).max(dim=-1).values  # (B,)
    return torch.where(top == neg_inf, torch.zeros_like(top), top)


def rejection_mask(log_ratio: torch.Tensor, mask: torch.Tensor,
                   options: tuple[RejectionOption, ...]) -> tuple[torch.Tensor, dict[str, float]]:
    """``mask`` ``(B, T)`` with the tokens (or rows) that fail any option set to 0, and
    ``rollout_rs_*`` metrics (veRL's ``compute_rollout_rejection_mask``)."""
    if log_ratio.shape[0] == 0:
        return mask, {}
    per_token = token_divergences(log_ratio)
    mask_bool = mask.bool()  # (B, T)
    row_valid = mask.sum(dim=-1) > 0  # (B,)
    keep_all = torch.ones_like(mask, dtype=log_ratio.dtype)  # (B, T)
    out: dict[str, float] = {}
    for option in options:
        values = per_token[option.estimator]  # (B, T)
        k1 = option.estimator == "k1"
        if k1:
            assert option.lower is not None
            low, high = math.log(option.lower), math.log(option.upper)
        else:
            low, high = 0.0, option.upper
        row_stat: torch.Tensor | None = None
        if option.reduction == "token":
            stat = values
            keep = (stat >= low) & (stat <= high) if k1 else stat <= high  # (B, T)
        else:
            if option.reduction == "seq_sum":
                row_stat = masked_sum(values, mask, dim=-1)  # (B,)
            elif option.reduction == "seq_mean":
                row_stat = masked_mean(values, mask, dim=-1)
            else:
                row_stat = _row_max(values, mask)
            row_keep = (row_stat >= low) & (row_stat <= high) if k1 else row_stat <= high
            keep = row_keep.unsqueeze(-1).expand_as(mask_bool)  # (B, T)
            stat = row_stat.unsqueeze(-1).expand_as(mask)
        out.update(_rs_metrics(option.name, stat, mask, row_valid, row_stat, high, low, k1))
        keep_float = keep.to(log_ratio.dtype)
        keep_all = keep_all * keep_float
        row_kept = (~((~keep) & mask_bool)).all(dim=-1)  # (B,)
        out[f"rollout_rs_{option.name}_masked_fraction"] = masked_mean(1 - keep_float, mask).item()
        valid = row_valid.float()
        out[f"rollout_rs_{option.name}_seq_masked_fraction"] = (
            (((1.0 - row_kept.to(log_ratio.dtype)) * valid).sum() / valid.sum()).item()
            if valid.sum() > 0 else 0.0)
    out["rollout_rs_masked_fraction"] = masked_mean(1 - keep_all, mask).item()
    final_keep = (keep_all > 0.5) & mask_bool
    out["rollout_rs_seq_masked_fraction"] = (
        (~final_keep & mask_bool).any(dim=-1).float().mean().item())
    return (mask * keep_all).to(mask.dtype), out


def _rs_metrics(name: str, stat: torch.Tensor, mask: torch.Tensor, row_valid: torch.Tensor,
                row_stat: torch.Tensor | None, high: float, low: float, two_sided: bool
                ) -> dict[str, float]:
    """Metrics of one rejection option (veRL's ``compute_rs_metrics``): the statistic's
    mean / max / min / std (clamped to the bounds), the fractions above / below its
    bounds, and its per-row summary (``seq_*``). ``stat`` ``(B, T)``; ``row_stat``
    ``(B,)`` for sequence options."""
    prefix = f"rollout_rs_{name}"
    mask_bool = mask.bool()
    rows = row_stat if row_stat is not None else masked_mean(stat, mask, dim=-1)  # (B,)
    rows = rows[row_valid]
    sequence = row_stat is not None and rows.numel() > 0
    out: dict[str, float] = {f"{prefix}_mean": masked_mean(stat, mask).item()}
    if sequence:
        out[f"{prefix}_max"] = rows.max().item()
        out[f"{prefix}_min"] = rows.min().item()
        out[f"{prefix}_fraction_high"] = (rows > high).float().mean().item()
        out[f"{prefix}_fraction_low"] = (rows < low).float().mean().item() if two_sided else 0.0
    else:
        out[f"{prefix}_max"] = stat.masked_fill(~mask_bool, float("-inf")).max().item()
        out[f"{prefix}_min"] = stat.masked_fill(~mask_bool, float("inf")).min().item()
        out[f"{prefix}_fraction_high"] = masked_mean((stat > high).float(), mask).item()
        out[f"{prefix}_fraction_low"] = (masked_mean((stat < low).float(), mask).item()
                                         if two_sided else 0.0)
    if mask.sum() > 1:
        clamped = stat.clamp(min=low if two_sided else 0.0, max=high)
        mean = masked_mean(clamped, mask)
        var = masked_mean(clamped.square(), mask) - mean.square()
        out[f"{prefix}_std"] = torch.sqrt(var.clamp(min=0.0)).item()
    else:
        out[f"{prefix}_std"] = 0.0
    if rows.numel() > 0:
        out[f"{prefix}_seq_mean"] = rows.mean().item()
        out[f"{prefix}_seq_std"] = rows.std().item() if rows.numel() > 1 else 0.0
        out[f"{prefix}_seq_max"] = rows.max().item()
        out[f"{prefix}_seq_min"] = rows.min().item()
        out[f"{prefix}_seq_max_deviation"] = rows.abs().max().item()
        out[f"{prefix}_seq_fraction_high"] = (rows > high).float().mean().item()
        if two_sided:
            out[f"{prefix}_seq_fraction_low"] = (rows < low).float().mean().item()
    else:
        for suffix in ("seq_mean", "seq_std", "seq_max", "seq_min", "seq_max_deviation",
                       "seq_fraction_high", "seq_fraction_low"):
            out[f"{prefix}_{suffix}"] = 0.0
    return out


# --------------------------------------------------------------------------------------
# Off-policy diagnostics and the whole correction
# --------------------------------------------------------------------------------------


def offpolicy_metrics(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                      mask: torch.Tensor) -> dict[str, float]:
    """Gap between ``π_old`` and ``μ`` (veRL's ``compute_offpolicy_metrics``), with
    ``l = log π_old − log μ`` ``(B, T)`` and per-row token means ``m(·)``:

    - ``training_ppl = mean_rows exp(−m(log π_old))``,
      ``training_log_ppl = mean(−m(log π_old))``
      (``rollout_*`` the same for ``μ``);
    - ``kl = mean_tokens(−l)``, ``k3_kl = mean_tokens(eˡ − l − 1)``;
    - ``log_ppl_diff = m(log μ) − m(log π_old)`` per row: mean, |·| mean, max, min;
      ``ppl_ratio = mean_rows exp(log_ppl_diff)``;
    - ``chi2_token = mean_tokens(exp(2 clamp(l))) − 1``,
      ``chi2_seq = mean_rows exp(2 clamp(Σ_t l_t)) − 1``.
    """
    out: dict[str, float] = {}
    train_mean = masked_mean(old_log_prob, mask, dim=-1)  # (B,)
    out["training_ppl"] = torch.exp(-train_mean).mean().item()
    out["training_log_ppl"] = (-train_mean).mean().item()
    out["kl"] = masked_mean(rollout_log_prob - old_log_prob, mask).item()
    log_ratio = old_log_prob - rollout_log_prob  # (B, T)
    out["k3_kl"] = masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask).item()
    rollout_mean = masked_mean(rollout_log_prob, mask, dim=-1)  # (B,)
    out["rollout_ppl"] = torch.exp(-rollout_mean).mean().item()
    out["rollout_log_ppl"] = (-rollout_mean).mean().item()
    diff = rollout_mean - train_mean  # (B,)
    out["log_ppl_diff"] = diff.mean().item()
    out["log_ppl_abs_diff"] = diff.abs().mean().item()
    out["log_ppl_diff_max"] = diff.max().item()
    out["log_ppl_diff_min"] = diff.min().item()
    out["ppl_ratio"] = torch.exp(diff).mean().item()
    rho = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))  # (B, T)
    out["chi2_token"] = (masked_mean(rho.square(), mask) - 1.0).item()
    row_sum = masked_sum(log_ratio, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)  # (B,)
    out["chi2_seq"] = (torch.exp(2.0 * row_sum).mean() - 1.0).item()
    return out


def engine_log_prob(spec: CorrectionSpec, bypass_mode: bool,
                    rollout_log_prob: torch.Tensor | None) -> torch.Tensor | None:
    """The engine's log-probs ``μ`` ``(B, T)`` that ``algorithm.rollout_correction`` reads
    (a correction or ``bypass_mode``), ``None`` when it reads none; one-line
    :class:`RftError` when it needs them and the experiences carry none (every trainer
    backend calls this one rule)."""
    if not (spec.active or bypass_mode):
        return None
    if rollout_log_prob is None:
        raise RftError("algorithm.rollout_correction: the experiences carry no engine "
                       "log-probs (Experience.logprobs) to correct against")
    return rollout_log_prob


def correct(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor,
            spec: CorrectionSpec) -> Correction:
    """Importance weights, rejection mask and ``rollout_corr/…`` metrics of a batch
    (veRL's ``compute_rollout_correction_and_rejection_mask``), all ``(B, T)``, from
    ``log ρ = old_log_prob − rollout_log_prob``. A batch without response tokens is
    returned unchanged, without metrics."""
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != mask.shape:
        raise ValueError(f"log-prob shapes {tuple(old_log_prob.shape)} / "
                         f"{tuple(rollout_log_prob.shape)} / mask {tuple(mask.shape)} differ")
    if not bool(mask.any()):
        return Correction(None, mask, {})
    log_ratio = old_log_prob - rollout_log_prob  # (B, T)
    metrics: dict[str, float] = {}
    weights = None
    if spec.rollout_is is not None:
        weights, is_metrics = is_weights(log_ratio, mask, spec.rollout_is, spec.is_bounds,
                                         spec.batch_normalize)
        metrics.update(is_metrics)
    kept = mask.clone()
    if spec.rejection:
        kept, rs_metrics = rejection_mask(log_ratio, mask, spec.rejection)
        metrics.update(rs_metrics)
    metrics.update(offpolicy_metrics(old_log_prob, rollout_log_prob, mask))
    return Correction(weights, kept, {f"rollout_corr/{k}": v for k, v in metrics.items()})
