"""rft-plugin-sapo: Soft Adaptive Policy Optimization (https://arxiv.org/abs/2511.20347),
as Trinity-RFT's ``sapo``.

Registered names: algorithm ``sapo``; policy loss fn ``sapo`` (equal to veRL 0.9.1's
``compute_policy_loss_sapo``; Trinity-RFT's gradient with ``surrogate: trinity``).
Advantages are GRPO's (``grpo`` from rft-plugin-grpo).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import PolicyLossInputs
from rft.ops import masked_mean

__all__ = ["PRESET", "SAPOArgs", "sapo_policy_loss"]

LOG_RATIO_CLAMP = 20.0
"""``log π − log π_old`` is clamped to ``±20`` before ``exp`` (as veRL does)."""


@dataclass
class SAPOArgs:
    """Arguments of the ``sapo`` policy loss (``algorithm.policy_loss_fn_args``)."""

    tau_pos: float = 1.0
    """Gate temperature ``τ_pos`` for tokens with a positive advantage (paper: 1.0)."""
    tau_neg: float = 1.05
    """Gate temperature ``τ_neg`` for tokens with ``A ≤ 0`` (paper: 1.05); must be
    ``≥ tau_pos`` (Trinity-RFT's check: negative updates are damped harder)."""
    surrogate: Literal["paper", "trinity"] = "paper"
    """``paper``: the loss is ``−A·f(r)`` and its gradient goes through the gate (the
    paper's and veRL's objective); ``trinity``: Trinity-RFT's ``−A·sg(f(r))·log π``, whose
    gradient weight is the gate's value ``f(r)`` instead of ``f'(r)·r``."""


def sapo_policy_loss(inputs: PolicyLossInputs, args: SAPOArgs
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SAPO's soft-gated surrogate per token.

    With ``r = exp(clamp(log π − log π_old, ±20))``, ``τ = τ_pos`` where ``A > 0`` else
    ``τ_neg``, and the gate ``f(r) = σ(τ (r − 1)) · 4 / τ`` (``f(1) = 2/τ``,
    ``f'(1) = 1``)::

        paper:    pg_loss_t = −A_t · f(r_t)
                  ∂/∂log π_t = −A_t · 4 σ_t (1 − σ_t) · r_t       (σ_t = σ(τ (r_t − 1)))
        trinity:  pg_loss_t = −A_t · sg(f(r_t)) · log π_t
                  ∂/∂log π_t = −A_t · f(r_t)

    The gate decays smoothly as the ratio leaves 1, where PPO clips hard. Aggregated with
    the trainer's ``loss_agg_mode``: the paper and veRL use ``seq-mean-token-mean`` (veRL
    forces it), Trinity-RFT ``token-mean`` (rft's default).

    :return: ``pg_loss`` ``(B, T)`` and detached metrics: ``ppo_kl``, ``avg_soft_gate``,
        ``avg_ratio``, ``pos_adv_frac`` (masked means).
    """
    if args.tau_pos <= 0 or args.tau_neg <= 0:
        raise ValueError(f"sapo: tau_pos and tau_neg must be > 0, got {args.tau_pos}, "
                         f"{args.tau_neg}")
    if args.tau_neg < args.tau_pos:
        raise ValueError(f"sapo: tau_neg ({args.tau_neg}) must be >= tau_pos ({args.tau_pos})")
    if args.surrogate not in ("paper", "trinity"):
        raise ValueError(f"sapo: surrogate must be 'paper' or 'trinity', got {args.surrogate!r}")
    log_prob, advantages, mask = inputs.log_prob, inputs.advantages, inputs.response_mask
    log_ratio = torch.clamp(log_prob - inputs.old_log_prob,
                            -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    tau = torch.where(advantages > 0, ratio.new_tensor(args.tau_pos),
                      ratio.new_tensor(args.tau_neg))  # (B, T)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)  # (B, T)
    if args.surrogate == "paper":
        pg_loss = -advantages * gate  # (B, T)
    else:
        pg_loss = -advantages * gate.detach() * log_prob  # (B, T)
    with torch.no_grad():
        metrics = {
            "ppo_kl": masked_mean(-log_ratio, mask),
            "avg_soft_gate": masked_mean(gate, mask),
            "avg_ratio": masked_mean(ratio, mask),
            "pos_adv_frac": masked_mean((advantages > 0).to(ratio.dtype), mask),
        }
    return pg_loss, metrics


sapo_policy_loss.Args = SAPOArgs  # type: ignore[attr-defined]

PRESET = rl_preset("grpo", policy_loss_fn="sapo")
"""SAPO: GRPO advantages, the ``sapo`` soft-gated surrogate, k2 KL loss against a
reference model, the ``default`` entropy term, 2 rollouts per task (Trinity-RFT's
defaults)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"sapo": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"sapo": sapo_policy_loss}
