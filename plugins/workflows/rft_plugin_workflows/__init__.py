"""rft-plugin-workflows: workflows selected by ``default_workflow_type``.

- ``simple_workflow`` — one chat turn per rollout, scored by the taskset's reward.
- ``math_workflow`` — asks for ``<think>…</think><answer>…</answer>``.
- ``math_boxed_workflow`` — asks for the final answer in ``\\boxed{}``.
- ``verl_gsm8k_workflow`` — veRL's GSM8K prompt (answer after ``####``), veRL's scoring
  through ``gsm8k_reward``.
- ``agent_openai_workflow`` — answer / feedback episodes through the OpenAI client only;
  the episode comes from the model's call history (needs ``enable_openai_api`` and
  ``enable_history`` on the rollout model).
- ``tool_agent_workflow`` — the model may call a ``calculate`` tool through the OpenAI
  client; the workflow runs the calls and sends the results back until the model answers
  (needs ``enable_auto_tool_choice`` and a ``tool_call_parser`` too).
- ``llm_judge_workflow`` — one chat turn per rollout, rewarded by an auxiliary model's
  verdict probability (``explorer.auxiliary_models``).
- :class:`~rft_plugin_workflows.multi_turn.MultiTurnWorkflow` — base class for
  environment loops; builds one experience per episode with an action mask that covers
  only the model's tokens.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_workflows.agent import AgentArgs, AgentOpenAIWorkflow, JudgeArgs, LLMJudgeWorkflow
from rft_plugin_workflows.multi_turn import MultiTurnArgs, MultiTurnWorkflow
from rft_plugin_workflows.single_turn import (
    MathBoxedWorkflow,
    MathWorkflow,
    SimpleWorkflow,
    VerlGSM8KWorkflow,
)
from rft_plugin_workflows.tools import ToolAgentArgs, ToolAgentWorkflow


__all__ = ["AgentArgs", "AgentOpenAIWorkflow", "JudgeArgs", "LLMJudgeWorkflow",
           "MathBoxedWorkflow", "MathWorkflow", "MultiTurnArgs", "MultiTurnWorkflow",
           "SimpleWorkflow", "ToolAgentArgs", "ToolAgentWorkflow", "VerlGSM8KWorkflow"]


@hookimpl
def register_workflows() -> dict[str, Any]:
    return {
        "simple_workflow": SimpleWorkflow,
        "math_workflow": MathWorkflow,
        "math_boxed_workflow": MathBoxedWorkflow,
        "verl_gsm8k_workflow": VerlGSM8KWorkflow,
        "agent_openai_workflow": AgentOpenAIWorkflow,
        "llm_judge_workflow": LLMJudgeWorkflow,
        "tool_agent_workflow": ToolAgentWorkflow,
    }
