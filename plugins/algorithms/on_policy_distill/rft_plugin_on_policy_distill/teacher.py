"""What the distillation algorithms share: the teacher's log-probs on an experience, the
workflow that attaches them, the explorer operator that turns them into advantages, and
the batch layout that refuses experiences without those advantages.

The teacher is an auxiliary model (``explorer.auxiliary_models``) sharing the student's
tokenizer. A workflow scores every sampled response with it, teacher-forced, and stores
the response tokens' log-probs as ``info["teacher_logprobs"]`` (a list of floats: info
is JSON-stored). rft's advantage functions see neither ``info`` nor the teacher, so the
advantages are computed in the explorer, by an experience operator, from those and the
student's sampling log-probs ``Experience.logprobs``.
"""

from __future__ import annotations

import statistics
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rft.buffer.operators import ExperienceOperator
from rft.errors import RftError
from rft.experience import Experience
from rft.workflow import Workflow

if TYPE_CHECKING:
    from rft.explorer.model_wrapper import ModelWrapper

__all__ = ["TEACHER_KEY", "OnPolicyDistillWorkflow", "OnPolicyDistillWorkflowArgs",
           "TeacherAdvantageOperator", "TeacherAdvantageRows", "attach_teacher_logprobs",
           "teacher_and_student"]

TEACHER_KEY = "teacher_logprobs"
"""``Experience.info`` key of the teacher's log-probs of the response tokens (Trinity-RFT
keeps them in ``Experience.teacher_logprobs``)."""


def attach_teacher_logprobs(exp: Experience, teacher: ModelWrapper, temperature: float) -> None:
    """Score ``exp``'s response with ``teacher`` (teacher-forced, at ``temperature``) and
    store the log-probs as ``info["teacher_logprobs"]``; the per-sequence ``Σ (log π_S −
    log π_T)`` over the action mask goes to ``metrics["distill/kl"]``."""
    logprobs = teacher.logprobs(exp, temperature=temperature).to(torch.float64)  # (R,)
    if logprobs.numel() != exp.response_length:
        raise RftError(f"experience {exp.eid.uid}: the teacher {teacher.name!r} scored "
                       f"{logprobs.numel()} response tokens, the response has "
                       f"{exp.response_length} (does the teacher share the student's "
                       "tokenizer?)")
    exp.info[TEACHER_KEY] = logprobs.tolist()
    if exp.logprobs is not None and exp.action_mask is not None:
        gap = (exp.logprobs.to(torch.float64) - logprobs) * exp.action_mask.to(torch.float64)
        exp.metrics["distill/kl"] = float(gap.sum())


def teacher_and_student(exp: Experience, who: str
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(student, teacher, mask)`` of one experience, each ``(R,)`` float64: its sampling
    log-probs, ``info["teacher_logprobs"]`` and its action mask.

    :raises RftError: one line naming the experience and what is missing.
    """
    where = f"experience {exp.eid.uid}: {who}"
    if exp.logprobs is None:
        raise RftError(f"{where} needs the student's sampling log-probs (Experience.logprobs)")
    if TEACHER_KEY not in exp.info:
        raise RftError(f"{where} needs the teacher's log-probs in info[{TEACHER_KEY!r}]; use a "
                       "workflow that scores each response with the teacher, e.g. "
                       "on_policy_distill_workflow with an auxiliary model as teacher")
    teacher = torch.as_tensor(exp.info[TEACHER_KEY], dtype=torch.float64).reshape(-1)  # (R,)
    if teacher.numel() != exp.response_length:
        raise RftError(f"{where}: info[{TEACHER_KEY!r}] has {teacher.numel()} log-probs, the "
                       f"response has {exp.response_length} tokens")
    assert exp.action_mask is not None
    return exp.logprobs.to(torch.float64), teacher, exp.action_mask.to(torch.float64)


class TeacherAdvantageOperator(ExperienceOperator):
    """An experience operator that sets ``advantages = returns`` of every experience from
    its student and teacher log-probs (:meth:`advantages`), per token.

    Metrics (``pipeline/<name>/…``): ``<divergence>/mean`` and ``<divergence>/std`` (over
    experiences, of the per-sequence sum of :meth:`advantages`' divergence over the
    action mask) and ``advantages/mean`` (of the per-sequence advantage sums).
    """

    name: str = ""
    """The operator's registered name, for messages."""
    divergence: str = "divergence"
    """Metric name of the per-token divergence."""

    @abstractmethod
    def advantages(self, student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages, divergence)`` per token, each ``(R,)``, from the log-probs and the
        action mask, each ``(R,)`` float64."""

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        divergences: list[float] = []
        totals: list[float] = []
        for exp in experiences:
            student, teacher, mask = teacher_and_student(exp, self.name)
            advantages, divergence = self.advantages(student, teacher, mask)  # (R,)
            exp.advantages = advantages.to(torch.float32)
            exp.returns = exp.advantages.clone()
            divergences.append(float((divergence * mask).sum()))
            totals.append(float(advantages.sum()))
        if not experiences:
            return experiences, {}
        return experiences, {
            f"{self.divergence}/mean": statistics.fmean(divergences),
            f"{self.divergence}/std": (statistics.stdev(divergences)
                                       if len(divergences) > 1 else 0.0),
            "advantages/mean": statistics.fmean(totals),
        }


@dataclass(frozen=True)
class TeacherAdvantageRows:
    """Batch layout of the distillation algorithms: rows as given (units of one row); an
    experience without advantages is a one-line :class:`RftError` saying what computes
    them (the trainer cannot: it does not see the teacher)."""

    algorithm: str
    """The algorithm's name, for the message."""
    operator: str
    """The experience operator that computes the advantages in the explorer."""
    unit_size: int = 1
    """Rows per unit."""

    def arrange(self, experiences: Sequence[Experience]) -> list[Experience]:
        """``experiences`` unchanged, after the check above."""
        for i, exp in enumerate(experiences):
            if exp.advantages is None:
                raise RftError(
                    f"experience {i} (eid {exp.eid.uid}): {self.algorithm} learns from "
                    "advantages the explorer computes from the teacher's log-probs, and "
                    f"this one has none; add {{name: {self.operator}}} to "
                    "data_processor.experience_pipeline.operators and a workflow that "
                    f"stores info[{TEACHER_KEY!r}] (e.g. on_policy_distill_workflow with an "
                    "auxiliary model as teacher)")
        return list(experiences)


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
