"""Helpers for tests of algorithm plugins: random batches for property tests against
veRL, a tolerance check, and the validated ``algorithm`` section of a minimal config.

    from rft.testing.algorithms import SETTINGS, Batch, batches, close, rewards_for

Hypothesis draws shapes, masks (right padding, holes, all-zero rows) and groups
(singletons included); tensors come from a seeded generator in float64. The typed
inputs of each plugin kind are drawn from these batches by :mod:`rft.testing.strategies`
and checked by :mod:`rft.testing.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

TOL = {"atol": 1e-6, "rtol": 1e-6}
"""Tolerance of every comparison with veRL (float64)."""

SETTINGS = settings(max_examples=40, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
"""Hypothesis settings: deterministic, no deadline."""

FEW = settings(SETTINGS, max_examples=20)

REWARD_KINDS = st.sampled_from(["binary", "continuous", "constant"])


def close(ours: torch.Tensor, theirs: torch.Tensor | float) -> None:
    """``ours`` equals ``theirs`` to :data:`TOL` (compared in float64)."""
    theirs = torch.as_tensor(theirs, dtype=torch.float64)
    torch.testing.assert_close(ours.to(torch.float64), theirs.to(torch.float64),
                               atol=TOL["atol"], rtol=TOL["rtol"])


@dataclass
class Batch:
    """A random batch: ``B`` responses of length ``T``, a mask and group labels."""

    B: int
    T: int
    gen: torch.Generator
    mask: torch.Tensor
    """(B, T) float64 0/1."""
    groups: np.ndarray
    """(B,) string labels, veRL style."""

    def randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*(shape or (self.B, self.T)), generator=self.gen,
                           dtype=torch.float64) * scale

    def logps(self, scale: float = 1.0) -> torch.Tensor:
        """Random (negative) log-probabilities ``(B, T)``."""
        return -self.randn().abs() * scale

    def drifted(self, log_prob: torch.Tensor, drift: float, limit: float = 20.0) -> torch.Tensor:
        """Log-probabilities ``(B, T)`` of another policy: ``log_prob + δ``, ``δ ~ N(0,
        drift²)`` clamped to ``±limit`` (so ``|log ratio| ≤ limit``), kept ``≤ 0``."""
        delta = self.randn(scale=drift).clamp(-limit, limit)  # (B, T)
        return (log_prob + delta).clamp(max=0.0)

    def last_token_index(self) -> torch.Tensor:
        """``(B,)`` position of each row's last response token (``T − 1`` for an empty row)."""
        positions = torch.arange(self.T).expand(self.B, self.T)  # (B, T)
        last = torch.where(self.mask.bool(), positions, -1).max(dim=-1).values  # (B,)
        return torch.where(last < 0, self.T - 1, last)


def assert_policy_loss_matches(pg_loss: torch.Tensor, metrics: dict[str, torch.Tensor],
                               ref: torch.Tensor, ref_metrics: dict[str, Any],
                               mask: torch.Tensor, mode: str, agg_kwargs: dict[str, Any],
                               log_prob: torch.Tensor) -> None:
    """Our per-token policy loss, aggregated, equals veRL's loss ``ref``: value, gradient
    w.r.t. ``log_prob`` and the clip / KL metrics. veRL returns NaN for an all-zero
    mask where we return 0."""
    from rft import ops

    ours = ops.agg_loss(pg_loss, mask, mode, **agg_kwargs)
    for key in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
        close(metrics[key], ref_metrics[f"actor/{key}"])
    if torch.isnan(ref):
        assert mask.sum() == 0 and ours.item() == 0.0
        return
    close(ours, ref)
    (g_ours,) = torch.autograd.grad(ours, log_prob)
    (g_ref,) = torch.autograd.grad(ref, log_prob)
    close(g_ours, g_ref)


