"""rft-plugin-agentscope: AgentScope ReAct agents as rft workflows, driven through rft's
OpenAI endpoint so that every model call of the agent is an experience
(:mod:`rft_plugin_agentscope.workflows`). AgentScope itself is imported only when an
episode runs."""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_agentscope.workflows import (AgentScopeReActMathWorkflow,
                                             AgentScopeReActWorkflow,
                                             AgentScopeV0ReActMathWorkflow, ReActArgs,
                                             ReActTemplateArgs, ReActV0Args)

__all__ = ["AgentScopeReActMathWorkflow", "AgentScopeReActWorkflow",
           "AgentScopeV0ReActMathWorkflow", "ReActArgs", "ReActTemplateArgs", "ReActV0Args"]


@hookimpl
def register_workflows() -> dict[str, Any]:
    return {"agentscope_react_workflow": AgentScopeReActWorkflow,
            "as_react_workflow": AgentScopeReActWorkflow,
            "agentscope_react_math_workflow": AgentScopeReActMathWorkflow,
            "agentscopev0_react_math_workflow": AgentScopeV0ReActMathWorkflow,
            # Trinity-RFT's earlier names of its AgentScope-0.x math agent
            "agentscope_reactv2_math_workflow": AgentScopeV0ReActMathWorkflow,
            "agentscope_reactv2_gsm8k_workflow": AgentScopeV0ReActMathWorkflow}
