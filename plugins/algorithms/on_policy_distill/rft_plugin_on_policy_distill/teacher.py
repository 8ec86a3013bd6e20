"""What the distillation algorithms share: the teacher's log-probs on an experience, the
workflow that attaches them, and the two log-probs an advantage fn compares.

The teacher is an auxiliary model (``explorer.auxiliary_models``) sharing the student's
tokenizer. A workflow scores every sampled response with it, teacher-forced, and stores
the response tokens' log-probs in ``Experience.teacher_logprobs`` (Trinity-RFT's field).
The trainer pads them like the sampling log-probs and hands both to the advantage fn:
``AdvantageInputs.teacher_log_prob`` and ``AdvantageInputs.rollout_log_prob``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rft.contracts import AdvantageInputs
from rft.errors import RftError
from rft.experience import Experience
from rft.workflow import Workflow

if TYPE_CHECKING:
    from rft.rollout.model_wrapper import ModelWrapper

__all__ = ["MATH_INSTRUCTION", "MATH_SYSTEM_PROMPT", "OnPolicyDistillMathWorkflow",
           "OnPolicyDistillWorkflow", "OnPolicyDistillWorkflowArgs", "attach_teacher_logprobs",
           "student_and_teacher"]


def attach_teacher_logprobs(exp: Experience, teacher: ModelWrapper, temperature: float) -> None:
    """Score ``exp``'s response with ``teacher`` (teacher-forced, at ``temperature``) into
    ``exp.teacher_logprobs`` ``(R,)``; the per-sequence ``Σ (log π_S − log π_T)`` over the
    action mask goes to ``metrics["distill/kl"]``."""
    logprobs = teacher.logprobs(exp, temperature=temperature).to(torch.float32)  # (R,)
    if logprobs.numel() != exp.response_length:
        raise RftError(f"experience {exp.eid.uid}: the teacher {teacher.name!r} scored "
                       f"{logprobs.numel()} response tokens, the response has "
                       f"{exp.response_length} (does the teacher share the student's "
                       "tokenizer?)")
    exp.teacher_logprobs = logprobs
    if exp.logprobs is not None and exp.action_mask is not None:
        gap = (exp.logprobs.double() - logprobs.double()) * exp.action_mask.double()  # (R,)
        exp.metrics["distill/kl"] = float(gap.sum())


def student_and_teacher(inputs: AdvantageInputs, who: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log π_S, log π_T)``, each ``(B, T)`` float64: the engine's sampling log-probs and
    the teacher's.

    :raises rft.contracts.MissingInputError: one line naming ``who`` and what provides
        the missing input (for the teacher: a workflow such as
        ``on_policy_distill_workflow`` with an auxiliary model as teacher).
    """
    student = inputs.require("rollout_log_prob", who)
    teacher = inputs.require("teacher_log_prob", who)
    return student.double(), teacher.double()


@dataclass
class OnPolicyDistillWorkflowArgs:
    """Arguments of ``on_policy_distill_workflow`` (``workflow_args``)."""

    teacher: str = "0"
    """The teacher: name of an ``explorer.auxiliary_models`` entry, or its position
    (default ``"0"``: the first, as Trinity-RFT takes)."""
    temperature: float = 1.0
    """Temperature the teacher scores the responses at."""


class OnPolicyDistillWorkflow(Workflow):
    """Trinity-RFT's ``on_policy_distill_workflow``: the student answers the task's
    messages ``repeat_times`` times; the teacher scores every answer
    (:func:`attach_teacher_logprobs`). The reward is the taskset's reward function when
    one is configured (for monitoring: the distillation advantages ignore it), else 0.
    """

    Args = OnPolicyDistillWorkflowArgs

    def run(self) -> list[Experience]:
        args = self.args or OnPolicyDistillWorkflowArgs()
        teacher = self.auxiliary_model(args.teacher)
        experiences = self.model.chat(self.task.chat_messages(), n=self.task.repeat_times,
                                      **self.task.sampling)
        for exp in experiences:
            attach_teacher_logprobs(exp, teacher, args.temperature)
            if self.task.reward_fn is not None:
                self.score(exp, self.response_text(exp))
            else:
                exp.reward = 0.0
        return experiences


MATH_SYSTEM_PROMPT = "You are a helpful assistant."
"""System prompt of ``on_policy_distill_math_workflow`` (Qwen2.5-Math's evaluation format)."""

MATH_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
"""What ``on_policy_distill_math_workflow`` appends to the question."""


class OnPolicyDistillMathWorkflow(OnPolicyDistillWorkflow):
    """Trinity-RFT's ``on_policy_distill_math_workflow``: on-policy distillation on maths
    questions in Qwen2.5-Math's format — the system prompt :data:`MATH_SYSTEM_PROMPT`, the
    task's prompt followed by :data:`MATH_INSTRUCTION` — each answer rewarded with its
    accuracy (1 when its last ``\\boxed{}`` is equivalent to the task's truth, else 0;
    metric ``accuracy``), for monitoring: the distillation advantages ignore it. A taskset
    reward function, when configured, scores instead.
    """

    def messages(self) -> list[dict[str, str]]:
        """The chat the student answers."""
        return [{"role": "system", "content": MATH_SYSTEM_PROMPT},
                {"role": "user", "content": f"{self.task.prompt or ''}{MATH_INSTRUCTION}"}]

    def accuracy(self, response: str) -> float:
        """1.0 when the response's last ``\\boxed{}`` is equivalent to the truth, else 0.0
        (rft-plugin-rewards' ``math_boxed_reward``)."""
        from rft_plugin_rewards.math import math_boxed_reward

        if self.task.truth is None:
            return 0.0
        return math_boxed_reward(response, self.task.truth)["accuracy"]

    def run(self) -> list[Experience]:
        args = self.args or OnPolicyDistillWorkflowArgs()
        teacher = self.auxiliary_model(args.teacher)
        experiences = self.model.chat(self.messages(), n=self.task.repeat_times,
                                      **self.task.sampling)
        for exp in experiences:
            attach_teacher_logprobs(exp, teacher, args.temperature)
            text = self.response_text(exp)
            if self.task.reward_fn is not None:
                self.score(exp, text)
            else:
                exp.reward = self.accuracy(text)
                exp.metrics["accuracy"] = exp.reward
        return experiences
