"""Workflows rewarded by a model instead of (or besides) a rule: a reward model, RULER's
list-wise judge, a rubric judge, and RULER with the policy as its own judge.

The judge is an auxiliary model (``explorer.auxiliary_models``; workflow arg ``judge`` /
``reward_model``: its name, or its position — ``"0"`` is the first one, as Trinity-RFT
takes ``auxiliary_models[0]``), called directly through its :class:`ModelWrapper`, so it
needs no OpenAI endpoint. When the taskset also names a reward function, it is the *gold*
reward: computed and logged (``gold_reward``, its parts as ``reward/<part>``, so that
accuracy metrics stay ground-truth ones) but not trained on, as in Trinity-RFT.
"""

from __future__ import annotations

import ast
import json
import math
import random
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError
from rft.experience import EID, Experience
from rft_plugin_workflows.agent import verdict_probability
from rft_plugin_workflows.scoring import reward_parts
from rft_plugin_workflows.single_turn import MathWorkflow, SimpleArgs, SimpleWorkflow


def question_of(workflow: SimpleWorkflow) -> str:
    """The task's question: its prompt, else its last user message."""
    if workflow.task.prompt is not None:
        return workflow.task.prompt
    users = [m for m in workflow.task.chat_messages() if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


def record_gold(workflow: SimpleWorkflow, experience: Experience) -> float | None:
    """Score ``experience`` with the task's reward function as the gold reward: its parts
    as ``reward/<part>``, their sum as ``gold_reward``; ``None`` without a reward
    function. Leaves ``experience.reward`` alone."""
    if workflow.task.reward_fn is None:
        return None
    parts = reward_parts(workflow.task, workflow.response_text(experience),
                         workflow.reward_inputs(experience), workflow=type(workflow).__name__)
    gold = sum(parts.values())
    experience.metrics.update({f"reward/{k}": v for k, v in parts.items()})
    experience.metrics["gold_reward"] = gold
    return gold


def judge_sampling(temperature: float | None, max_tokens: int | None) -> dict[str, Any]:
    """Sampling overrides of a judge call (``None``: the judge model's default)."""
    return {k: v for k, v in (("temperature", temperature), ("max_tokens", max_tokens))
            if v is not None}


# ---- math_rm_workflow --------------------------------------------------------------------

@dataclass
class RewardModelArgs(SimpleArgs):
    """Arguments of ``math_rm_workflow``."""

    reward_model: str = "0"
    """Auxiliary model that scores the answers (its name or position)."""
    prompt: str = ("Question: {question}\nProposed answer: {answer}\n"
                   "Is the proposed answer correct? Reply yes or no.")
    """The reward model's user message (``{question}``, ``{answer}``; ``{truth}`` is
    available too)."""
    positive: str = "yes"
    """The reward model's verdict for a good answer."""
    negative: str = "no"
    """Its verdict for a bad answer."""


class MathRMWorkflow(MathWorkflow):
    """``math_workflow``'s prompt; each answer's reward is the reward model's probability
    of the positive verdict, ``P(positive) / (P(positive) + P(negative))``, both verdicts
    scored by teacher forcing (``reward/reward_model``)."""

    Args = RewardModelArgs
    default_reward_fn = None  # the judge scores: no math_reward fallback

    def reward(self, experiences: list[Experience]) -> None:
        args = self.options
        model = self.auxiliary_model(args.reward_model)
        question = question_of(self)
        for exp in experiences:
            record_gold(self, exp)
            content = args.prompt.format(question=question, answer=self.response_text(exp),
                                         truth=self.task.truth)
            p = verdict_probability(model, [{"role": "user", "content": content}],
                                    args.positive, args.negative)
            exp.reward = p
            exp.metrics["reward/reward_model"] = p


# ---- RULER ------------------------------------------------------------------------------

RULER_SYSTEM = ("You are a fair judge. The user gives a question and {n} candidate "
                "solutions to it. Compare the solutions, judge how well each one solves the "
                "question, and give each a score between 0 and 1.")
"""RULER's system message (``{n}``: the number of solutions)."""

RULER_FORMAT = ("the reasoning is enclosed in <think> </think> and the final answer in "
                "<answer> </answer>, i.e. <think> reasoning </think> <answer> answer </answer>.")
"""The answer format the judge is told to expect (``math_workflow``'s)."""


def ruler_messages(question: str, solutions: list[str],
                   format_hint: str = RULER_FORMAT) -> list[dict[str, str]]:
    """RULER's conversation: the question, the required format, the ``n`` solutions, and
    the request to end with the list of ``n`` scores."""
    n = len(solutions)
    listed = "\n\n".join(f"Candidate solution {i + 1}: {text}" for i, text in enumerate(solutions))
    user = (f"Below is a question and {n} candidate solutions.\n\nQuestion: {question}\n\n"
            f"Required solution format: {format_hint}\n\n{listed}\n\n"
            "Give each solution a score between 0 and 1 for how well it solves the question. "
            "You may compare them and reason briefly first. End your reply with the list of "
            f"the {n} scores: [score of solution 1, ..., score of solution {n}]")
    return [{"role": "system", "content": RULER_SYSTEM.format(n=n)},
            {"role": "user", "content": user}]


def parse_scores(text: str, n: int) -> list[float] | None:
    """The last ``[…]`` of ``text`` as ``n`` scores clipped to [0, 1]; ``None`` when there
    is none, it is not a list of ``n`` finite numbers (read as a Python literal, never
    evaluated)."""
    start, end = text.rfind("["), text.rfind("]")
    if start < 0 or end < start:
        return None
    try:
        values = ast.literal_eval(text[start:end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(values, (list, tuple)) or len(values) != n:
        return None
    scores = []
    for value in values:
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value)):
            return None
        scores.append(min(1.0, max(0.0, float(value))))
    return scores


@dataclass
class RulerArgs(SimpleArgs):
    """Arguments of ``math_ruler_workflow``."""

    judge: str = "0"
    """Auxiliary model that ranks the answers (its name or position)."""
    judge_temperature: float | None = None
    """The judge's sampling temperature (``None``: the judge model's default, 1)."""
    judge_max_tokens: int | None = None
    """Most tokens of the judge's reply (``None``: its default)."""


class MathRULERWorkflow(MathWorkflow):
    """``math_workflow``'s prompt; the judge reads the question and all ``repeat_times``
    answers at once (RULER, list-wise) and ends its reply with a list of scores in
    [0, 1], one per answer: each answer's reward. A reply without a list of exactly
    ``n`` numbers gives every answer 0 (``judge_success`` 0)."""

    Args = RulerArgs
    default_reward_fn = None  # the judge scores: no math_reward fallback

    def reward(self, experiences: list[Experience]) -> None:
        args = self.options
        judge = self.auxiliary_model(args.judge)
        for exp in experiences:
            record_gold(self, exp)
        messages = ruler_messages(question_of(self), [self.response_text(e) for e in experiences])
        (reply,) = judge.chat(messages, n=1, **judge_sampling(args.judge_temperature,
                                                               args.judge_max_tokens))
        scores = parse_scores(judge_text(judge, reply), len(experiences))
        for i, exp in enumerate(experiences):
            exp.reward = scores[i] if scores is not None else 0.0
            exp.metrics["judge_success"] = float(scores is not None)


def judge_text(judge: Any, reply: Experience) -> str:
    """A judge's reply as text."""
    if reply.response_text is not None:
        return reply.response_text
    return judge.decode(reply.response_tokens)


# ---- math_trainable_ruler_workflow -----------------------------------------------------

@dataclass
class TrainableRulerArgs(SimpleArgs):
    """Arguments of ``math_trainable_ruler_workflow``."""

    gold_probability: float = 0.2
    """Chance that a task is treated as having its ground truth available (Trinity-RFT's
    fixed 0.2): the answers are rewarded by the gold reward and the policy's RULER replies
    become experiences too, rewarded by how close their scores come to the gold ones."""
    gold_min: float = -0.1
    """Lowest gold reward (``math_reward``'s −0.1): scaled to 0 for the comparison."""
    gold_max: float = 1.1
    """Highest gold reward (``math_reward``'s 1.1): scaled to 1."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.gold_probability <= 1.0:
            raise ValueError(f"gold_probability must be within [0, 1], got {self.gold_probability}")
        if self.gold_max <= self.gold_min:
            raise ValueError(f"gold_max ({self.gold_max}) must be greater than gold_min "
                             f"({self.gold_min})")


class MathTrainableRULERWorkflow(MathWorkflow):
    """RULER with the policy as its own judge, so that judging is trained too.

    The answers are generated and scored with the gold reward (the taskset's reward
    function, required). Then, with probability ``gold_probability``:

    - *gold available*: the policy judges the answers ``repeat_times`` times; the answers
      are rewarded with the gold reward, and each judging reply is returned as an
      experience too (``info["ruler_judge"]``, eid suffix ``ruler``), rewarded
      ``1 − mean |scores − scaled gold rewards|`` (0 if it has no valid list);
    - *else*: the policy judges once; each answer's reward is its RULER score.

    The draw is deterministic per task, taskset and weights version. With ReMax's greedy
    baseline the answers get the gold reward of a greedy answer, the judging replies that
    of a greedy judging reply.
    """

    Args = TrainableRulerArgs

    def gold_available(self) -> bool:
        draw = random.Random(f"{self.task.taskset}:{self.task.index}:"
                             f"{self.model.model_version}").random()
        return draw < self.options.gold_probability

    def run(self) -> list[Experience]:
        if self.task.reward_fn is None:
            raise RftError(f"taskset {self.task.taskset!r}: math_trainable_ruler_workflow needs "
                           "a reward function (default_reward_fn_type) for the gold reward")
        answers = self.sample(self.task.repeat_times)
        golds = [record_gold(self, exp) or 0.0 for exp in answers]
        args = self.options
        messages = ruler_messages(question_of(self), [self.response_text(e) for e in answers])
        with_gold = self.gold_available()
        judges = self.model.chat(messages, n=self.task.repeat_times if with_gold else 1,
                                 **self.task.sampling)
        span = args.gold_max - args.gold_min
        scaled = [min(1.0, max(0.0, (g - args.gold_min) / span)) for g in golds]

        def judge_reward(scores: list[float] | None) -> float:
            if scores is None:
                return 0.0
            return 1.0 - sum(abs(s - g) for s, g in zip(scores, scaled, strict=True)) / len(scores)

        parsed = [parse_scores(self.response_text(j), len(answers)) for j in judges]
        valid = [scores for scores in parsed if scores is not None]
        success = len(valid) / len(judges)
        for judge, scores in zip(judges, parsed, strict=True):
            judge.reward = judge_reward(scores) if with_gold else 0.0
            judge.metrics.update({"judge_success": success, "reward_for_judger": judge.reward})
            judge.info["ruler_judge"] = True
            judge.eid = EID(suffix="ruler")
        for i, answer in enumerate(answers):
            if with_gold:
                answer.reward = golds[i]
            else:
                answer.reward = (sum(scores[i] for scores in valid) / len(valid)) if valid else 0.0
            answer.metrics["judge_success"] = success
        self.attach_baseline(answers)
        if not with_gold:
            return answers
        if self.task.greedy_baseline:  # ReMax: the judging replies' own greedy baseline
            (greedy,) = self.model.chat(messages, n=1, **{**self.task.sampling,
                                                          "temperature": 0.0})
            baseline = judge_reward(parse_scores(self.response_text(greedy), len(answers)))
            for judge in judges:
                judge.info["reward_baseline"] = baseline
        return answers + judges

    def reward(self, experiences: list[Experience]) -> None:
        """The greedy baseline's reward: the gold reward."""
        for exp in experiences:
            exp.reward = record_gold(self, exp) or 0.0


# ---- rubric_judge_workflow -------------------------------------------------------------

RUBRIC_ANSWER_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the "
    "Assistant solves it. The Assistant first thinks about the reasoning process and then "
    "gives the user the answer.")
