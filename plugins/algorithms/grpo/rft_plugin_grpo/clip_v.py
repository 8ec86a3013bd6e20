"""Clip_V: GRPO advantages whose negative-advantage tokens that would raise the entropy
most, measured against the policy's expectation, are dropped from the update
(Trinity-RFT's ``clipv``; "On the Entropy Dynamics in Reinforcement Fine-Tuning of Large
Language Models", https://arxiv.org/abs/2602.03392).

Pushing the sampled token up changes the entropy by ``S = p · (H + log p)`` to first
order (:func:`~rft_plugin_grpo.clip_b.entropy_signal`); under the policy itself that change
averages ``N = E_{v~p}[S_v] = Σ_v p_v² (log p_v + H)`` (Trinity-RFT's ``necs``,
:func:`rft.ops.expected_entropy_signal_from_logits`). Clip_V looks at the deviation
``D = N − S``: a token whose negative advantage pushes it down while ``D`` is more than
``μ`` batch standard deviations raises the entropy unusually, and is dropped; at most a
``max_frac`` share of the batch's tokens is dropped, the largest ``D`` first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rft.contracts import AdvantageInputs
from rft_plugin_grpo.advantages import GRPOArgs, grpo_advantages
from rft_plugin_grpo.clip_b import STD_FLOOR, entropy_signal


@dataclass
class ClipVArgs:
    """Arguments of the ``clipv`` advantage (``algorithm.advantage_fn_args``, Trinity-RFT's
    names and defaults)."""

    epsilon: float = 1e-6
    """Added to the group std before dividing (GRPO's ``ε``)."""
    mu: float = 8.5
    """``μ``: a token with ``A ≤ 0`` is dropped when its ``D`` exceeds ``μ · σ_D``."""
    max_frac: float = 1e-4
    """When a larger share of the batch's response tokens would be dropped, only the
    ``max(⌊max_frac · n⌋, 1)`` negative-advantage tokens with the largest ``D`` are."""


def clipv_advantages(inputs: AdvantageInputs, args: ClipVArgs
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clip_V.

    Advantages ``A`` and returns are GRPO's (:func:`~rft_plugin_grpo.grpo_advantages` with
    ``ε``). With ``m`` the response mask, ``log p`` the policy's log-probs before the update
    (``inputs.old_log_prob``, the trainer's forward pass), ``H`` its entropies
    (``inputs.entropy``), ``N`` its expected entropy signals
    (``inputs.expected_entropy_signal``), ``S = p · (H + log p)``, ``D = N − S`` and, over
    the batch's response tokens (``n = Σ m``), ``μ_D = Σ D·m / n`` and the population std
    ``σ_D = sqrt(Σ (D − μ_D)² m / n)``::

        keep_t = 1                     if A_t > 0 or σ_D < 1e-12
        keep_t = [D_t ≤ μ · σ_D]       if A_t ≤ 0          (D itself, not centred)

    Cap: when more than ``max_frac · n`` response tokens are dropped, ``cap =
    max(⌊max_frac · n⌋, 1)`` and the candidates are ``A < 0, m = 1, D > μ σ_D``; if there
    are more than ``cap`` of them, they are all kept except the ``cap`` with the largest
    ``D`` (tokens with ``A = 0`` that failed the test stay dropped). Then
    ``response_mask' = m · keep``.

    :return: ``(advantages, returns, response_mask')``, each ``(B, T)``; the trainer
        trains on ``response_mask'`` only (dropped tokens leave the loss and its counts).
    """
    advantages, returns = grpo_advantages(inputs, GRPOArgs(epsilon=args.epsilon))  # (B, T)
    log_prob = inputs.require("old_log_prob", "clipv").double()  # (B, T)
    entropy = inputs.require("entropy", "clipv").double()  # (B, T)
    expected = inputs.require("expected_entropy_signal", "clipv").double()  # (B, T)
    mask = inputs.response_mask  # (B, T)
    with torch.no_grad():
        m = mask.double()  # (B, T)
        on = m > 0  # (B, T)
        deviation = (expected - entropy_signal(log_prob, entropy)) * m  # (B, T), 0 off m
        n = m.sum().clamp_min(1.0)
        mean = deviation.sum() / n
        std = (((deviation - mean) ** 2) * m).sum().div(n).sqrt()
        if std.item() < STD_FLOOR:
            return advantages, returns, mask
        threshold = args.mu * std
        keep = (advantages > 0) | (deviation <= threshold)  # (B, T)
        if (on & ~keep).sum().item() / n.item() > args.max_frac:
            keep = _cap_dropped(keep, deviation, (advantages < 0) & on & (deviation > threshold),
                                max(int(args.max_frac * n.item()), 1))
        kept = mask * keep.to(mask.dtype)  # (B, T)
    return advantages, returns, kept


def _cap_dropped(keep: torch.Tensor, deviation: torch.Tensor, candidates: torch.Tensor,
                 cap: int) -> torch.Tensor:
    """``keep`` ``(B, T)`` with the ``candidates`` ``(B, T)`` all kept but the ``cap`` with
    the largest ``deviation`` ``(B, T)``, when there are more than ``cap`` candidates."""
    if int(candidates.sum().item()) <= cap:
        return keep
    flat = deviation.masked_fill(~candidates, float("-inf")).flatten()  # (B·T,)
    dropped = flat.topk(cap).indices  # (cap,)
    capped = (keep | candidates).flatten().clone()  # (B·T,)
    capped[dropped] = False
    return capped.view_as(keep)


clipv_advantages.Args = ClipVArgs  # type: ignore[attr-defined]
clipv_advantages.needs_entropy = True  # type: ignore[attr-defined]
clipv_advantages.needs_expected_entropy_signal = True  # type: ignore[attr-defined]

__all__ = ["ClipVArgs", "clipv_advantages"]
