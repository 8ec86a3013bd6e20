"""Built-in experience operators: ``reward_filter``, ``reward_std_filter``,
``reward_shaping_mapper``, ``pass_rate_calculator``."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from rft.buffer.operators import ExperienceOperator
from rft.experience import Experience
from rft.hookspecs import hookimpl


@dataclass
class RewardFilterArgs:
    """Arguments of ``reward_filter``."""

    threshold: float = 0.0
    """Experiences with ``reward < threshold`` are dropped."""


class RewardFilter(ExperienceOperator):
    """Keep experiences whose reward is at least ``threshold``."""

    Args = RewardFilterArgs

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        kept = [e for e in experiences if (e.reward or 0.0) >= self.args.threshold]
        return kept, {"dropped": float(len(experiences) - len(kept))}


@dataclass
class RewardStdFilterArgs:
    """Arguments of ``reward_std_filter``."""

    threshold: float = 0.0
    """Groups (rollouts of one task) whose reward standard deviation is ``<= threshold``
    are dropped: with equal rewards a group-relative advantage is zero everywhere
    (DAPO's dynamic sampling)."""


class RewardStdFilter(ExperienceOperator):
    """Drop whole groups whose rewards (population std) do not vary more than ``threshold``."""

    Args = RewardStdFilterArgs

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        groups: dict[str, list[Experience]] = {}
        for exp in experiences:
            groups.setdefault(exp.eid.group, []).append(exp)
        kept: list[Experience] = []
        dropped_groups = 0
        for members in groups.values():
            rewards = [m.reward or 0.0 for m in members]
            if len(rewards) > 1 and statistics.pstdev(rewards) > self.args.threshold:
                kept += members
            else:
                dropped_groups += 1
        return kept, {"dropped": float(len(experiences) - len(kept)),
                      "dropped_groups": float(dropped_groups)}


@dataclass
class ShapingRule:
    """One reward-shaping rule: ``reward = reward (+|×) weight · metrics[stats_key]``."""

    stats_key: str = ""
    """Key in ``Experience.metrics`` or ``Experience.info`` holding the number to use."""
    op_type: Literal["ADD", "MUL"] = "ADD"
    """``ADD``: ``reward + weight·x``; ``MUL``: ``reward · weight·x``."""
    weight: float = 1.0
    """Factor applied to the value."""


@dataclass
class RewardShapingArgs:
    """Arguments of ``reward_shaping_mapper``."""

    reward_shaping_configs: list[ShapingRule] = field(default_factory=list)
    """Rules applied in order."""


class RewardShapingMapper(ExperienceOperator):
    """Reshape rewards from numbers the workflow recorded (e.g. a quality score)."""

    Args = RewardShapingArgs

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        missing = 0
        for exp in experiences:
            for rule in self.args.reward_shaping_configs:
                value = exp.metrics.get(rule.stats_key, exp.info.get(rule.stats_key))
                if not isinstance(value, (int, float)):
                    missing += 1
                    continue
                reward = exp.reward or 0.0
                exp.reward = (reward + rule.weight * value if rule.op_type == "ADD"
                              else reward * rule.weight * value)
        return experiences, {"missing_stats": float(missing)}


@dataclass
class PassRateArgs:
    """Arguments of ``pass_rate_calculator``."""

    reward_shaping_configs: list[dict[str, Any]] | None = None
    """Accepted for Trinity-RFT configs, whose operator takes this argument and ignores it;
    ignored here too."""


class PassRateCalculator(ExperienceOperator):
    """Per task: the mean reward of its rollouts in this step (Trinity-RFT's "pass rate"),
    stored as ``info["pass_rate"]`` on each of its experiences.

    Rollouts belong to one task when they share taskset, explore step and task index.
    Metrics: ``mean`` (over tasks), ``tasks``, ``all_solved`` (tasks whose pass rate is
    at least 1) and ``none_solved`` (at most 0). Trinity-RFT's operator hands the pass
    rates to the task selectors; in rft the explorer gives every selector the same mean
    rewards itself (``TaskSelector.update``) whether or not this operator runs.
    """

    Args = PassRateArgs

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        tasks: dict[tuple[Any, Any, Any], list[Experience]] = {}
        for exp in experiences:
            key = (exp.info.get("taskset"), exp.eid.batch, exp.eid.task)
            tasks.setdefault(key, []).append(exp)
        rates: list[float] = []
        for members in tasks.values():
            rate = statistics.fmean(m.reward or 0.0 for m in members)
            rates.append(rate)
            for member in members:
                member.info["pass_rate"] = rate
        if not rates:
            return experiences, {"tasks": 0.0}
        return experiences, {"tasks": float(len(rates)), "mean": statistics.fmean(rates),
                             "all_solved": float(sum(r >= 1.0 for r in rates)),
                             "none_solved": float(sum(r <= 0.0 for r in rates))}


@hookimpl
def register_experience_operators() -> dict[str, Any]:
    return {"reward_filter": RewardFilter, "reward_std_filter": RewardStdFilter,
            "reward_shaping_mapper": RewardShapingMapper,
            "pass_rate_calculator": PassRateCalculator}
