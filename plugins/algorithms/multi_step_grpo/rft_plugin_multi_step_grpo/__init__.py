"""rft-plugin-multi-step-grpo: GRPO over multi-step episodes (Trinity-RFT's
``multi_step_grpo``, advantage ``step_wise_grpo``; inspired by rLLM).

Each episode of a task is scored by the reward of its *last* step; the episodes of one
task form the group whose mean (and std) give a GRPO advantage, which every step of the
episode then carries over its action mask.

Registered names:

- algorithm ``multi_step_grpo``;
- experience operator ``step_wise_grpo``: the general computation, in the explorer, over
  whole episodes (steps grouped as :mod:`rft_plugin_multi_step_grpo.episodes` says);
- advantage fn ``step_wise_grpo``: the same formula in the trainer, where every row is an
  episode of one step (single-turn workflows); used when the experiences carry no
  explorer advantages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.buffer.operators import ExperienceOperator
from rft.contracts import AdvantageInputs
from rft.experience import Experience
from rft.group_ops import GroupIndex, group_ids, group_stats, outcome_scores
from rft_plugin_multi_step_grpo.episodes import (EPISODE_KEY, Episode, EpisodeRows, episodes,
                                                 reward_of)

__all__ = ["EPISODE_KEY", "PRESET", "Episode", "EpisodeRows", "StepWiseGRPO",
           "StepWiseGRPOArgs", "episode_scores", "set_advantages",
           "step_wise_grpo_advantages"]


@dataclass
class StepWiseGRPOArgs:
    """Arguments of ``step_wise_grpo`` (``algorithm.advantage_fn_args`` in the trainer,
    ``data_processor.experience_pipeline.operators[i].args`` in the explorer)."""

    epsilon: float = 1e-6
    """Added to the std before dividing."""
    enable_step_norm: bool = False
    """Divide each step's advantage by the number of steps of its episode."""
    std_cal_level: Literal["group", "batch", "none"] = "group"
    """Std the centred score is divided by: the task group's (``group``), that of every
    episode's last-step reward in the batch (``batch``), or none (``none``: ``r − μ``).
    The mean is always the group's."""
    std_threshold: float | None = None
    """Groups of one episode, and groups whose reward std is at most this, carry no
    signal: the operator drops their experiences, the trainer-side function gives them
    zero advantages. ``None``: off."""

    def __post_init__(self) -> None:
        if self.std_cal_level not in ("group", "batch", "none"):
            raise ValueError(f"std_cal_level must be 'group', 'batch' or 'none', got "
                             f"{self.std_cal_level!r}")


def episode_scores(rewards: torch.Tensor, index: GroupIndex, args: StepWiseGRPOArgs
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step-wise GRPO scores of ``E`` episodes from their last-step rewards.

    With ``r_e`` the reward of episode ``e``'s last step, ``g`` its group (``index``),
    ``μ_g`` and ``σ_g`` the group's mean and unbiased std (``μ = 0, σ = 1`` for a group of
    one) and ``σ_B`` the unbiased std of all ``r`` (1 for a single episode)::

        group:  A_e = (r_e − μ_g) / (σ_g + ε)
        batch:  A_e = (r_e − μ_g) / (σ_B + ε)
        none:   A_e =  r_e − μ_g

    :param rewards: ``(E,)``.
    :param index: ``E`` group labels.
    :return: ``A`` ``(E,)``; ``skip`` ``(E,)`` bool (``std_threshold``: a group of one or
        with ``σ_g ≤ threshold``); ``μ``, ``σ`` ``(E,)`` as used.
    """
    counts, mean, std = group_stats(rewards, group_ids(index, rewards.device))  # (E,)
    single = counts == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    centred = rewards - mean  # (E,)
    if args.std_cal_level == "group":
        scores = centred / (std + args.epsilon)
    elif args.std_cal_level == "batch":
        batch_std = rewards.std() if rewards.numel() > 1 else rewards.new_tensor(1.0)
        scores = centred / (batch_std + args.epsilon)
    else:
        scores = centred
    skip = torch.zeros_like(single)
    if args.std_threshold is not None:
        skip = single | (std <= args.std_threshold)
    return scores, skip, mean, std


def step_wise_grpo_advantages(inputs: AdvantageInputs, args: StepWiseGRPOArgs
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``step_wise_grpo`` in the trainer: every row is an episode of one step.

    ``r_i = Σ_t token_level_rewards_it`` is the episode's (last step's) reward and
    ``inputs.index`` its group; ``A_it = A_i · mask_it`` with ``A_i`` from
    :func:`episode_scores` (0 for a skipped group); ``returns`` is the same tensor. With
    ``std_cal_level: group`` it equals veRL's GRPO advantage (``none``: Dr.GRPO's).

    Rows that are steps of longer episodes need the explorer operator of the same name
    (the ``multi_step_grpo`` preset's batch layout refuses them without it).
    """
    with torch.no_grad():
        scores, skip, _, _ = episode_scores(outcome_scores(inputs.token_level_rewards),
                                            inputs.index, args)  # (B,)
        scalars = torch.where(skip, torch.zeros_like(scores), scores)  # (B,)
        advantages = scalars.unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


