"""Reference formulas of named policy-loss families, written plainly and independently of
rft's own implementations, for :func:`rft.testing.checks.check_policy_loss`'s
``reference=`` (which then checks a loss's maths, not only its structure, without veRL).

    from rft.testing.references import ClippedSurrogate

    check_policy_loss(my_ppo_loss, MyArgs(clip_range=0.2), inputs,
                      reference=ClippedSurrogate(clip_range=0.2))

A reference (:class:`PolicyLossReference`) gives, for a micro-batch, the per-token loss,
the metrics under veRL's names and definitions, and where its gradient w.r.t.
``log_prob`` must vanish (``flat``) and where it must oppose the advantage (``moving``);
:func:`aggregate` is the trainer's aggregation written out independently of
:func:`rft.ops.agg_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rft.contracts import AggContext, PolicyLossInputs

__all__ = ["ClippedSurrogate", "PolicyLossReference", "Regions", "aggregate"]


@dataclass(frozen=True)
class Regions:
    """Where a reference loss's per-token gradient w.r.t. ``log_prob`` is known by sign,
    each ``(B, T)`` bool, boundaries (ties) left out of both."""

    flat: torch.Tensor
    """The loss does not depend on ``log_prob`` here (the clip region): gradient 0."""
    moving: torch.Tensor
    """The loss decreases as ``log_prob`` moves with the advantage: the gradient has the
    sign of ``−A`` (and ``A ≠ 0``)."""


class PolicyLossReference(Protocol):
    """What :func:`~rft.testing.checks.check_policy_loss` needs of a reference family."""

    def describe(self) -> str:
        """The family and its parameters, for failure messages."""
        ...

    def pg_loss(self, inputs: PolicyLossInputs) -> torch.Tensor:
        """The per-token loss ``(B, T)`` (differentiable w.r.t. ``inputs.log_prob``)."""
        ...

    def metrics(self, inputs: PolicyLossInputs) -> dict[str, torch.Tensor]:
        """The metrics the family defines (veRL's names, without ``actor/``), 0-dim."""
        ...

    def regions(self, inputs: PolicyLossInputs) -> Regions:
        """Where the gradient is known to vanish, and where it opposes the advantage."""
        ...


def aggregate(loss_mat: torch.Tensor, mask: torch.Tensor, agg: AggContext) -> torch.Tensor:
    """The trainer's aggregation of a per-token loss ``(B, T)``, written out (``m`` the
    mask, ``n_i = Σ_t m_it``, ``L_i = Σ_t loss_it·m_it``, rows with ``n_i > 0`` counted by
    ``|S|``, ``dp`` the data-parallel size; a count of 0 gives 0):

    - ``token-mean``: ``dp · Σ_i L_i / (batch_num_tokens or Σ n_i)``
    - ``token-sum``: ``dp · Σ_i L_i``
    - ``seq-mean-token-sum``: ``dp · Σ_i L_i / (global_batch_size or |S|)``
    - ``seq-mean-token-mean``: ``dp · Σ_{n_i>0} (L_i / (n_i + 1e-8)) / (global_batch_size
      or |S|)`` (veRL's ``1e-8``)
    - ``seq-mean-token-sum-norm``: ``seq-mean-token-sum / (loss_scale_factor or T)``
    """
    m = mask.to(loss_mat.dtype)  # (B, T)
    per_row = torch.where(m > 0, loss_mat, torch.zeros_like(loss_mat)).sum(-1)  # (B,)
    counts = m.sum(-1)  # (B,)
    if agg.mode == "token-mean":
        total = agg.batch_num_tokens if agg.batch_num_tokens is not None else counts.sum()
        return agg.dp_size * _over(per_row.sum(), total)
    if agg.mode == "token-sum":
        return agg.dp_size * per_row.sum()
    rows = agg.global_batch_size if agg.global_batch_size is not None else (counts > 0).sum()
    if agg.mode == "seq-mean-token-mean":
        per_row = torch.where(counts > 0, per_row / (counts + 1e-8), torch.zeros_like(per_row))
    loss = agg.dp_size * _over(per_row.sum(), rows)
    if agg.mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        return loss
    if agg.mode == "seq-mean-token-sum-norm":
        scale = agg.loss_scale_factor if agg.loss_scale_factor is not None else mask.shape[-1]
        return loss / scale
    raise ValueError(f"aggregate: unknown loss_agg_mode {agg.mode!r}")


def _over(total: torch.Tensor, count: Any) -> torch.Tensor:
    count = torch.as_tensor(count, dtype=total.dtype)
    return torch.where(count > 0, total / count.clamp(min=1e-30), torch.zeros_like(total))


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """veRL's ``masked_mean``: ``Σ v·m / (Σ m + 1e-8)``."""
    m = mask.to(values.dtype)
    return (torch.where(m > 0, values, torch.zeros_like(values)) * m).sum() / (m.sum() + 1e-8)


@dataclass(frozen=True)
class ClippedSurrogate:
    """PPO's clipped surrogate (https://arxiv.org/abs/1707.06347), with the asymmetric
    clip of DAPO's clip-higher and, optionally, the dual clip of
    https://arxiv.org/abs/1912.09729 — veRL 0.9.1's ``vanilla`` loss when ``clip_ratio_c``
    is set. Per token, with ``r = exp(clamp(log_prob − old_log_prob, ±max_log_ratio))``,
    ``A`` the advantage, ``ε_l``/``ε_h`` the clip ranges and ``c`` ``clip_ratio_c``::

        clipped = max(−A·r, −A·clip(r, 1 − ε_l, 1 + ε_h))
        pg_loss = min(clipped, −A·c)   if A < 0 and c is set
                  clipped              otherwise

    Its gradient w.r.t. ``log_prob`` is ``−A·r`` where ``−A·r`` is the active term, else 0:
    flat where ``A > 0, r > 1 + ε_h`` or ``A < 0, r < 1 − ε_l`` (the clip), ``A < 0,
    r > c`` (the dual clip) and beyond the log-ratio clamp.

    Metrics (veRL's): ``pg_clipfrac`` — share of masked tokens where the clipped term is
    strictly the larger (where the clip is *active*, not where the ratio is merely out of
    range); ``pg_clipfrac_lower`` (with the dual clip) — share where ``A < 0`` and the dual
    bound is strictly the smaller; ``ppo_kl`` — masked mean of ``−log r``.

    Calling it, ``ClippedSurrogate(...)(inputs, args)``, is a policy loss of its own
    (``args`` ignored), e.g. to compare it with veRL.
    """

    clip_range: float = 0.2
    """Symmetric clip range ``ε`` (veRL ``clip_ratio``)."""
    clip_range_low: float | None = None
    """``ε_l``; ``None``: ``clip_range``."""
    clip_range_high: float | None = None
    """``ε_h``; ``None``: ``clip_range``."""
    clip_ratio_c: float | None = None
    """Dual-clip bound ``c > 1`` for negative advantages; ``None``: no dual clip."""
    max_log_ratio: float | None = 20.0
    """``|log r|`` is clamped to this before ``exp`` (veRL's guard); ``None``: no clamp."""

    def __post_init__(self) -> None:
        if self.clip_ratio_c is not None and self.clip_ratio_c <= 1.0:
            raise ValueError(f"ClippedSurrogate: clip_ratio_c must be > 1, got {self.clip_ratio_c}")

    @property
    def low(self) -> float:
        return self.clip_range if self.clip_range_low is None else self.clip_range_low

    @property
    def high(self) -> float:
        return self.clip_range if self.clip_range_high is None else self.clip_range_high

    def describe(self) -> str:
        dual = f", dual clip c={self.clip_ratio_c:g}" if self.clip_ratio_c is not None else ""
        return f"clipped surrogate (ε_low={self.low:g}, ε_high={self.high:g}{dual})"

    def _log_ratio(self, inputs: PolicyLossInputs) -> torch.Tensor:
        raw = inputs.log_prob - inputs.old_log_prob  # (B, T)
        if self.max_log_ratio is None:
            return raw
        return raw.clamp(-self.max_log_ratio, self.max_log_ratio)

    def pg_loss(self, inputs: PolicyLossInputs) -> torch.Tensor:
        ratio = torch.exp(self._log_ratio(inputs))  # (B, T)
        advantages = inputs.advantages  # (B, T)
        clipped = torch.maximum(-advantages * ratio,
                                -advantages * ratio.clamp(1 - self.low, 1 + self.high))
        if self.clip_ratio_c is None:
            return clipped
        return torch.where(advantages < 0,
                           torch.minimum(clipped, -advantages * self.clip_ratio_c), clipped)

    def metrics(self, inputs: PolicyLossInputs) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            log_ratio = self._log_ratio(inputs)  # (B, T)
            ratio = torch.exp(log_ratio)
            advantages, mask = inputs.advantages, inputs.response_mask
            unclipped = -advantages * ratio  # (B, T)
            clipped = -advantages * ratio.clamp(1 - self.low, 1 + self.high)  # (B, T)
            out = {"pg_clipfrac": _masked_mean((clipped > unclipped).to(ratio.dtype), mask),
                   "ppo_kl": _masked_mean(-log_ratio, mask)}
            if self.clip_ratio_c is not None:
                binds = (torch.maximum(unclipped, clipped) > -advantages * self.clip_ratio_c) \
                    & (advantages < 0)
                out["pg_clipfrac_lower"] = _masked_mean(binds.to(ratio.dtype), mask)
        return out

    def regions(self, inputs: PolicyLossInputs) -> Regions:
        with torch.no_grad():
            raw = inputs.log_prob.detach() - inputs.old_log_prob  # (B, T)
            ratio = torch.exp(self._log_ratio(inputs).detach())  # (B, T)
            advantages = inputs.advantages  # (B, T)
            gap = 1e-6 if ratio.dtype == torch.float64 else 1e-3  # ties left out

            def above(bound: float) -> torch.Tensor:
                return ratio > bound * (1 + gap)

            def below(bound: float) -> torch.Tensor:
                return ratio < bound * (1 - gap)

            positive, negative = advantages > 0, advantages < 0
            flat = (positive & above(1 + self.high)) | (negative & below(1 - self.low))
            moving = (positive & below(1 + self.high)) | (negative & above(1 - self.low))
            if self.clip_ratio_c is not None:
                flat |= negative & above(self.clip_ratio_c)
                moving &= ~(negative & ~below(self.clip_ratio_c))
            if self.max_log_ratio is not None:
                clamped = raw.abs() > self.max_log_ratio * (1 + gap)
                inside = raw.abs() < self.max_log_ratio * (1 - gap)
                flat = (flat & inside) | clamped
                moving &= inside
        return Regions(flat=flat, moving=moving)

    def __call__(self, inputs: PolicyLossInputs, args: Any = None
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.pg_loss(inputs), self.metrics(inputs)
