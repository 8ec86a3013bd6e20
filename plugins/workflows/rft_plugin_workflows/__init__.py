"""rft-plugin-workflows: workflows selected by ``default_workflow_type``.

Single turn (:mod:`~rft_plugin_workflows.single_turn`; args ``system_prompt``,
``reply_prefix``, ``use_base``):

- ``simple_workflow`` — one chat turn per rollout, scored by the taskset's reward.
- ``math_workflow`` (``async_math_workflow``) — asks for ``<think>…</think><answer>…</answer>``.
- ``math_boxed_workflow`` (``async_math_boxed_workflow``) — asks for the final answer in
  ``\\boxed{}``; args ``with_think``, ``format_score_coef``.
- ``verl_gsm8k_workflow`` — veRL's GSM8K prompt (answer after ``####``), veRL's scoring
  through ``gsm8k_reward``.
- ``toolcall_workflow`` (``tool_call_workflow``) — Tool-N1's tool-call prediction with its
  binary reward.

Judged by a model (:mod:`~rft_plugin_workflows.judges`; the judge is an auxiliary model):

- ``math_rm_workflow`` (``async_math_rm_workflow``) — a reward model's verdict probability.
- ``math_ruler_workflow`` (``async_math_ruler_workflow``) — RULER: a judge scores all
  answers of a task at once.
- ``math_trainable_ruler_workflow`` — RULER with the policy as its own (trained) judge.
- ``rubric_judge_workflow`` — a judge rates each answer against the task's rubrics.
- ``llm_judge_workflow`` — a judge's verdict probability against the reference answer.

With images (:mod:`~rft_plugin_workflows.multimodal`; a vision-language model, the
taskset's ``format.image_key``):

- ``simple_mm_workflow`` (``async_simple_mm_workflow``) — one chat turn with the row's
  images (by default asking for ``<think>`` and a ``\\boxed{}`` answer, as Trinity-RFT's).

Multi-turn:

- ``agent_openai_workflow`` — answer / feedback episodes through the OpenAI client only;
  the episode comes from the model's call history (needs ``enable_openai_api`` and
  ``enable_history`` on the rollout model).
- ``tool_agent_workflow`` — the model may call a ``calculate`` tool through the OpenAI
  client; the workflow runs the calls and sends the results back until the model answers
  (needs ``enable_auto_tool_choice`` and a ``tool_call_parser`` too).
- ``step_wise_math_workflow`` — answer / score / retry, one experience per answer.
- ``environment_workflow`` — plays the taskset's ``environment`` (any registered
  :class:`rft.environment.Environment`) with the policy; one experience per episode or per
  step (:mod:`~rft_plugin_workflows.environment`, docs/agents.md).
- :class:`~rft_plugin_workflows.multi_turn.MultiTurnWorkflow` — base class for
  environment loops; builds one experience per episode with an action mask that covers
  only the model's tokens.
- :class:`~rft_plugin_workflows.step_wise.StepWiseWorkflow` — base class for environment
  loops with one experience (and reward) per step.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_workflows.agent import AgentArgs, AgentOpenAIWorkflow, JudgeArgs, LLMJudgeWorkflow
from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow
from rft_plugin_workflows.judges import (
    MathRMWorkflow,
    MathRULERWorkflow,
    MathTrainableRULERWorkflow,
    RewardModelArgs,
    RubricJudgeArgs,
    RubricJudgeWorkflow,
    RulerArgs,
    TrainableRulerArgs,
)
from rft_plugin_workflows.multi_turn import MultiTurnArgs, MultiTurnWorkflow
from rft_plugin_workflows.multimodal import SimpleMMWorkflow
from rft_plugin_workflows.single_turn import (
    MathBoxedArgs,
    MathBoxedWorkflow,
    MathWorkflow,
    SimpleArgs,
    SimpleWorkflow,
    VerlGSM8KWorkflow,
)
from rft_plugin_workflows.step_wise import (
    StepWiseArgs,
    StepWiseMathArgs,
    StepWiseMathWorkflow,
    StepWiseWorkflow,
)
from rft_plugin_workflows.toolcall import ToolCallArgs, ToolCallWorkflow
from rft_plugin_workflows.tools import ToolAgentArgs, ToolAgentWorkflow


__all__ = ["AgentArgs", "AgentOpenAIWorkflow", "EnvironmentArgs", "EnvironmentWorkflow",
           "JudgeArgs", "LLMJudgeWorkflow",
           "MathBoxedArgs", "MathBoxedWorkflow", "MathRMWorkflow", "MathRULERWorkflow",
           "MathTrainableRULERWorkflow", "MathWorkflow", "MultiTurnArgs", "MultiTurnWorkflow",
           "RewardModelArgs", "RubricJudgeArgs", "RubricJudgeWorkflow", "RulerArgs",
           "SimpleArgs", "SimpleMMWorkflow", "SimpleWorkflow", "StepWiseArgs",
           "StepWiseMathArgs",
           "StepWiseMathWorkflow", "StepWiseWorkflow", "ToolAgentArgs", "ToolAgentWorkflow",
           "ToolCallArgs", "ToolCallWorkflow", "TrainableRulerArgs", "VerlGSM8KWorkflow",
           "WORKFLOWS"]

WORKFLOWS: dict[str, type] = {
    "simple_workflow": SimpleWorkflow,
    "math_workflow": MathWorkflow,
    "async_math_workflow": MathWorkflow,
    "math_boxed_workflow": MathBoxedWorkflow,
    "async_math_boxed_workflow": MathBoxedWorkflow,
    "verl_gsm8k_workflow": VerlGSM8KWorkflow,
    "toolcall_workflow": ToolCallWorkflow,
    "tool_call_workflow": ToolCallWorkflow,
    "math_rm_workflow": MathRMWorkflow,
    "async_math_rm_workflow": MathRMWorkflow,
    "math_ruler_workflow": MathRULERWorkflow,
    "async_math_ruler_workflow": MathRULERWorkflow,
    "math_trainable_ruler_workflow": MathTrainableRULERWorkflow,
    "rubric_judge_workflow": RubricJudgeWorkflow,
    "llm_judge_workflow": LLMJudgeWorkflow,
    "agent_openai_workflow": AgentOpenAIWorkflow,
    "tool_agent_workflow": ToolAgentWorkflow,
    "step_wise_math_workflow": StepWiseMathWorkflow,
    "environment_workflow": EnvironmentWorkflow,
    "simple_mm_workflow": SimpleMMWorkflow,
    "async_simple_mm_workflow": SimpleMMWorkflow,
}
"""Every name this distribution registers. Trinity-RFT's ``async_*`` names are the same
workflows: rft runs every workflow in its own thread, so there is no separate async form."""


@hookimpl
def register_workflows() -> dict[str, Any]:
    return dict(WORKFLOWS)
