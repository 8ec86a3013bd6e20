"""Batch statistics under veRL's metric names (``verl.trainer.ppo.metric_utils``), and
the accumulation of loss metrics over micro- and mini-batches."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        nan = float("nan")
        return {f"{prefix}/mean": nan, f"{prefix}/max": nan, f"{prefix}/min": nan}
    values = values.float()
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def data_metrics(*, token_level_scores: torch.Tensor, token_level_rewards: torch.Tensor,
                 advantages: torch.Tensor, returns: torch.Tensor, response_mask: torch.Tensor,
                 response_lengths: torch.Tensor, prompt_lengths: torch.Tensor,
                 max_response_length: int, max_prompt_length: int,
                 values: torch.Tensor | None = None) -> dict[str, float]:
    """veRL's ``compute_data_metrics``.

    ``critic/score`` are sequence sums of the scores (before the KL penalty) and
    ``critic/rewards`` of the rewards (after it), both over non-empty responses;
    advantages / returns / values over masked tokens; ``response_length/clip_ratio`` is the
    fraction of responses of exactly ``max_response_length`` tokens.
    """
    mask = response_mask.bool()  # (B, R)
    alive = response_lengths > 0  # (B,)
    metrics: dict[str, float] = {}
    metrics.update(_stats("critic/score", token_level_scores.sum(-1)[alive]))
    metrics.update(_stats("critic/rewards", token_level_rewards.sum(-1)[alive]))
    metrics.update(_stats("critic/advantages", torch.masked_select(advantages, mask)))
    metrics.update(_stats("critic/returns", torch.masked_select(returns, mask)))
    if values is not None:
        valid_values = torch.masked_select(values, mask)
        valid_returns = torch.masked_select(returns, mask)
        metrics.update(_stats("critic/values", valid_values))
        if valid_values.numel() > 1:
            residual = torch.var(valid_returns - valid_values)
            explained = 1.0 - residual / (torch.var(valid_returns) + 1e-5)
            metrics["critic/vf_explained_var"] = explained.item()
    metrics.update(_stats("response_length", response_lengths))
    metrics["response_length/clip_ratio"] = (
        (response_lengths == max_response_length).float().mean().item())
    metrics["response/aborted_ratio"] = (~alive).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_lengths))
    metrics["prompt_length/clip_ratio"] = (
        (prompt_lengths == max_prompt_length).float().mean().item())
    return metrics


def rollout_probs_diff(rollout_logprobs: torch.Tensor, trainer_logprobs: torch.Tensor,
                       response_mask: torch.Tensor) -> dict[str, float]:
    """How far the inference engine's log-probs are from the trainer's on the same tokens
    (veRL's ``training/rollout_probs_diff_*``), over response tokens::

        d_t = |exp(logp_rollout_t) − exp(logp_trainer_t)|   → max, mean, std

    plus ``training/rollout_logprobs_diff_max = max_t |logp_rollout_t − logp_trainer_t|``.
    With the engine holding the trainer's weights (on-policy) these are rounding noise;
    after a faulty weight sync they are not.
    """
    mask = response_mask.bool()  # (B, R)
    rollout = torch.masked_select(rollout_logprobs.float(), mask)  # (N,)
    trainer = torch.masked_select(trainer_logprobs.float(), mask)  # (N,)
    if rollout.numel() == 0:
        return {}
    probs_diff = (rollout.exp() - trainer.exp()).abs()  # (N,)
    return {
        "training/rollout_probs_diff_max": probs_diff.max().item(),
        "training/rollout_probs_diff_mean": probs_diff.mean().item(),
        "training/rollout_probs_diff_std": (probs_diff.std().item() if probs_diff.numel() > 1
                                            else 0.0),
        "training/rollout_logprobs_diff_max": (rollout - trainer).abs().max().item(),
    }


FIRST_STEP_PROBS_DIFF_MEAN = 0.01
"""Largest ``training/rollout_probs_diff_mean`` the first step's check accepts: bf16
engines and trainers differ by ~1e-3 on average; a wrong weight load, dtype or model runner
(vLLM's GPU build runs Model Runner V2, which no CPU test exercises) by far more."""


def first_step_check(metrics: dict[str, float],
                     threshold: float = FIRST_STEP_PROBS_DIFF_MEAN) -> tuple[str, bool] | None:
    """The first train step's comparison of the engine's log-probs with the trainer's, as
    one line, and whether it passed (``None`` without :func:`rollout_probs_diff` metrics)::

        ok  ⇔  mean_t |exp(logp_rollout_t) − exp(logp_trainer_t)| ≤ threshold
    """
    mean = metrics.get("training/rollout_probs_diff_mean")
    if mean is None:
        return None
    top = metrics.get("training/rollout_probs_diff_max", mean)
    ok = mean <= threshold
    verdict = ("agree" if ok else
               "DISAGREE: the engine does not sample from the trainer's weights (check the "
               "weight sync, the dtypes, the engine's model runner)")
    return (f"first step: engine vs trainer probabilities of the sampled tokens: mean gap "
            f"{mean:.3g} (max {top:.3g}), threshold {threshold:g}: {verdict}", ok)


class LossMetrics:
    """Accumulates loss metrics: *summed* ones add up over the micro-batches of a
    mini-batch (they are normalised by mini-batch counts) and are then averaged over
    mini-batches and epochs; *averaged* ones are averaged over all micro-batches.

    The ranks of a sharded trainer each record their own micro-batches;
    :meth:`merged` adds their summed metrics per mini-batch and pools their averaged ones.
    """

    def __init__(self) -> None:
        self._open: dict[str, float] = defaultdict(float)
        self._summed: dict[str, dict[int, float]] = defaultdict(dict)
        self._averaged: dict[str, list[float]] = defaultdict(list)
        self._mini_batches = 0

    def add_micro(self, summed: dict[str, float], averaged: dict[str, float]) -> None:
        for key, value in summed.items():
            self._open[key] += value
        for key, value in averaged.items():
            self._averaged[key].append(value)

    def add(self, key: str, value: float) -> None:
        """A per-mini-batch value (grad norm): averaged over mini-batches."""
        self._averaged[key].append(value)

    def close_mini_batch(self) -> None:
        for key, value in self._open.items():
            self._summed[key][self._mini_batches] = value
        self._open.clear()
        self._mini_batches += 1

    def result(self) -> dict[str, float]:
        out = {k: sum(v.values()) / len(v) for k, v in self._summed.items() if v}
        out.update({k: sum(v) / len(v) for k, v in self._averaged.items() if v})
        return out

    @classmethod
    def merged(cls, records: list[LossMetrics]) -> LossMetrics:
        """The metrics of all ranks' records as one record. Per-mini-batch values the
        ranks share (grad norms) are taken from the first record."""
        out = cls()
        for record in records:
            for key, by_index in record._summed.items():
                for index, value in by_index.items():
                    out._summed[key][index] = out._summed[key].get(index, 0.0) + value
            for key, values in record._averaged.items():
                if key in SHARED_PER_MINI_BATCH and record is not records[0]:
                    continue
                out._averaged[key].extend(values)
        out._mini_batches = max(r._mini_batches for r in records)
        return out


SHARED_PER_MINI_BATCH = frozenset({"actor/grad_norm", "critic/grad_norm"})
"""Per-mini-batch values every rank computes identically (taken once when merging)."""


@contextmanager
def timed(metrics: dict[str, float], name: str) -> Iterator[None]:
    """Add the seconds spent in the block to ``metrics["timing_s/<name>"]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        key = f"timing_s/{name}"
        metrics[key] = metrics.get(key, 0.0) + time.perf_counter() - start
