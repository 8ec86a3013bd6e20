"""rft-plugin-on-policy-distill: on-policy distillation (Trinity-RFT's
``on_policy_distill``, after Thinking Machines' Tinker recipe,
https://thinkingmachines.ai/blog/on-policy-distillation/).

The student samples; a teacher scores the student's own tokens; each token's advantage
is the teacher-student log-ratio ``k · (log π_T − log π_S)`` — the negative per-token
reverse KL — and the policy is updated with the clipped surrogate on it.

Registered names:

- algorithm ``on_policy_distill``;
- workflow ``on_policy_distill_workflow``: student rollouts scored by an auxiliary
  teacher model (``info["teacher_logprobs"]``);
- experience operator ``on_policy_distill``: the advantages, in the explorer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft_plugin_on_policy_distill.teacher import (TEACHER_KEY, OnPolicyDistillWorkflow,
                                                  OnPolicyDistillWorkflowArgs,
                                                  TeacherAdvantageOperator,
                                                  TeacherAdvantageRows,
                                                  attach_teacher_logprobs, teacher_and_student)

__all__ = ["PRESET", "TEACHER_KEY", "OnPolicyDistill", "OnPolicyDistillArgs",
           "OnPolicyDistillWorkflow", "OnPolicyDistillWorkflowArgs", "TeacherAdvantageOperator",
           "TeacherAdvantageRows", "attach_teacher_logprobs", "on_policy_distill_advantages",
           "teacher_and_student"]


@dataclass
class OnPolicyDistillArgs:
    """Arguments of the ``on_policy_distill`` operator
    (``data_processor.experience_pipeline.operators[i].args``; Trinity-RFT's
    ``algorithm.advantage_fn_args``)."""

    kl_coef: float = 1.0
    """``k``: scale of the advantages."""


def on_policy_distill_advantages(student: torch.Tensor, teacher: torch.Tensor,
                                 mask: torch.Tensor, args: OnPolicyDistillArgs
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``A_t = k · (log π_T(y_t) − log π_S(y_t)) · mask_t``, and the per-token reverse-KL
    estimate ``log π_S − log π_T`` (for the metrics). All tensors of one shape."""
    return args.kl_coef * (teacher - student) * mask, student - teacher


class OnPolicyDistill(TeacherAdvantageOperator):
    """``on_policy_distill`` in the explorer: :func:`on_policy_distill_advantages` of each
    experience's sampling log-probs and ``info["teacher_logprobs"]``, as its
    ``advantages`` and ``returns``. Metrics ``kl/mean``, ``kl/std`` (per-sequence
    ``Σ (log π_S − log π_T)``), ``advantages/mean``."""

    Args = OnPolicyDistillArgs
    name = "on_policy_distill"
    divergence = "kl"

    def advantages(self, student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        return on_policy_distill_advantages(student, teacher, mask, self.args)


PRESET = AlgorithmPreset(
    advantage_fn=None, policy_loss_fn="ppo", kl_loss_fn="none", kl_penalty_fn="none",
    entropy_loss_fn="none", sample_strategy="default", repeat_times=8, min_repeat_times=1,
    advantage_in_explorer=True,
    batch_layout=TeacherAdvantageRows("on_policy_distill", "on_policy_distill"))
"""On-policy distillation: teacher-student log-ratio advantages from the explorer, the
clipped surrogate, no KL, no entropy term, no reference model, 8 rollouts per task
(Trinity-RFT's ``on_policy_distill`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"on_policy_distill": PRESET}


@hookimpl
def register_experience_operators() -> dict[str, Any]:
    return {"on_policy_distill": OnPolicyDistill}


@hookimpl
def register_workflows() -> dict[str, Any]:
    return {"on_policy_distill_workflow": OnPolicyDistillWorkflow}
