"""Clip_B: GRPO advantages whose negative-advantage tokens that would raise the entropy
most are dropped from the update (Trinity-RFT's ``clipb``; "On the Entropy Dynamics in
Reinforcement Fine-Tuning of Large Language Models", https://arxiv.org/abs/2602.03392).

A token's first-order effect on the policy's entropy when its log-probability is pushed up
is measured by ``S = p · (H + log p)``, with ``p`` the sampled token's probability and
``H`` the entropy at its position. Lowering a token with a very negative centred ``S``
raises the entropy sharply; Clip_B keeps every token with a positive or zero advantage and
drops the negative-advantage tokens whose ``S`` lies more than ``μ`` standard deviations
below the batch mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rft.contracts import AdvantageInputs
from rft_plugin_grpo.advantages import GRPOArgs, grpo_advantages

STD_FLOOR = 1e-12
"""A batch whose ``S`` has a smaller standard deviation keeps every token."""


@dataclass
class ClipBArgs:
    """Arguments of the ``clipb`` advantage (``algorithm.advantage_fn_args``, Trinity-RFT's
    names and defaults)."""

    epsilon: float = 1e-6
    """Added to the group std before dividing (GRPO's ``ε``)."""
    mu: float = 2.5
    """``μ``: a negative-advantage token is dropped when its centred ``S`` is below
    ``−μ · σ_S``."""


def entropy_signal(log_prob: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
    """``S = p · (H + log p)`` per token, ``p = exp(log p)``: ``(B, T)`` from the sampled
    tokens' log-probs ``(B, T)`` and the per-token entropies ``(B, T)``."""
    return log_prob.exp() * (entropy + log_prob)  # (B, T)


def clipb_advantages(inputs: AdvantageInputs, args: ClipBArgs
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clip_B.

    Advantages and returns are GRPO's (:func:`~rft_plugin_grpo.grpo_advantages` with
    ``ε``). With ``m`` the response mask, ``log p`` the sampling log-probs
    (``inputs.rollout_log_prob``), ``H`` the policy's entropies (``inputs.entropy``),
    ``S = p · (H + log p)`` and, over the batch's response tokens (``n = Σ m``),
    ``μ_S = Σ S·m / n`` and the population std ``σ_S = sqrt(Σ (S − μ_S)² m / n)``::

        keep_t = 1                           if A_t ≥ 0 or σ_S < 1e-12
        keep_t = [S_t − μ_S ≥ −μ · σ_S]      if A_t < 0
        response_mask' = m · keep

    :return: ``(advantages, returns, response_mask')``, each ``(B, T)``; the trainer
        trains on ``response_mask'`` only (dropped tokens leave the loss and its counts).
    """
    advantages, returns = grpo_advantages(inputs, GRPOArgs(epsilon=args.epsilon))  # (B, T)
    log_prob = inputs.require("rollout_log_prob", "clipb").double()  # (B, T)
    entropy = inputs.require("entropy", "clipb").double()  # (B, T)
    mask = inputs.response_mask  # (B, T)
    with torch.no_grad():
        m = mask.double()  # (B, T)
        signal = entropy_signal(log_prob, entropy) * m  # (B, T), 0 off the mask
        n = m.sum().clamp_min(1.0)
        mean = signal.sum() / n
        std = (((signal - mean) ** 2) * m).sum().div(n).sqrt()
        if std.item() < STD_FLOOR:
            return advantages, returns, mask
        keep = (advantages >= 0) | (signal - mean >= -args.mu * std)  # (B, T)
        kept = mask * keep.to(mask.dtype)  # (B, T)
    return advantages, returns, kept


clipb_advantages.Args = ClipBArgs  # type: ignore[attr-defined]
clipb_advantages.needs_entropy = True  # type: ignore[attr-defined]

__all__ = ["ClipBArgs", "STD_FLOOR", "clipb_advantages", "entropy_signal"]
