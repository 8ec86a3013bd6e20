"""rft-plugin-reinforceplusplus: REINFORCE++ (https://arxiv.org/abs/2501.03262).

Registered names:

- algorithms ``reinforceplusplus`` and ``reinforceplusplus_baseline``;
- advantage fns ``reinforceplusplus`` (discounted return-to-go, whitened over the batch)
  and ``reinforceplusplus_baseline`` (group mean subtracted, then whitened).

Equal to veRL 0.9.1's ``compute_reinforce_plus_plus_outcome_advantage`` and
``compute_reinforce_plus_plus_baseline_outcome_advantage``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rft import hookimpl
from rft.algorithm import rl_preset
from rft.contracts import AdvantageInputs
from rft.group_ops import group_ids, group_stats, outcome_scores
from rft.ops import masked_whiten

__all__ = ["BASELINE_PRESET", "PRESET", "ReinforcePlusPlusArgs", "ReinforcePlusPlusBaselineArgs",
           "reinforce_plus_plus_advantages", "reinforce_plus_plus_baseline_advantages"]


@dataclass
class ReinforcePlusPlusArgs:
    """Arguments of the ``reinforceplusplus`` advantage (``algorithm.advantage_fn_args``)."""

    gamma: float = 1.0
    """Discount factor ``γ`` of the return-to-go (veRL ``algorithm.gamma``)."""


@dataclass
class ReinforcePlusPlusBaselineArgs:
    """Arguments of ``reinforceplusplus_baseline``: none (veRL's ``epsilon`` is unused)."""


def reinforce_plus_plus_advantages(inputs: AdvantageInputs, args: ReinforcePlusPlusArgs
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go, whitened over the batch.

    ``G_t = m_t · (r_t + γ G'_{t+1})`` where the running return ``G'`` is carried
    unchanged through unmasked (observation) tokens; ``returns = G``,
    ``advantages = whiten(G, mask) · mask``. Raises ``ValueError`` when fewer than two
    tokens are masked (unbiased variance), like veRL.
    """
    token_level_rewards, response_mask = inputs.token_level_rewards, inputs.response_mask
    gamma = args.gamma
    with torch.no_grad():
        mask = response_mask.to(token_level_rewards.dtype)
        returns = torch.zeros_like(token_level_rewards)  # (B, T)
        running = torch.zeros_like(token_level_rewards[:, 0])  # (B,)
        for t in reversed(range(token_level_rewards.shape[1])):
            updated = token_level_rewards[:, t] + gamma * running
            returns[:, t] = updated * mask[:, t]
            running = updated * mask[:, t] + running * (1 - mask[:, t])
        advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


reinforce_plus_plus_advantages.Args = ReinforcePlusPlusArgs  # type: ignore[attr-defined]


def reinforce_plus_plus_baseline_advantages(inputs: AdvantageInputs,
                                            args: ReinforcePlusPlusBaselineArgs
                                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: ``A_it = whiten((r_i − μ_g) · mask)_it · mask_it``.

    The group mean is subtracted (``μ = 0`` for a singleton), then the result is whitened
    over all masked tokens of the batch; ``returns`` is the same tensor. Raises
    ``ValueError`` with fewer than two masked tokens, like veRL.
    """
    response_mask = inputs.response_mask  # (B, T)
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        counts, mean, _ = group_stats(scores, group_ids(inputs.index, scores.device))
        centred = torch.where(counts > 1, scores - mean, scores)  # (B,)
        advantages = centred.unsqueeze(-1) * response_mask  # (B, T)
        advantages = masked_whiten(advantages, response_mask) * response_mask
    return advantages, advantages


reinforce_plus_plus_baseline_advantages.Args = ReinforcePlusPlusBaselineArgs  # type: ignore[attr-defined]

PRESET = rl_preset("reinforceplusplus", group=False)
"""REINFORCE++: batch-whitened returns, one rollout per task."""

BASELINE_PRESET = rl_preset("reinforceplusplus_baseline")
"""REINFORCE++-baseline: group mean subtracted before whitening; needs groups."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"reinforceplusplus": PRESET, "reinforceplusplus_baseline": BASELINE_PRESET}


@hookimpl
def register_advantage_fns() -> dict[str, Any]:
    return {"reinforceplusplus": reinforce_plus_plus_advantages,
            "reinforceplusplus_baseline": reinforce_plus_plus_baseline_advantages}
