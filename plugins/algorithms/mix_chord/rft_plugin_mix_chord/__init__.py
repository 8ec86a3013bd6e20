"""rft-plugin-mix-chord: CHORD (Zhang et al., https://arxiv.org/abs/2508.11408;
Trinity-RFT's ``mix_chord``).

CHORD extends ``mix`` (rft-plugin-mix: expert SFT rows mixed into a GRPO batch) with its
dual control: a global weight ``μ`` that moves from imitation to exploration over
training (warm-up, then cosine decay from ``μ_peak`` to ``μ_valley``), and a token-wise
weight ``φ(p) = p (1 − p)`` on the expert NLL that damps tokens the policy already finds
certain or hopeless.

Registered names: algorithm ``mix_chord``; policy loss fns ``mix_chord``, ``sft_phi``
(the φ-weighted NLL alone) and ``sft_is`` (the NLL weighted by ``p``). The sample
strategy is ``mix``'s (rft-plugin-mix).

The μ schedule follows the training step the trainer passes in
``PolicyLossInputs.global_step`` (counted from 1, Trinity-RFT's ``step``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.builtin.policy_loss import PPOArgs, ppo_policy_loss
from rft.contracts import PolicyLossInputs
from rft.ops import masked_mean

__all__ = ["MixChordArgs", "PRESET", "SFTPhiArgs", "chord_mu", "mix_chord_policy_loss", "phi",
           "sft_is_loss", "sft_phi_loss"]


def phi(prob: torch.Tensor) -> torch.Tensor:
    """CHORD's token weight ``φ(p) = p · (1 − p)``: largest at ``p = ½``, 0 at 0 and 1."""
    return prob * (1.0 - prob)


@dataclass
class SFTPhiArgs:
    """Arguments of the ``sft_phi`` policy loss (``algorithm.policy_loss_fn_args``)."""

    cutoff_prob: float = 1.0
    """Tokens whose probability exceeds this get no gradient (``log p`` is clamped at
    ``log cutoff_prob``); 1: no cutoff."""

    def __post_init__(self) -> None:
        if not 0.0 < self.cutoff_prob <= 1.0:
            raise ValueError(f"cutoff_prob must be within (0, 1], got {self.cutoff_prob}")


def sft_phi_loss(inputs: PolicyLossInputs, args: SFTPhiArgs
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CHORD-φ's NLL per token: ``−log p_t · sg(φ(p_t))``, ``p_t = π(y_t)`` (``log p``
    clamped at ``log cutoff_prob``; ``φ`` of the unclamped ``p``). Ignores the
    advantages. Metric ``sft_phi_loss`` (masked mean)."""
    log_prob = inputs.log_prob  # (B, T)
    weight = phi(torch.exp(log_prob.detach()))  # (B, T)
    if args.cutoff_prob < 1.0:
        log_prob = torch.clamp(log_prob, max=math.log(args.cutoff_prob))
    loss = -log_prob * weight  # (B, T)
    with torch.no_grad():
        metrics = {"sft_phi_loss": masked_mean(loss.detach(), inputs.response_mask)}
    return loss, metrics


sft_phi_loss.Args = SFTPhiArgs  # type: ignore[attr-defined]


def sft_is_loss(inputs: PolicyLossInputs, args: None
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The NLL weighted by the token's own probability: ``−log p_t · sg(p_t)``. Ignores
    the advantages; takes no arguments (Trinity-RFT's ``use_token_level_loss`` is rft's
    ``algorithm.loss_agg_mode``). Metric ``sft_is_loss`` (masked mean)."""
    loss = -inputs.log_prob * torch.exp(inputs.log_prob.detach())  # (B, T)
    with torch.no_grad():
        metrics = {"sft_is_loss": masked_mean(loss.detach(), inputs.response_mask)}
    return loss, metrics