@st.composite
def batches(draw: st.DrawFn, max_b: int = 12, max_t: int = 16, min_tokens: int = 0,
            even_b: bool = False) -> Batch:
    """A :class:`Batch` with at least ``min_tokens`` masked tokens; ``even_b`` draws an
    even ``B`` (preference pairs)."""
    B = draw(st.integers(1, max_b))
    if even_b:
        B = 2 * ((B + 1) // 2)
    T = max(draw(st.integers(1, max_t)), -(-min_tokens // B))  # room for min_tokens
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["prefix", "random", "full"]))
    if kind == "full":
        mask = torch.ones(B, T, dtype=torch.float64)
    elif kind == "prefix":  # right padding: a response of length 0 … T
        lengths = torch.randint(0, T + 1, (B,), generator=gen)
        mask = (torch.arange(T) < lengths[:, None]).to(torch.float64)
    else:  # holes: multi-turn observation tokens
        mask = (torch.rand(B, T, generator=gen) < 0.6).to(torch.float64)
    if draw(st.booleans()):  # force some empty responses
        mask[torch.rand(B, generator=gen) < 0.3] = 0.0
    if mask.sum() < min_tokens:
        mask.view(-1)[:min_tokens] = 1.0
    groups_n = draw(st.integers(1, B))
    labels = torch.randint(0, groups_n, (B,), generator=gen).numpy()
    groups = np.array([f"uid-{g}" for g in labels], dtype=object)
    return Batch(B, T, gen, mask, groups)


def rewards_for(batch: Batch, kind: str) -> torch.Tensor:
    """Token-level rewards ``(B, T)``: ``binary`` 0/1 on the last column (constant groups
    are common), ``outcome`` a random score on each row's last response token (as the
    trainer places an outcome reward), ``continuous`` dense rewards, or ``constant``
    everywhere."""
    if kind == "outcome":
        rewards = torch.zeros(batch.B, batch.T, dtype=torch.float64)
        scores = torch.randn(batch.B, generator=batch.gen, dtype=torch.float64)  # (B,)
        rewards[torch.arange(batch.B), batch.last_token_index()] = scores
        return rewards
    if kind == "binary":
        rewards = torch.zeros(batch.B, batch.T, dtype=torch.float64)
        rewards[:, -1] = (torch.rand(batch.B, generator=batch.gen) < 0.5).to(torch.float64)
        return rewards
    if kind == "constant":
        return torch.full((batch.B, batch.T), 0.25, dtype=torch.float64)
    return batch.randn()


def minimal_config(algorithm: dict[str, Any], tmp_dir: str, mode: str = "train") -> dict[str, Any]:
    """A plain config dict that validates with only the core's built-ins plus the
    algorithm plugin under test (a hub model id, the ``hf`` engine, the ``torch``
    trainer)."""
    return {
        "mode": mode, "checkpoint_root_dir": tmp_dir,
        "algorithm": dict(algorithm),
        "model": {"model_path": "Qwen/Qwen2.5-0.5B-Instruct", "max_prompt_tokens": 8,
                  "max_response_tokens": 8},
        "buffer": {"batch_size": 4, "total_steps": 1, "trainer_input": {"experience_buffer": {
            "name": "exp", "storage_type": "sql", "path": f"{tmp_dir}/exp.db"}}},
        "explorer": {"rollout_model": {"engine_type": "hf"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {"trainer_type": "torch"},
        "monitor": {"monitor_type": "jsonl"},
    }


def validated(algorithm: dict[str, Any], tmp_dir: str, registry: Any = None,
              mode: str = "train") -> Any:
    """``(algorithm section, run plan)`` of :func:`minimal_config` after validation
    (raises :class:`rft.errors.ConfigError` on problems)."""
    from rft.config import build_stages
    from rft.plugins import PluginRegistry

    registry = registry or PluginRegistry.create()
    stage = build_stages(minimal_config(algorithm, tmp_dir, mode), registry).stages[0]
    return stage.config.algorithm, stage.plan
