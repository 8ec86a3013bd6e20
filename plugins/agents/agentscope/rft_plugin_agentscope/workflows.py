"""Trinity-RFT's AgentScope ReAct workflows on AgentScope 2 and rft's OpenAI endpoint.

Each episode an AgentScope ReAct agent (:mod:`rft_plugin_agentscope.react`) gets the task's
question and may call its tools — for the math agents one, ``execute_python_code``
(:mod:`rft_plugin_agentscope.sandbox`) — until it answers without a call or has made
``max_iters`` reasoning steps. Its final reply's text is scored with the taskset's reward
function (default ``math_boxed_reward``) against the task's truth (a GSM8K answer
``… #### 72`` is read as ``72``, as in Trinity-RFT).

Every model call of the agent went through the endpoint and is in the workflow's history:
by default each call is **one experience** (Trinity-RFT's form: ``eid.step`` 0, 1, …,
``info["episode"]`` and the metric ``step_wise/steps``, what ``multi_step_grpo`` reads),
every one with the episode's reward; with ``merge_turns: true`` the episode is **one**
experience whose action mask covers the model's tokens only (tool results masked out).
Every experience of an episode carries ``info["agent/transcript"]``
(:func:`~rft_plugin_agentscope.react.transcript`: the query, the replies, each tool call
with its arguments and each tool result) and the metrics ``agent/tool_calls``,
``agent/tool_errors``, ``agent/model_calls`` and ``reward/<part>``.

Needs ``explorer.rollout_model.enable_openai_api``, ``enable_history``, and, for the agent
to call tools, ``enable_auto_tool_choice`` with a ``tool_call_parser`` reading the model's
format (``hermes`` for Qwen).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError
from rft.experience import EID, Experience
from rft.workflow import Workflow, score_response
from rft_plugin_agentscope.react import (AgentTool, ToolLog, ask, react_agent, text_of,
                                         transcript)
from rft_plugin_agentscope.sandbox import PythonLimits, run_python

MATH_PROMPT = ("You solve math problems step by step and may use tools. To calculate or to "
               "check a result, call execute_python_code with a Python program that prints "
               "what you need. Give your final answer within \\boxed{}.")
"""System prompt of the math agents (rft's wording of Trinity-RFT's)."""

TEMPLATES: dict[str, str] = {"gsm8k": MATH_PROMPT}
"""``agentscope_react_workflow``'s task types (``workflow_args.type``): system prompt."""

NOT_SHIPPED: dict[str, str] = {
    "email_search": "it searches Trinity-RFT's e-mail corpus (an Enron inbox index built "
                    "offline) and judges answers with an auxiliary model; rft ships no corpus",
}
"""Trinity-RFT task types rft refuses, with the reason."""


def python_tool(limits: PythonLimits) -> AgentTool:
    """``execute_python_code``: the code runs in a limited child interpreter."""

    def run(code: str) -> tuple[str, bool]:
        result = run_python(str(code), limits)
        return result.text, result.failed

    return AgentTool(
        name="execute_python_code",
        description="Run a Python program in a fresh interpreter and return what it printed "
                    "(stdout, then stderr). Print every value you need.",
        parameters={"type": "object",
                    "properties": {"code": {"type": "string",
                                            "description": "the Python program to run"}},
                    "required": ["code"]},
        run=run)


def gsm8k_truth(truth: Any) -> Any:
    """The answer part of a GSM8K solution (after ``####``); other truths unchanged."""
    if isinstance(truth, str) and "####" in truth:
        return truth.split("####")[-1].strip()
    return truth


@dataclass
class ReActArgs:
    """Arguments of ``agentscope_react_math_workflow`` (``workflow_args``)."""

    max_iters: int = 10
    """Most reasoning steps (model calls) of the agent per episode (AgentScope's
    ``ReActConfig.max_iters``)."""
    tool_timeout: float = 10.0
    """Wall-clock seconds one ``execute_python_code`` call may run."""
    tool_memory_mb: int = 1024
    """Address space of the code's interpreter, in MiB."""
    merge_turns: bool = False
    """One experience per episode (the calls merged, tool results masked out) instead of
    one per model call."""
    system_prompt: str | None = None
    """The agent's system prompt; ``None``: the workflow's own."""

    def __post_init__(self) -> None:
        if self.max_iters < 1:
            raise ValueError(f"max_iters must be >= 1, got {self.max_iters}")
        if not self.tool_timeout > 0:
            raise ValueError(f"tool_timeout must be > 0, got {self.tool_timeout}")
        if self.tool_memory_mb < 64:
            raise ValueError(f"tool_memory_mb must be >= 64, got {self.tool_memory_mb}")


@dataclass
class ReActV0Args(ReActArgs):
    """Arguments of ``agentscopev0_react_math_workflow``: Trinity-RFT's AgentScope-0.x
    agent's limits (5 reasoning steps)."""

    max_iters: int = 5
    """Most reasoning steps per episode (Trinity-RFT's ``ReActAgentV2(max_iters=5)``)."""