@dataclass
class MixChordArgs:
    """Arguments of the ``mix_chord`` policy loss (``algorithm.policy_loss_fn_args``)."""

    mu_warmup_steps: int = 0
    """Steps over which ``μ`` rises linearly from 0 to ``mu_peak``."""
    mu_decay_steps: int = 0
    """Steps over which ``μ`` then decays (cosine) from ``mu_peak`` to ``mu_valley``."""
    mu_peak: float = 0.1
    """``μ`` at the end of the warm-up."""
    mu_valley: float = 0.1
    """``μ`` after the decay (and throughout, with no warm-up and no decay)."""
    enable_phi_function: bool = True
    """Weigh the expert NLL by ``φ(p)`` (CHORD-φ); ``False``: the plain NLL."""
    clip_range: float = 0.2
    """Symmetric clip range of the RL part (the core ``ppo`` loss)."""
    clip_range_low: float | None = None
    """Lower clip range of the RL part; ``None``: ``clip_range``."""
    clip_range_high: float | None = None
    """Upper clip range of the RL part; ``None``: ``clip_range``."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound of the RL part."""

    def __post_init__(self) -> None:
        for name in ("mu_peak", "mu_valley"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        for name in ("mu_warmup_steps", "mu_decay_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def constant(self) -> bool:
        """Whether ``μ`` is the same at every step (then it is ``mu_valley``)."""
        return self.mu_warmup_steps == 0 and (self.mu_decay_steps == 0
                                              or self.mu_peak == self.mu_valley)


def chord_mu(step: int, args: MixChordArgs) -> float:
    """CHORD's global weight at training step ``step`` (Trinity-RFT's schedule)::

        μ = step / W · μ_peak                                   step < W
        μ = μ_valley + (μ_peak − μ_valley) · ½ (1 + cos(π (step − W) / D))   W ≤ step < W + D
        μ = μ_valley                                            step ≥ W + D

    with ``W = mu_warmup_steps``, ``D = mu_decay_steps`` and ``step`` the training step
    being taken, counted from 1 (``PolicyLossInputs.global_step``; Trinity-RFT passes the
    trainer's ``train_step_num + 1``).
    """
    warmup, decay = args.mu_warmup_steps, args.mu_decay_steps
    if step < warmup:
        return step / warmup * args.mu_peak
    if step >= warmup + decay:
        return args.mu_valley
    cosine = 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / decay))
    return (args.mu_peak - args.mu_valley) * cosine + args.mu_valley


def mix_chord_policy_loss(inputs: PolicyLossInputs, args: MixChordArgs
                          ) -> tuple[torch.Tensor, dict[str, Any]]:
    """Per token: ``(1 − μ) · ppo_it`` on rollout rows, ``μ · sft_it`` on expert rows
    (``inputs.is_expert_mask``), with ``sft = −log p · sg(φ(p))`` (or ``−log p`` without
    ``enable_phi_function``) and ``μ = chord_mu(inputs.global_step)``; both parts
    aggregated together by the trainer's ``loss_agg_mode``.

    Without ``is_expert_mask`` (no expert data) the loss is exactly the ``ppo`` loss, as
    ``mix``'s is.

    :return: ``pg_loss`` ``(B, T)`` and detached metrics: the ``ppo`` metrics over rollout
        rows and, with expert rows, ``mu``, ``expert/sft_loss`` (masked mean of the expert
        term before ``μ``) and ``expert/fraction``.
    """
    clip = PPOArgs(clip_range=args.clip_range, clip_range_low=args.clip_range_low,
                   clip_range_high=args.clip_range_high, clip_ratio_c=args.clip_ratio_c)
    if inputs.is_expert_mask is None:
        return ppo_policy_loss(inputs, clip)
    mu = args.mu_valley if args.constant() else chord_mu(
        inputs.require("global_step", "mix_chord's mu schedule"), args)
    mask = inputs.response_mask  # (B, T)
    expert = inputs.is_expert_mask.to(device=mask.device, dtype=torch.bool).unsqueeze(-1)  # (B, 1)
    usual_mask = mask * (~expert).to(mask.dtype)  # (B, T)
    expert_mask = mask * expert.to(mask.dtype)  # (B, T)
    rl_loss, ppo_metrics = ppo_policy_loss(dataclasses.replace(inputs, response_mask=usual_mask),
                                           clip)  # (B, T)
    metrics: dict[str, Any] = dict(ppo_metrics)
    weight = (phi(torch.exp(inputs.log_prob.detach())) if args.enable_phi_function
              else torch.ones_like(inputs.log_prob))  # (B, T)
    sft = -inputs.log_prob * weight  # (B, T)
    pg_loss = torch.where(expert, mu * sft, (1.0 - mu) * rl_loss)  # (B, T)
    with torch.no_grad():
        metrics["mu"] = mu
        metrics["expert/sft_loss"] = masked_mean(sft.detach(), expert_mask)
        metrics["expert/fraction"] = expert.to(pg_loss.dtype).mean()
    return pg_loss, metrics


mix_chord_policy_loss.Args = MixChordArgs  # type: ignore[attr-defined]

PRESET = rl_preset("grpo", policy_loss_fn="mix_chord", sample_strategy="mix", repeat_times=8,
                   entropy_loss_fn="mix")
"""CHORD: GRPO advantages on rollouts, the φ-weighted expert NLL mixed in with weight μ,
``mix``'s sample strategy, k2 KL loss (Trinity-RFT's ``mix_chord`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"mix_chord": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"mix_chord": mix_chord_policy_loss, "sft_phi": sft_phi_loss, "sft_is": sft_is_loss}