step_wise_grpo_advantages.Args = StepWiseGRPOArgs  # type: ignore[attr-defined]


def set_advantages(exp: Experience, value: float) -> None:
    """``advantages = returns = value · action_mask`` (float32, like every experience
    tensor)."""
    assert exp.action_mask is not None
    exp.advantages = exp.action_mask.to(torch.float32) * value  # (R,)
    exp.returns = exp.advantages.clone()


class StepWiseGRPO(ExperienceOperator):
    """``step_wise_grpo`` in the explorer: Trinity-RFT's ``StepWiseGRPOAdvantageFn``.

    Groups the step's experiences into episodes (:func:`~rft_plugin_multi_step_grpo.
    episodes.episodes`), scores each by its last step's reward
    (:func:`episode_scores`), and sets ``advantages = returns = A_e · action_mask`` on
    every step of episode ``e`` (``/ n_steps`` with ``enable_step_norm``). Groups skipped
    by ``std_threshold`` are dropped.

    Metrics (``pipeline/step_wise_grpo/…``): ``episodes``, ``groups``,
    ``skipped_group_ratio``, ``filtered_count``, ``experience_count``,
    ``steps_per_episode``, ``reward_mean`` / ``reward_std`` (averaged over groups).
    """

    Args = StepWiseGRPOArgs

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        found = episodes(experiences)
        if not found:
            return experiences, {}
        args: StepWiseGRPOArgs = self.args
        rewards = torch.tensor([reward_of(ep.steps[-1]) for ep in found],
                               dtype=torch.float64)  # (E,)
        labels = [ep.group for ep in found]
        scores, skip, mean, std = episode_scores(rewards, labels, args)  # (E,)
        dropped: set[int] = set()
        for ep, score, skipped in zip(found, scores.tolist(), skip.tolist(), strict=True):
            if skipped:
                dropped.update(id(exp) for exp in ep.steps)
                continue
            value = score / len(ep.steps) if args.enable_step_norm else score
            for exp in ep.steps:
                set_advantages(exp, value)
        kept = [exp for exp in experiences if id(exp) not in dropped]
        return kept, _metrics(found, labels, skip, mean, std, len(kept), len(dropped))


def _metrics(found: Sequence[Episode], labels: list[str], skip: torch.Tensor,
             mean: torch.Tensor, std: torch.Tensor, kept: int, dropped: int) -> dict[str, float]:
    first: dict[str, int] = {}
    for e, label in enumerate(labels):
        first.setdefault(label, e)
    rows = list(first.values())  # one episode per group
    groups = len(rows)
    return {
        "episodes": float(len(found)),
        "groups": float(groups),
        "skipped_group_ratio": float(skip[rows].sum().item()) / groups,
        "filtered_count": float(dropped),
        "experience_count": float(kept),
        "steps_per_episode": sum(len(ep.steps) for ep in found) / len(found),
        "reward_mean": float(mean[rows].mean().item()),
        "reward_std": float(std[rows].mean().item()),
    }


PRESET = rl_preset("step_wise_grpo", repeat_times=8, explorer_operator="step_wise_grpo",
                   batch_layout=EpisodeRows("multi_step_grpo", "step_wise_grpo"))
"""Multi-step GRPO: step-wise GRPO advantages, clipped surrogate, k2 KL loss, 8 episodes
per task (Trinity-RFT's ``multi_step_grpo`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"multi_step_grpo": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"step_wise_grpo": step_wise_grpo_advantages}


@hookimpl
def register_experience_operators() -> dict[str, Any]:
    return {"step_wise_grpo": StepWiseGRPO}
