"""Agent-style workflows: the model is reached only through the OpenAI API.

``agent_openai_workflow`` is what an agent written against the OpenAI client looks like in
rft. Each episode is a conversation: the model answers the task, the environment scores
the answer with the task's reward function and, unless it is good enough, replies with
feedback; the model answers again, up to ``max_turns`` answers. The workflow never calls
the engine directly: it talks through ``self.model.get_openai_client()`` and takes the
episode from the model's call history, merged into one experience whose action mask
covers only the model's answers (the feedback turns are masked out). It needs
``explorer.rollout_model.enable_openai_api: true`` and ``enable_history: true``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError
from rft.experience import Experience
from rft.workflow import Workflow, score_response
from rft_plugin_workflows.multi_turn import MultiTurnArgs, MultiTurnWorkflow

_OPENAI_SAMPLING = ("temperature", "top_p", "max_tokens", "seed", "stop")
"""Rollout args the OpenAI API takes as its own fields; others go in ``extra_body``."""
_NOT_SENT = ("n", "logprobs")
"""Rollout args the workflow decides itself (one answer per call; log-probs come from the
history)."""


@dataclass
class AgentArgs(MultiTurnArgs):
    """Arguments of ``agent_openai_workflow`` (``workflow_args``)."""

    max_turns: int = 2
    """Most model answers per episode."""
    feedback: str = "Your answer scored {reward:g}. Check it and answer again."
    """The environment's reply to an answer that is not good enough (``{reward}``: its
    reward)."""
    success_reward: float = 1.0
    """An answer whose reward reaches this ends the episode."""


class AgentOpenAIWorkflow(MultiTurnWorkflow):
    """Multi-turn answer / feedback episodes over the OpenAI API (module docstring)."""

    Args = AgentArgs

    def reset(self) -> None:
        self.final_parts: dict[str, float] = {}

    def step(self, reply: str, turn: int) -> tuple[str | None, float]:
        """Score the answer; end on success or at the last turn, else give feedback. The
        episode's reward is the reward of its last answer."""
        args = self.args or AgentArgs()
        parts = self.score(reply, "agent_openai_workflow")
        reward = sum(parts.values())
        if reward >= args.success_reward or turn == args.max_turns - 1:
            self.final_parts = parts
            return None, reward
        return args.feedback.format(reward=reward), 0.0

    def score(self, reply: str, workflow: str) -> dict[str, float]:
        """The reward parts of a final answer by the task's reward function."""
        if self.task.reward_fn is None:
            raise RftError(f"taskset {self.task.taskset!r}: {workflow} needs a reward function "
                           "(default_reward_fn_type)")
        return score_response(self.task.reward_fn, reply, self.task.truth, self.task.reward_args,
                              name=getattr(self.task.reward_fn, "__name__", "reward function"))

    def openai_sampling(self) -> dict[str, Any]:
        """The task's rollout args as ``chat.completions.create`` keyword arguments."""
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in self.task.sampling.items():
            if key in _NOT_SENT:
                continue
            (kwargs if key in _OPENAI_SAMPLING else extra)[key] = value
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def episode(self) -> Experience:
        """One conversation through the OpenAI client, returned as one experience."""
        self.reset()
        max_turns = (self.args or AgentArgs()).max_turns
        client = self.model.get_openai_client()
        messages = self.task.chat_messages()
        total_reward = 0.0
        for turn in range(max_turns):
            response = client.chat.completions.create(model=client.model_path,
                                                      messages=messages, n=1,
                                                      **self.openai_sampling())
            answer = response.choices[0].message.content or ""
            feedback, reward = self.step(answer, turn)
            total_reward += reward
            if feedback is None:
                break
            messages = messages + [{"role": "assistant", "content": answer},
                                   {"role": "user", "content": feedback}]
        return self.merged_episode("agent_openai_workflow", total_reward, self.final_parts,
                                   {"multi_turn/turns": float(turn + 1)})

    def merged_episode(self, workflow: str, reward: float, parts: dict[str, float],
                       metrics: dict[str, float]) -> Experience:
        """The episode's conversation from the history, merged into one experience with
        its reward, reward parts (``reward/<part>``) and metrics."""
        episodes = self.model.extract_experience_from_history(merge_turns=True)
        if len(episodes) != 1:
            raise RftError(f"{workflow}: the history holds {len(episodes)} conversations for "
                           "one episode, expected 1 (do the turns' prompts extend each other? "
                           "a reply must be sent back verbatim)")
        (experience,) = episodes
        experience.reward = reward
        experience.metrics.update({f"reward/{k}": v for k, v in parts.items()})
        experience.metrics.update(metrics)
        return experience


@dataclass
class JudgeArgs:
    """Arguments of ``llm_judge_workflow`` (``workflow_args``)."""

    judge: str = "judge"
    """Auxiliary model that judges (``explorer.auxiliary_models[i].name``, or its index)."""
    prompt: str = ("Question: {question}\nReference answer: {truth}\nProposed answer: "
                   "{answer}\nIs the proposed answer correct? Reply yes or no.")
    """The judge's user message (``{question}``, ``{truth}``, ``{answer}``)."""
    positive: str = "yes"
    """The verdict meaning "correct"."""
    negative: str = "no"
    """The verdict meaning "wrong"."""


def verdict_probability(judge: Any, messages: list[dict[str, Any]], positive: str,
                        negative: str) -> float:
    """``P(positive) / (P(positive) + P(negative))`` as the judge's reply to ``messages``:
    both verdicts scored token by token under the judge (teacher forcing), no sampling."""
    prompt = judge.engine.apply_chat_template(messages)
    verdicts = [judge.tokenizer.encode(v, add_special_tokens=False) for v in (positive, negative)]
    if not all(verdicts):
        raise RftError("llm_judge_workflow: the verdicts must not be empty strings")
    scores = judge.engine.compute_logprobs([prompt + v for v in verdicts], [len(prompt)] * 2)
    logp_yes, logp_no = (float(s.sum()) for s in scores)
    top = max(logp_yes, logp_no)
    yes, no = math.exp(logp_yes - top), math.exp(logp_no - top)
    return yes / (yes + no)


class LLMJudgeWorkflow(Workflow):
    """Chat once per rollout; an auxiliary model judges each answer: the reward is its
    probability of the positive verdict (``reward/judge``)."""

    Args = JudgeArgs

    def run(self) -> list[Experience]:
        args = self.args or JudgeArgs()
        judge = self.auxiliary_model(args.judge)
        question = self.task.prompt or (self.task.messages or [{}])[-1].get("content", "")
        experiences = self.model.chat(self.task.chat_messages(), n=self.task.repeat_times,
                                      **self.task.sampling)
        for exp in experiences:
            answer = self.response_text(exp)
            content = args.prompt.format(question=question, truth=self.task.truth, answer=answer)
            p = verdict_probability(judge, [{"role": "user", "content": content}],
                                    args.positive, args.negative)
            exp.reward = p
            exp.metrics["reward/judge"] = p
        return experiences


__all__ = ["AgentArgs", "AgentOpenAIWorkflow", "JudgeArgs", "LLMJudgeWorkflow",
           "verdict_probability"]
