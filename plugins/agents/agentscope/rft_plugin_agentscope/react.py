"""An AgentScope ReAct agent talking to rft's OpenAI endpoint.

:func:`react_agent` builds an ``agentscope.agent.Agent`` (AgentScope 2's ReAct agent: it
reasons, calls tools, reads their results, until it answers without a call or runs out of
``max_iters``) whose chat model is AgentScope's own ``OpenAIChatModel`` pointed at the
workflow's session on the explorer's OpenAI-compatible endpoint
(:attr:`rft.rollout.model_wrapper.ModelWrapper.api_address`). Every model call of the agent
is therefore an ordinary endpoint request, recorded in the workflow view's history with
its exact token ids and log-probs (``enable_history``), and the tool calls come back
parsed by the endpoint's ``tool_call_parser``.

Two AgentScope defaults are turned off because they would make prompts differ between
calls of one episode: the runtime-state injection (the current time, context usage) and
streaming. Tools are allowed without asking (AgentScope asks a user to confirm custom
tools by default; an RL episode has no user).

:func:`transcript` turns the agent's context into plain JSON (the user's query, each
reply's text, each tool call with its arguments and each tool result) — what the
workflows store in ``info["agent/transcript"]`` of every experience of the episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rft.rollout.model_wrapper import ModelWrapper

if TYPE_CHECKING:
    from agentscope.tool import ToolChunk

_PARAMETERS = ("temperature", "top_p", "max_tokens")
"""Rollout args AgentScope's ``OpenAIChatModel.Parameters`` carries itself."""
_NOT_SENT = ("n", "logprobs")
"""Rollout args an agent call does not send (one reply per call; log-probs come from the
history)."""


@dataclass(frozen=True)
class AgentTool:
    """A tool offered to the agent: its OpenAI function spec and implementation."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments."""
    run: Callable[..., tuple[str, bool]]
    """``run(**arguments) -> (result text, failed)``."""


@dataclass
class ToolLog:
    """Counts of one episode's tool calls (metrics ``agent/tool_calls``,
    ``agent/tool_errors``)."""

    calls: int = 0
    errors: int = 0
    results: list[str] = field(default_factory=list)


def sampling_parameters(sampling: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task's rollout args split into ``OpenAIChatModel.Parameters`` fields and the
    request's ``extra_body`` (the rest, e.g. ``seed``, ``top_k``)."""
    parameters: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in sampling.items():
        if key in _NOT_SENT or value is None:
            continue
        (parameters if key in _PARAMETERS else extra)[key] = value
    return parameters, extra


def _wrapped(tool: AgentTool, log: ToolLog) -> Callable[..., ToolChunk]:
    """``tool`` as an AgentScope tool function: counted in ``log``, bad arguments an error
    text the agent reads."""
    from agentscope.message import TextBlock, ToolResultState
    from agentscope.tool import ToolChunk

    def call(**arguments: Any) -> ToolChunk:
        log.calls += 1
        try:
            text, failed = tool.run(**arguments)
        except (TypeError, ValueError) as exc:
            text, failed = f"error: {exc}", True
        log.errors += int(failed)
        log.results.append(text)
        # the state AgentScope gives a plain function's result (it completes it itself)
        return ToolChunk(content=[TextBlock(text=text)], state=ToolResultState.RUNNING)

    call.__name__ = tool.name
    return call


async def react_agent(view: ModelWrapper, *, name: str, system_prompt: str,
                      tools: list[AgentTool], sampling: dict[str, Any], max_iters: int,
                      log: ToolLog) -> Any:
    """An AgentScope ``Agent`` on ``view``'s endpoint session with ``tools`` (module
    docstring); tool calls are counted in ``log``."""
    from agentscope.agent import Agent, InjectionConfig, ReActConfig
    from agentscope.credential import OpenAICredential
    from agentscope.model import OpenAIChatModel
    from agentscope.permission import PermissionBehavior, PermissionDecision
    from agentscope.tool import FunctionTool, Toolkit
    from pydantic import SecretStr

    key = view.server.api_key if view.server is not None else None
    parameters, extra = sampling_parameters(sampling)
    model = OpenAIChatModel(
        OpenAICredential(api_key=SecretStr(key or "EMPTY"), base_url=f"{view.api_address}/v1"),
        model=view.model_path, parameters=OpenAIChatModel.Parameters(**parameters),
        stream=False, max_retries=0, extra_body=extra or None,
        client_kwargs={"timeout": None})
    toolkit = Toolkit()
    allow = PermissionDecision(behavior=PermissionBehavior.ALLOW,
                               message="rft episodes run their tools without asking")
    for tool in tools:
        await toolkit.add_tool(FunctionTool(_wrapped(tool, log), name=tool.name,
                                            description=tool.description,
                                            input_schema=tool.parameters, permission=allow))
    return Agent(name=name, system_prompt=system_prompt, model=model, toolkit=toolkit,
                 react_config=ReActConfig(max_iters=max_iters),
                 injection_config=InjectionConfig(inject_runtime_state=False))


async def ask(agent: Any, query: str) -> Any:
    """The agent's final reply (an AgentScope ``Msg``) to the user's ``query``."""
    from agentscope.message import UserMsg

    return await agent.reply(UserMsg(name="user", content=query))


def text_of(message: Any) -> str:
    """The text blocks of an AgentScope message, joined."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(block, "text", "") for block in content
                   if getattr(block, "type", None) == "text")


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return "".join(getattr(block, "text", "") for block in output)


def transcript(agent: Any) -> list[dict[str, Any]]:
    """The agent's context as JSON: ``{"role": "user" | "assistant", "text": …}``,
    ``{"role": "assistant", "tool_call": {"id", "name", "arguments"}}`` and
    ``{"role": "tool", "tool_call_id", "name", "result"}`` entries, in order."""
    entries: list[dict[str, Any]] = []
    for message in agent.state.context:
        for block in message.content:
            kind = getattr(block, "type", None)
            if kind == "text" and block.text:
                entries.append({"role": message.role, "text": block.text})
            elif kind == "tool_call":
                try:
                    arguments: Any = json.loads(block.input or "{}")
                except json.JSONDecodeError:
                    arguments = block.input
                entries.append({"role": "assistant", "tool_call": {
                    "id": block.id, "name": block.name, "arguments": arguments}})
            elif kind == "tool_result":
                entries.append({"role": "tool", "tool_call_id": block.id, "name": block.name,
                                "result": _output_text(block.output)})
    return entries


__all__ = ["AgentTool", "ToolLog", "ask", "react_agent", "sampling_parameters", "text_of",
           "transcript"]