@dataclass
class ReActTemplateArgs(ReActArgs):
    """Arguments of ``agentscope_react_workflow`` / ``as_react_workflow``."""

    type: str = "gsm8k"
    """The task type, which picks the system prompt and tools (Trinity-RFT's template)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.type in NOT_SHIPPED:
            raise ValueError(f"type {self.type!r} is not supported: {NOT_SHIPPED[self.type]}")
        if self.type not in TEMPLATES:
            raise ValueError(f"unknown type {self.type!r} (known: {', '.join(TEMPLATES)})")


class AgentScopeReActMathWorkflow(Workflow):
    """``agentscope_react_math_workflow``: a ReAct math agent with a Python tool (module
    docstring)."""

    Args: type | None = ReActArgs
    default_reward_fn = "math_boxed_reward"
    workflow_name = "agentscope_react_math_workflow"

    @property
    def options(self) -> ReActArgs:
        args = self.args
        return args if isinstance(args, ReActArgs) else ReActArgs()

    def system_prompt(self) -> str:
        return self.options.system_prompt or MATH_PROMPT

    def tools(self) -> list[AgentTool]:
        return [python_tool(PythonLimits(timeout=self.options.tool_timeout,
                                         memory_mb=self.options.tool_memory_mb))]

    def query(self) -> str:
        """The user's question: the task's prompt, else its last message's text."""
        if self.task.prompt:
            return self.task.prompt
        messages = self.task.messages or []
        return str(messages[-1].get("content", "")) if messages else ""

    def run(self) -> list[Experience]:
        return [exp for _ in range(self.task.repeat_times) for exp in self.episode()]

    def score_answer(self, answer: str) -> dict[str, float]:
        if self.task.reward_fn is None:
            raise RftError(f"taskset {self.task.taskset!r}: {self.workflow_name} needs a "
                           "reward function (default_reward_fn_type)")
        return score_response(self.task.reward_fn, answer, gsm8k_truth(self.task.truth),
                              self.task.reward_args,
                              name=getattr(self.task.reward_fn, "__name__", "reward function"))

    async def play(self, log: ToolLog) -> tuple[str, list[dict[str, Any]]]:
        """One agent episode: its final answer and transcript."""
        agent = await react_agent(self.model, name=self.workflow_name,
                                  system_prompt=self.system_prompt(), tools=self.tools(),
                                  sampling=dict(self.task.sampling),
                                  max_iters=self.options.max_iters, log=log)
        try:
            reply = await ask(agent, self.query())
        finally:
            await agent.model.client.close()
        return text_of(reply), transcript(agent)

    def episode(self) -> list[Experience]:
        """One episode's experiences (module docstring)."""
        log = ToolLog()
        answer, record = asyncio.run(self.play(log))
        parts = self.score_answer(answer)
        reward = sum(parts.values())
        merge = self.options.merge_turns
        experiences = self.model.extract_experience_from_history(merge_turns=merge)
        if not experiences:
            raise RftError(f"{self.workflow_name}: the agent made no model call")
        if merge and len(experiences) != 1:
            raise RftError(f"{self.workflow_name}: merge_turns: the history holds "
                           f"{len(experiences)} conversations for one episode, expected 1 "
                           "(did the agent change earlier messages between calls?)")
        episode_id = uuid.uuid4().hex[:12]
        calls = float(len(experiences)) if not merge else experiences[0].metrics.get(
            "multi_turn/turns", 1.0)
        for step, exp in enumerate(experiences):
            exp.reward = reward
            if not merge:  # a step of an episode, as multi_step_grpo reads them
                exp.eid = EID(step=step, suffix=f"step{step}")
                exp.info["episode"] = episode_id
                exp.metrics["step_wise/steps"] = float(len(experiences))
            exp.info["agent/transcript"] = record
            exp.metrics.update({f"reward/{k}": v for k, v in parts.items()})
            exp.metrics.update({"agent/tool_calls": float(log.calls),
                                "agent/tool_errors": float(log.errors),
                                "agent/model_calls": float(calls)})
        return experiences


class AgentScopeV0ReActMathWorkflow(AgentScopeReActMathWorkflow):
    """``agentscopev0_react_math_workflow``: Trinity-RFT's AgentScope-0.x math agent
    (``ReActAgentV2`` with ``execute_python_code``, 5 steps), on AgentScope 2's agent."""

    Args = ReActV0Args
    workflow_name = "agentscopev0_react_math_workflow"


class AgentScopeReActWorkflow(AgentScopeReActMathWorkflow):
    """``agentscope_react_workflow`` (alias ``as_react_workflow``): Trinity-RFT's templated
    ReAct agent; ``workflow_args.type`` picks the template (``gsm8k``)."""

    Args = ReActTemplateArgs
    workflow_name = "agentscope_react_workflow"

    def system_prompt(self) -> str:
        args = self.args
        kind = args.type if isinstance(args, ReActTemplateArgs) else "gsm8k"
        return self.options.system_prompt or TEMPLATES[kind]


__all__ = ["MATH_PROMPT", "NOT_SHIPPED", "TEMPLATES", "AgentScopeReActMathWorkflow",
           "AgentScopeReActWorkflow", "AgentScopeV0ReActMathWorkflow", "ReActArgs",
           "ReActTemplateArgs", "ReActV0Args", "gsm8k_truth", "python_tool"]
