"""rft-plugin-gigpo: Group-in-Group Policy Optimization for multi-turn agents (Feng et al.,
https://arxiv.org/abs/2505.10978; Trinity-RFT's ``gigpo``).

Critic-free, two-level advantages for the steps of multi-step episodes:

- episode level: each episode's return against the other episodes of its task
  (``A^E``);
- step level: steps taken from the same environment state (an *anchor state*, named by
  a hash the workflow stores) form groups across episodes; each step's discounted return
  against that group's (``A^S``);

``A = A^E + ω · A^S`` on every token of the step's action mask.

Registered names:

- algorithm ``gigpo``;
- experience operator ``gigpo``: the full computation, in the explorer, over whole
  episodes (grouped as :mod:`rft_plugin_multi_step_grpo.episodes` says);
- advantage fn ``gigpo``: the trainer-side case of one-step episodes without anchor
  states (``A = A^E``), used when the experiences carry no explorer advantages.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.buffer.operators import ExperienceOperator
from rft.contracts import AdvantageInputs
from rft.experience import Experience
from rft.group_ops import GroupIndex, group_ids, group_stats, outcome_scores
from rft_plugin_multi_step_grpo import set_advantages
from rft_plugin_multi_step_grpo.episodes import EPISODE_KEY, EpisodeRows, episodes

__all__ = ["GiGPO", "GiGPOArgs", "PRESET", "discounted_returns", "gigpo_advantages",
           "normalize"]


@dataclass
class GiGPOArgs:
    """Arguments of ``gigpo`` (``algorithm.advantage_fn_args`` in the trainer,
    ``data_processor.experience_pipeline.operators[i].args`` in the explorer)."""

    omega: float = 1.0
    """``ω``: weight of the step-level advantage."""
    gamma: float = 1.0
    """``γ``: discount of the step-level returns ``R_t = Σ_{k≥t} γ^{k−t} r_k``."""
    fnorm: Literal["std", "none"] = "none"
    """Divide centred returns by the group's std (``std``) or not (``none``)."""
    epsilon: float = 1e-6
    """Added to the divisor (the std, or 1 with ``none``)."""
    step_reward_key: str = "step_reward"
    """``Experience.info`` key of a step's own reward ``r_t``; when no step of an episode
    has it, ``r_t`` is 0 but for the last step's ``reward`` (a terminal reward)."""
    env_state_hash_key: str = "env_state_hash"
    """``Experience.info`` key of the hash of the environment state the step acted in;
    steps without it take no part in the step level (``A^S = 0``)."""

    def __post_init__(self) -> None:
        if self.fnorm not in ("std", "none"):
            raise ValueError(f"fnorm must be 'std' or 'none', got {self.fnorm!r}")


def normalize(values: torch.Tensor, index: GroupIndex, args: GiGPOArgs) -> torch.Tensor:
    """GiGPO's group normalisation of ``values`` ``(N,)`` grouped by ``index``.

    ``(v − μ_g) / (d_g + ε)`` with ``μ_g`` the group mean and ``d_g`` its unbiased std
    (``fnorm: std``) or 1 (``none``); a group of one has ``μ = 0, d = 1``.
    """
    counts, mean, std = group_stats(values, group_ids(index, values.device))  # (N,)
    single = counts == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    denom = std if args.fnorm == "std" else torch.ones_like(std)
    denom = torch.where(single, torch.ones_like(denom), denom)
    return (values - mean) / (denom + args.epsilon)


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """``R_t = Σ_{k≥t} γ^{k−t} r_k`` for every step ``t``."""
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def step_rewards(steps: list[Experience], args: GiGPOArgs) -> list[float]:
    """``r_t`` of an episode's steps (in step order), see :attr:`GiGPOArgs.step_reward_key`."""
    if any(args.step_reward_key in exp.info for exp in steps):
        return [float(exp.info.get(args.step_reward_key, 0.0)) for exp in steps]
    last = steps[-1].reward
    return [0.0] * (len(steps) - 1) + [float(last) if last is not None else 0.0]