"""``rubric_judge_workflow``'s default system prompt for the policy."""

RUBRIC_JUDGE_SYSTEM = (
    "You are an expert evaluator. Given a user prompt, a generated response and a list of "
    "quality rubrics, rate the overall quality of the response on a scale of 1 to 10 by how "
    "well it satisfies the rubrics. Weigh all rubrics together: a response that violates "
    "several rubrics gets a lower score, one that satisfies all of them a higher score.\n"
    "Start your reply with a JSON object in a block that starts with \"```json\" and ends "
    "with \"```\", holding the single key \"rating\" with an integer from 1 to 10, e.g.\n"
    "```json\n{\"rating\": 7}\n```")
"""The rubric judge's system message."""


def rubric_text(rubric: Any) -> str:
    """The rubric list as lines ``Rubric i (weight: w): description`` (``rubric`` may be
    JSON text); a note when there is none."""
    if isinstance(rubric, str):
        try:
            rubric = json.loads(rubric)
        except json.JSONDecodeError:
            return rubric
    if not rubric:
        return "Rubrics are not provided."
    lines = []
    for i, item in enumerate(rubric):
        if isinstance(item, dict):
            lines.append(f"Rubric {i} (weight: {item.get('weight')}): {item.get('description')}")
        else:
            lines.append(f"Rubric {i}: {item}")
    return "\n".join(lines)


