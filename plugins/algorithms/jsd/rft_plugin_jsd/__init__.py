"""rft-plugin-jsd: on-policy distillation with a Jensen-Shannon divergence (Trinity-RFT's
``jsd``).

As ``on_policy_distill`` (rft-plugin-on-policy-distill: same workflow and teacher
log-probs), but each token's advantage is minus a per-token generalised JSD
between the student's and the teacher's probability of the sampled token, bounded where
the reverse KL is not.

Registered names: algorithm ``jsd``; advantage fn ``jsd`` (the advantages, in the
trainer, from the experiences' ``teacher_logprobs`` and sampling ``logprobs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.contracts import AdvantageInputs
from rft_plugin_on_policy_distill import student_and_teacher

__all__ = ["PRESET", "JSDArgs", "jsd_advantages", "jsd_per_token"]


@dataclass
class JSDArgs:
    """Arguments of the ``jsd`` advantage fn (``algorithm.advantage_fn_args``, as in
    Trinity-RFT)."""

    kl_coef: float = 1.0
    """``k``: scale of the advantages."""
    lambda_coef: float = 0.5
    """``λ ∈ [0, 1]``: the mixture is ``m = λ p_T + (1 − λ) p_S`` and the divergence
    ``λ · KL_T + (1 − λ) · KL_S``; 0.5 is the symmetric JSD; 0 and 1 give 0."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.lambda_coef <= 1.0:
            raise ValueError(f"lambda_coef must be within [0, 1], got {self.lambda_coef}")


def jsd_per_token(student: torch.Tensor, teacher: torch.Tensor, lambda_coef: float
                  ) -> torch.Tensor:
    """Trinity-RFT's per-token JSD of the sampled token's probabilities.

    With ``s = log p_S(y_t)``, ``t = log p_T(y_t)`` and
    ``log m = logsumexp(s + log(1 − λ), t + log λ)``::

        JSD_t = λ · p_T (t − log m) + (1 − λ) · p_S (s − log m)

    (0 for ``λ ≤ 0`` or ``λ ≥ 1``). It is 0 where ``s = t`` and the same shape as the
    inputs.
    """
    if lambda_coef <= 0.0 or lambda_coef >= 1.0:
        return torch.zeros_like(student)
    log_mix = torch.logaddexp(student + math.log(1.0 - lambda_coef),
                              teacher + math.log(lambda_coef))
    return (lambda_coef * torch.exp(teacher) * (teacher - log_mix)
            + (1.0 - lambda_coef) * torch.exp(student) * (student - log_mix))


def jsd_advantages(inputs: AdvantageInputs, args: JSDArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``A_t = −k · JSD_t · mask_t`` (:func:`jsd_per_token` of the sampling log-probs
    ``inputs.rollout_log_prob`` and the teacher's ``inputs.teacher_log_prob``);
    ``returns = A``. Both ``(B, T)``."""
    student, teacher = student_and_teacher(inputs, "jsd")  # (B, T)
    divergence = jsd_per_token(student, teacher, args.lambda_coef)  # (B, T)
    advantages = -args.kl_coef * divergence * inputs.response_mask  # (B, T)
    return advantages, advantages.clone()


jsd_advantages.Args = JSDArgs  # type: ignore[attr-defined]

PRESET = AlgorithmPreset(
    advantage_fn="jsd", policy_loss_fn="ppo", kl_loss_fn="none", kl_penalty_fn="none",
    entropy_loss_fn="none", sample_strategy="default", repeat_times=8, min_repeat_times=1)
"""JSD distillation: per-token JSD advantages, the clipped surrogate, no KL, no entropy
term, no reference model, 8 rollouts per task (Trinity-RFT's ``jsd`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"jsd": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"jsd": jsd_advantages}
