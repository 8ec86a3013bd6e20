"""Single-turn workflows: one prompt, ``repeat_times`` sampled answers, one reward each.

:class:`SimpleWorkflow` is built from small steps a subclass can replace:
:meth:`~SimpleWorkflow.messages` (the conversation), :meth:`~SimpleWorkflow.sample` (chat,
or raw text for a base model with ``use_base``), :meth:`~SimpleWorkflow.reward` (score
the answers; the judge workflows replace it) and :meth:`~SimpleWorkflow.attach_baseline`
(ReMax's greedy baseline, scored by the same :meth:`~SimpleWorkflow.reward`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft.experience import Experience
from rft.workflow import Workflow
from rft_plugin_workflows.scoring import reward_parts


@dataclass
class SimpleArgs:
    """Arguments of the single-turn workflows (``workflow_args``)."""

    system_prompt: str | None = None
    """System prompt; ``None`` keeps the taskset's (``format.system_prompt``) or the
    workflow's own default."""
    reply_prefix: str | None = None
    """Text appended to the user prompt (e.g. an instruction)."""
    use_base: bool = False
    """Prompt a base model with plain text instead of the chat template (Trinity-RFT's
    ``use_base``): ``System:<system>\\nUser:\\n<prompt>\\nAssistant:\\n``."""


def base_model_prompt(messages: list[dict[str, Any]]) -> str:
    """A conversation as Trinity-RFT's base-model prompt: ``System:<text>`` then
    ``User:\\n<text>`` (``Assistant:`` / ``Tool:`` likewise), one per line, ending with
    ``Assistant:\\n`` for the answer."""
    lines = []
    for message in messages:
        role, content = message.get("role", "user"), message.get("content") or ""
        if role == "system":
            lines.append(f"System:{content}")
        else:
            lines.append(f"{role.capitalize()}:\n{content}")
    return "\n".join(lines) + "\nAssistant:\n"


class SimpleWorkflow(Workflow):
    """Chat once with the task's messages and score every response."""

    Args = SimpleArgs
    default_system_prompt: str | None = None
    """System prompt used when neither the workflow args nor the taskset set one."""
    default_reply_prefix: str | None = None
    """Instruction appended to the user prompt when the args set none."""

    @property
    def options(self) -> Any:
        """The workflow's args, or its ``Args`` defaults."""
        return self.args if self.args is not None else self.Args()

    def system_prompt(self) -> str | None:
        """The system prompt: the args', else the taskset's, else the workflow's default."""
        return (self.options.system_prompt or self.task.system_prompt
                or self.default_system_prompt)

    def prompt_suffix(self) -> str | None:
        """Text appended to the last user message."""
        return self.options.reply_prefix or self.default_reply_prefix

    def messages(self) -> list[dict[str, Any]]:
        """The conversation sent to the model."""
        messages = self.task.chat_messages()
        system = self.system_prompt()
        if system and not any(m["role"] == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system})
        suffix = self.prompt_suffix()
        if suffix and messages and messages[-1]["role"] == "user":
            messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']}{suffix}"}
        return messages

    def base_prompt(self) -> str:
        """The plain-text prompt of ``use_base`` (:func:`base_model_prompt`)."""
        return base_model_prompt(self.messages())

    def sample(self, n: int, **overrides: Any) -> list[Experience]:
        """``n`` answers with the task's rollout args (``overrides`` replace some): by chat,
        or from :meth:`base_prompt` with ``use_base``."""
        sampling = {**self.task.sampling, **overrides}
        if getattr(self.options, "use_base", False):
            return self.model.generate([self.base_prompt()], n=n, **sampling)
        return self.model.chat(self.messages(), n=n, **sampling)

    def reward_inputs(self, experience: Experience) -> dict[str, Any]:
        """What this workflow can pass to a reward that declares ``extra_inputs``
        (:mod:`rft_plugin_workflows.scoring`)."""
        return {"response_tokens": experience.response_tokens.tolist()}

    def score(self, experience: Experience, response: str) -> float:
        """Set ``experience.reward`` (sum of the task's reward parts, the declared extra
        inputs passed) and its ``reward/<part>`` metrics; return it."""
        wanted = getattr(self.task.reward_fn, "extra_inputs", ())
        inputs = self.reward_inputs(experience) if wanted else None  # built only if read
        parts = reward_parts(self.task, response, inputs, workflow=type(self).__name__)
        experience.reward = sum(parts.values())
        experience.metrics.update({f"reward/{k}": v for k, v in parts.items()})
        return experience.reward

    def reward(self, experiences: list[Experience]) -> None:
        """Score the answers (the task's reward function)."""
        for exp in experiences:
            self.score(exp, self.response_text(exp))

    def attach_baseline(self, experiences: list[Experience]) -> None:
        """With :attr:`~rft.workflow.Task.greedy_baseline` (ReMax): one greedy answer,
        rewarded by :meth:`reward`, as ``info["reward_baseline"]`` of every experience."""
        if not self.task.greedy_baseline or not experiences:
            return
        (greedy,) = self.sample(1, temperature=0.0)
        self.reward([greedy])
        for experience in experiences:
            experience.info["reward_baseline"] = greedy.reward

    def run(self) -> list[Experience]:
        experiences = self.sample(self.task.repeat_times)
        self.reward(experiences)
        self.attach_baseline(experiences)
        return experiences


