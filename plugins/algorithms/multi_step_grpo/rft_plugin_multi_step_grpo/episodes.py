"""Episodes of multi-step workflows: which experiences are the steps of one rollout.

A step-wise workflow returns one experience per model call (per *step*) of each episode.
Trinity-RFT identifies them by ``EID(batch, task, run, step)``. rft's
:class:`rft.experience.EID` has the same ``step`` (kept by the explorer), but the
explorer numbers ``eid.run`` itself, one per returned experience, so the episode is
named in ``info``:

``info["episode"]``
    any JSON-able id, the same for every step of one episode and unique among the
    episodes of the task in this explore step; without it the experience's ``eid.run``
    is its episode (one experience, one episode: a single-turn rollout). An episode
    index counted by the workflow is unique unless ``explorer.max_repeat_times_per_runner``
    splits the task's rollouts over several workflow runs (each counts from 0); a
    ``uuid4().hex`` is unique in any case.
``eid.step``
    the step's position in the episode (0, 1, …); steps with equal ``eid.step`` keep the
    order the workflow returned them in.

rft-plugin-workflows' step-wise workflows (``StepWiseWorkflow``) set both.

Episodes of the same task in the same explore step (``eid.group``) form a group, as
rollouts do for GRPO. :class:`EpisodeRows` is a batch layout that stops training with a
one-line error when steps of an episode reach the trainer without the advantages the
explorer should have computed for them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from rft.errors import RftError
from rft.experience import Experience

__all__ = ["EPISODE_KEY", "Episode", "EpisodeRows", "episode_of", "episodes", "reward_of",
           "step_of"]

EPISODE_KEY = "episode"
"""``Experience.info`` key of the episode id (Trinity-RFT's ``eid.run``)."""


@dataclass
class Episode:
    """The steps of one episode, in step order."""

    group: str
    """``eid.group`` (explore step / task) shared by the task's episodes."""
    key: Hashable
    """The episode's id within its group."""
    steps: list[Experience]
    """Its experiences, ordered by step."""


def episode_of(exp: Experience) -> Hashable:
    """The episode id of ``exp`` within its group: ``info["episode"]``, else
    ``eid.run``."""
    if EPISODE_KEY in exp.info:
        return ("episode", _hashable(exp.info[EPISODE_KEY]))
    return ("run", exp.eid.run)


def step_of(exp: Experience) -> int:
    """The step index of ``exp`` in its episode: ``eid.step``."""
    return exp.eid.step


def episodes(experiences: Sequence[Experience]) -> list[Episode]:
    """The episodes of ``experiences``, in order of first appearance; each episode's
    steps sorted by :func:`step_of` (stably: ties keep the order given)."""
    found: dict[tuple[str, Hashable], list[Experience]] = {}
    for exp in experiences:
        found.setdefault((exp.eid.group, episode_of(exp)), []).append(exp)
    return [Episode(group, key, sorted(steps, key=step_of))
            for (group, key), steps in found.items()]


def reward_of(exp: Experience) -> float:
    """The scalar reward of one step: ``reward``, else the sum of ``token_level_reward``,
    else 0."""
    if exp.reward is not None:
        return float(exp.reward)
    if exp.token_level_reward is not None:
        return float(exp.token_level_reward.sum())
    return 0.0


def _hashable(value: object) -> Hashable:
    return value if isinstance(value, Hashable) else repr(value)


@dataclass(frozen=True)
class EpisodeRows:
    """Batch layout of the step-wise algorithms: rows as given (units of one row), but an
    experience that names its episode (one of ``keys`` in its ``info``) and carries no
    advantages is a one-line :class:`RftError`: its advantages depend on the episode's
    other steps, which only the explorer's operator ``operator`` sees together."""

    algorithm: str
    """The algorithm's name, for the message."""
    operator: str
    """The experience operator that computes the advantages in the explorer."""
    keys: tuple[str, ...] = (EPISODE_KEY,)
    """``info`` keys that mark the step of a multi-step episode."""
    unit_size: int = 1
    """Rows per unit."""

    def arrange(self, experiences: Sequence[Experience]) -> list[Experience]:
        """``experiences`` unchanged, after the check above."""
        for i, exp in enumerate(experiences):
            if exp.advantages is not None:
                continue
            key = next((k for k in self.keys if k in exp.info), None)
            if key is not None:
                raise RftError(
                    f"experience {i} (eid {exp.eid.uid}): {self.algorithm} got a step of a "
                    f"multi-step episode (info[{key!r}]) without advantages; add "
                    f"{{name: {self.operator}}} to data_processor.experience_pipeline."
                    "operators so that the explorer computes them over whole episodes")
        return list(experiences)