def gigpo_advantages(inputs: AdvantageInputs, args: GiGPOArgs
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``gigpo`` in the trainer: every row is an episode of one step, with no anchor state.

    Then ``A = A^E``: the row's return ``r_i = Σ_t token_level_rewards_it`` normalised in
    its group (:func:`normalize` over ``inputs.index``), ``A_it = A_i · mask_it``;
    ``returns`` is the same tensor. With ``fnorm: std`` it equals veRL's GRPO advantage
    (with ``none``, Dr.GRPO's divided by ``1 + ε``).

    Steps of longer episodes, or with anchor states, need the explorer operator of the
    same name (the ``gigpo`` preset's batch layout refuses them without it).
    """
    with torch.no_grad():
        scores = normalize(outcome_scores(inputs.token_level_rewards), inputs.index, args)
        advantages = scores.unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


gigpo_advantages.Args = GiGPOArgs  # type: ignore[attr-defined]


class GiGPO(ExperienceOperator):
    """``gigpo`` in the explorer: Trinity-RFT's ``GiGPOAdvantageFn``.

    Per episode (steps in order): step rewards ``r_t`` (:func:`step_rewards`), discounted
    returns ``R_t`` and the return ``Σ_t r_t``. ``A^E``: the episode returns normalised
    over the task's episodes. ``A^S``: the steps that carry an anchor-state hash are
    grouped by it across the whole batch (as Trinity-RFT does; the paper groups within a
    task); in a group of two or more each step's ``R_t`` is normalised over the group,
    else ``A^S = 0``. Every step gets ``advantages = returns = (A^E + ω A^S) ·
    action_mask``.

    Metrics (``pipeline/gigpo/…``): ``episode_reward_mean`` / ``episode_reward_std``
    (mean and unbiased std of the episode returns of a task, averaged over tasks), ``anchor_groups_total``, ``anchor_groups_size_gt1``,
    ``anchor_group_hit_ratio``, ``mean_abs_A_E``, ``mean_abs_A_S``, ``experience_count``.
    """

    Args = GiGPOArgs

    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        found = episodes(experiences)
        if not found:
            return experiences, {}
        args: GiGPOArgs = self.args
        returns: list[float] = []
        discounted: dict[int, float] = {}
        for ep in found:
            rewards = step_rewards(ep.steps, args)
            returns.append(sum(rewards))
            for exp, value in zip(ep.steps, discounted_returns(rewards, args.gamma), strict=True):
                discounted[id(exp)] = value
        labels = [ep.group for ep in found]
        episode_returns = torch.tensor(returns, dtype=torch.float64)  # (E,)
        a_e = normalize(episode_returns, labels, args).tolist()  # (E,)

        anchored = [exp for ep in found for exp in ep.steps
                    if exp.info.get(args.env_state_hash_key) is not None]
        a_s = {id(exp): 0.0 for ep in found for exp in ep.steps}
        states = [str(exp.info[args.env_state_hash_key]) for exp in anchored]
        sizes = {state: states.count(state) for state in set(states)}
        shared = [exp for exp, state in zip(anchored, states, strict=True) if sizes[state] > 1]
        if shared:
            values = torch.tensor([discounted[id(exp)] for exp in shared], dtype=torch.float64)
            keys = [str(exp.info[args.env_state_hash_key]) for exp in shared]
            for exp, value in zip(shared, normalize(values, keys, args).tolist(), strict=True):
                a_s[id(exp)] = value

        for ep, episode_advantage in zip(found, a_e, strict=True):
            for exp in ep.steps:
                set_advantages(exp, episode_advantage + args.omega * a_s[id(exp)])

        per_group: dict[str, list[float]] = {}
        for label, value in zip(labels, returns, strict=True):
            per_group.setdefault(label, []).append(value)
        steps = [exp for ep in found for exp in ep.steps]
        step_a_e = [a for ep, a in zip(found, a_e, strict=True) for _ in ep.steps]
        return experiences, {
            "episode_reward_mean": statistics.fmean(
                statistics.fmean(v) for v in per_group.values()),
            "episode_reward_std": statistics.fmean(
                statistics.stdev(v) if len(v) > 1 else 0.0 for v in per_group.values()),
            "anchor_groups_total": float(len(sizes)),
            "anchor_groups_size_gt1": float(sum(n > 1 for n in sizes.values())),
            "anchor_group_hit_ratio": (sum(n > 1 for n in sizes.values()) / len(sizes)
                                       if sizes else 0.0),
            "mean_abs_A_E": statistics.fmean(abs(a) for a in step_a_e),
            "mean_abs_A_S": statistics.fmean(abs(a_s[id(exp)]) for exp in steps),
            "experience_count": float(len(experiences)),
        }


PRESET = rl_preset(
    "gigpo", repeat_times=8, explorer_operator="gigpo",
    batch_layout=EpisodeRows("gigpo", "gigpo",
                             keys=(EPISODE_KEY, "env_state_hash", "step_reward")))
"""GiGPO: GiGPO advantages, clipped surrogate (clip 0.2 both sides), k2 KL loss, 8
episodes per task (Trinity-RFT's ``gigpo`` preset)."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"gigpo": PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"gigpo": gigpo_advantages}


@hookimpl
def register_experience_operators() -> dict[str, Any]:
    return {"gigpo": GiGPO}