MATH_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the "
    "Assistant solves it. The Assistant first thinks about the reasoning process and "
    "then gives the answer. The reasoning process and the answer are enclosed within "
    "<think> </think> and <answer> </answer> tags, respectively, i.e., "
    "<think> reasoning process here </think> <answer> answer here </answer>.")
"""``math_workflow``'s system prompt (DeepSeek-R1's think/answer format)."""


class MathWorkflow(SimpleWorkflow):
    """Reason in ``<think>`` tags, answer in ``<answer>`` tags; scored by the taskset's
    reward function, ``math_reward`` when it names none (as Trinity-RFT's)."""

    default_system_prompt = MATH_SYSTEM_PROMPT
    default_reward_fn = "math_reward"


BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
"""What ``math_boxed_workflow`` appends to the question."""

BOXED_WITH_THINK_PROMPT = (
    "You are a helpful assistant that solves math problems. First think about the "
    "reasoning process, written as <think>\n ...your reasoning... </think>\n, then give "
    "the answer. Always put your final answer in \\boxed{} as a closed-form result.")
"""``math_boxed_workflow``'s system prompt with ``with_think``."""


@dataclass
class MathBoxedArgs(SimpleArgs):
    """Arguments of ``math_boxed_workflow`` (Trinity-RFT's names)."""

    with_think: bool = False
    """Ask for ``<think>…</think>`` before the boxed answer (a system prompt saying so
    replaces the appended instruction) and have the reward check it: a reward declaring
    ``with_think`` (``math_boxed_reward``) adds ``format_score``."""
    format_score_coef: float = 0.1
    """The format penalty's size, passed to a reward declaring ``format_score_coef``."""


class MathBoxedWorkflow(SimpleWorkflow):
    """Answer with the final result in ``\\boxed{}`` (scored by ``math_boxed_reward`` or
    ``math_dapo_reward``)."""

    Args = MathBoxedArgs
    default_reply_prefix = BOXED_INSTRUCTION

    def system_prompt(self) -> str | None:
        own = super().system_prompt()
        return own or (BOXED_WITH_THINK_PROMPT if self.options.with_think else None)

    def prompt_suffix(self) -> str | None:
        if self.options.with_think and not self.options.reply_prefix:
            return None  # the system prompt asks for the box
        return super().prompt_suffix()

    def reward_inputs(self, experience: Experience) -> dict[str, Any]:
        return {**super().reward_inputs(experience), "with_think": self.options.with_think,
                "format_score_coef": self.options.format_score_coef}


class VerlGSM8KWorkflow(SimpleWorkflow):
    """veRL's GSM8K set-up: the question followed by its instruction to end with
    ``#### <answer>``, as a single user message (scored by ``gsm8k_reward``)."""

    default_reply_prefix = " Let's think step by step and output the final answer after \"####\"."


__all__ = ["BOXED_INSTRUCTION", "BOXED_WITH_THINK_PROMPT", "MATH_SYSTEM_PROMPT",
           "MathBoxedArgs", "MathBoxedWorkflow", "MathWorkflow", "SimpleArgs",
           "SimpleWorkflow", "VerlGSM8KWorkflow", "base_model_prompt"]