def rubric_messages(question: str, response: str, rubric: Any) -> list[dict[str, str]]:
    """The rubric judge's conversation for one response."""
    user = ("Given the following prompt, response and rubrics, rate the overall quality of "
            "the response on a scale of 1 to 10 by how well it satisfies the rubrics.\n"
            f"<prompt>\n{question}\n</prompt>\n<response>\n{response}\n</response>\n"
            f"<rubrics>\n{rubric_text(rubric)}\n</rubrics>\nYour JSON evaluation:")
    return [{"role": "system", "content": RUBRIC_JUDGE_SYSTEM}, {"role": "user", "content": user}]


def parse_rating(text: str) -> float | None:
    """The ``rating`` (1 … 10) of the first fenced JSON block of ``text`` (```` ```json ````,
    else ```` ``` ````), scaled to [0, 1] as ``(rating − 1) / 9``; ``None`` when missing or
    out of range."""
    start = text.find("```json")
    marker = "```json"
    if start < 0:
        start, marker = text.find("```"), "```"
    if start < 0:
        return None
    end = text.find("```", start + len(marker))
    if end < 0:
        return None
    try:
        parsed = json.loads(text[start + len(marker):end].strip())
    except json.JSONDecodeError:
        return None
    rating = parsed.get("rating") if isinstance(parsed, dict) else None
    if isinstance(rating, bool) or not isinstance(rating, (int, float)) or not 1 <= rating <= 10:
        return None
    return (rating - 1) / 9


