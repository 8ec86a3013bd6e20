"""rft-plugin-on-policy-distill: on-policy distillation (Trinity-RFT's
``on_policy_distill``, after Thinking Machines' Tinker recipe,
https://thinkingmachines.ai/blog/on-policy-distillation/).

The student samples; a teacher scores the student's own tokens; each token's advantage
is the teacher-student log-ratio ``k · (log π_T − log π_S)`` — the negative per-token
reverse KL — and the policy is updated with the clipped surrogate on it.

Registered names:

- algorithm ``on_policy_distill``;
- advantage fn ``on_policy_distill``: the advantages, in the trainer, from the
  experiences' ``teacher_logprobs`` and sampling ``logprobs``;
- workflow ``on_policy_distill_workflow``: student rollouts scored by an auxiliary
  teacher model (``Experience.teacher_logprobs``);
- workflow ``on_policy_distill_math_workflow``: the same on maths questions in
  Qwen2.5-Math's prompt format, each answer rewarded with its boxed-answer accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.contracts import AdvantageInputs
from rft_plugin_on_policy_distill.teacher import (OnPolicyDistillMathWorkflow,
                                                  OnPolicyDistillWorkflow,
                                                  OnPolicyDistillWorkflowArgs,
                                                  attach_teacher_logprobs, student_and_teacher)

__all__ = ["PRESET", "OnPolicyDistillArgs", "OnPolicyDistillMathWorkflow",
           "OnPolicyDistillWorkflow",
           "OnPolicyDistillWorkflowArgs", "attach_teacher_logprobs",
           "on_policy_distill_advantages", "student_and_teacher"]


@dataclass
class OnPolicyDistillArgs:
    """Arguments of the ``on_policy_distill`` advantage fn (``algorithm.advantage_fn_args``,
    as in Trinity-RFT)."""

    kl_coef: float = 1.0
    """``k``: scale of the advantages."""


def on_policy_distill_advantages(inputs: AdvantageInputs, args: OnPolicyDistillArgs
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, with ``log π_S`` the sampling log-probs (``inputs.rollout_log_prob``) and
    ``log π_T`` the teacher's (``inputs.teacher_log_prob``)::

        A_t = k · (log π_T(y_t) − log π_S(y_t)) · mask_t

    minus ``k`` times the per-token reverse-KL estimate; ``returns = A``. Both ``(B, T)``.
    """
    student, teacher = student_and_teacher(inputs, "on_policy_distill")  # (B, T)
    advantages = args.kl_coef * (teacher - student) * inputs.response_mask  # (B, T)
    return advantages, advantages.clone()


on_policy_distill_advantages.Args = OnPolicyDistillArgs  # type: ignore[attr-defined]

PRESET = AlgorithmPreset(
    advantage_fn="on_policy_distill", policy_loss_fn="ppo", kl_loss_fn="none",
    kl_penalty_fn="none", entropy_loss_fn="none", sample_strategy="default", repeat_times=8,
    min_repeat_times=1)
"""On-policy distillation: teacher-student log-ratio advantages, the clipped surrogate, no
KL, no entropy term, no reference model, 8 rollouts per task (Trinity-RFT's
``on_policy_distill`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"on_policy_distill": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"on_policy_distill": on_policy_distill_advantages}


@hookimpl
def register_workflows() -> dict[str, Any]:
    return {"on_policy_distill_workflow": OnPolicyDistillWorkflow,
            "on_policy_distill_math_workflow": OnPolicyDistillMathWorkflow}
