"""Single-turn workflows: one prompt, ``repeat_times`` sampled answers, one reward each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft.experience import Experience
from rft.workflow import Workflow


@dataclass
class SimpleArgs:
    """Arguments of the single-turn workflows (``workflow_args``)."""

    system_prompt: str | None = None
    """System prompt; ``None`` keeps the taskset's (``format.system_prompt``) or the
    workflow's own default."""
    reply_prefix: str | None = None
    """Text appended to the user prompt (e.g. an instruction)."""


class SimpleWorkflow(Workflow):
    """Chat once with the task's messages and score every response."""

    Args = SimpleArgs
    default_system_prompt: str | None = None
    """System prompt used when neither the workflow args nor the taskset set one."""
    default_reply_prefix: str | None = None
    """Instruction appended to the user prompt when the args set none."""

    def messages(self) -> list[dict[str, Any]]:
        """The conversation sent to the model."""
        args = self.args or SimpleArgs()
        messages = self.task.chat_messages()
        system = args.system_prompt or self.task.system_prompt or self.default_system_prompt
        if system and not any(m["role"] == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system})
        suffix = args.reply_prefix or self.default_reply_prefix
        if suffix and messages and messages[-1]["role"] == "user":
            messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']}{suffix}"}
        return messages

    def run(self) -> list[Experience]:
        messages = self.messages()
        experiences = self.model.chat(messages, n=self.task.repeat_times, **self.task.sampling)
        for exp in experiences:
            self.score(exp, self.response_text(exp))
        self.attach_greedy_baseline(experiences, messages)
        return experiences


class MathWorkflow(SimpleWorkflow):
    """Reason in ``<think>`` tags, answer in ``<answer>`` tags (scored by e.g. ``math_reward``)."""

    default_system_prompt = (
        "A conversation between User and Assistant. The user asks a question, and the "
        "Assistant solves it. The Assistant first thinks about the reasoning process and "
        "then gives the answer. The reasoning process and the answer are enclosed within "
        "<think> </think> and <answer> </answer> tags, respectively, i.e., "
        "<think> reasoning process here </think> <answer> answer here </answer>.")


class MathBoxedWorkflow(SimpleWorkflow):
    """Answer with the final result in ``\\boxed{}`` (scored by ``math_boxed_reward``)."""

    default_reply_prefix = "\nPlease reason step by step, and put your final answer within \\boxed{}."


class VerlGSM8KWorkflow(SimpleWorkflow):
    """veRL's GSM8K set-up: the question followed by its instruction to end with
    ``#### <answer>``, as a single user message (scored by ``gsm8k_reward``)."""

    default_reply_prefix = " Let's think step by step and output the final answer after \"####\"."
