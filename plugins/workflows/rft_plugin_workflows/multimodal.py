"""Vision-language workflows: the single-turn workflows with the task's images.

- ``simple_mm_workflow`` (``async_simple_mm_workflow``, Trinity-RFT's names) — one chat
  turn per rollout with the row's images (``format.image_key``) before the first user
  text, rendered and expanded by the model's processor
  (:meth:`rft.rollout.model_wrapper.ModelWrapper.chat_mm`); scored by the taskset's reward
  function, unchanged, or ``math_boxed_reward`` when the taskset names none (Trinity-RFT's
  ``grpo_vlm`` example names none; its system prompt asks for a boxed answer). As Trinity-RFT's, it asks for reasoning in ``<think>`` and the
  answer in ``\\boxed{}`` unless the args or the taskset give a system prompt (Trinity-RFT
  has no other vision workflow: this is its math variant). A task without images is an
  ordinary chat.

:class:`VisionSampling` gives any single-turn workflow the images (a plugin's subclass).
"""

from __future__ import annotations

from typing import Any

from rft.errors import RftError
from rft.experience import Experience
from rft_plugin_workflows.single_turn import MathBoxedArgs, SimpleWorkflow

MM_MATH_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves math problems about images. First think "
    "about the reasoning process, written as <think>\n ...your reasoning... </think>\n, "
    "then put your final answer in \\boxed{}.")
"""``simple_mm_workflow``'s default system prompt (Trinity-RFT's asks the same)."""


class VisionSampling(SimpleWorkflow):
    """:meth:`sample` through :meth:`~rft.rollout.model_wrapper.ModelWrapper.chat_mm` when
    the task has images (mixed into a single-turn workflow)."""

    takes_images = True

    def sample(self, n: int, **overrides: Any) -> list[Experience]:
        if self.task.videos:
            raise RftError(f"{type(self).__name__}: task {self.task.index} of "
                           f"{self.task.taskset!r} has videos; rft's workflows send images "
                           f"only (docs/multimodal.md)")
        if not self.task.images:
            return super().sample(n, **overrides)
        if getattr(self.options, "use_base", False):
            raise RftError(f"{type(self).__name__}: use_base renders plain text and cannot "
                           f"carry the task's images")
        sampling = {**self.task.sampling, **overrides}
        return self.model.chat_mm(self.messages(), self.task.images, n=n, **sampling)


class SimpleMMWorkflow(VisionSampling):
    """``simple_mm_workflow``: one chat turn with the task's images. Its args are
    ``math_boxed_workflow``'s (Trinity-RFT's ``mix_vlm`` sets ``with_think``): a reward
    declaring ``with_think`` / ``format_score_coef`` (``math_boxed_reward``) gets them."""

    Args = MathBoxedArgs
    default_system_prompt = MM_MATH_SYSTEM_PROMPT
    default_reward_fn = "math_boxed_reward"  # its prompt asks for the answer in \boxed{}

    def reward_inputs(self, experience: Experience) -> dict[str, Any]:
        return {**super().reward_inputs(experience), "with_think": self.options.with_think,
                "format_score_coef": self.options.format_score_coef}


__all__ = ["MM_MATH_SYSTEM_PROMPT", "SimpleMMWorkflow", "VisionSampling"]