@dataclass
class RubricJudgeArgs(SimpleArgs):
    """Arguments of ``rubric_judge_workflow``."""

    judge: str = "0"
    """Auxiliary model that rates the answers (its name or position)."""
    rubric_key: str = "rubric"
    """Row field holding the rubrics: a list of ``{"weight", "description"}`` (or its
    JSON text)."""
    judge_temperature: float | None = 0.0
    """The judge's sampling temperature (Trinity-RFT: greedy)."""
    judge_max_tokens: int | None = None
    """Most tokens of the judge's reply (``None``: its default)."""


class RubricJudgeWorkflow(SimpleWorkflow):
    """One chat answer per rollout; the judge rates each against the task's rubrics on a
    1–10 scale (a fenced JSON ``{"rating": r}``), reward ``(r − 1) / 9``; an unreadable
    rating gives 0. ``judge_success`` is the share of readable ratings in the group."""

    Args = RubricJudgeArgs
    default_system_prompt = RUBRIC_ANSWER_SYSTEM

    def reward(self, experiences: list[Experience]) -> None:
        args = self.options
        judge = self.auxiliary_model(args.judge)
        rubric = self.task.raw.get(args.rubric_key, [])
        question = question_of(self)
        sampling = judge_sampling(args.judge_temperature, args.judge_max_tokens)
        ratings = []
        for exp in experiences:
            record_gold(self, exp)
            (reply,) = judge.chat(rubric_messages(question, self.response_text(exp), rubric),
                                  n=1, **sampling)
            rating = parse_rating(judge_text(judge, reply))
            ratings.append(rating)
            exp.reward = rating if rating is not None else 0.0
        success = sum(r is not None for r in ratings) / max(1, len(ratings))
        for exp in experiences:
            exp.metrics["judge_success"] = success


__all__ = ["MathRMWorkflow", "MathRULERWorkflow", "MathTrainableRULERWorkflow",
           "RewardModelArgs", "RubricJudgeArgs", "RubricJudgeWorkflow", "RulerArgs",
           "TrainableRulerArgs", "parse_rating", "parse_scores", "rubric_messages",
           "ruler_messages"]
