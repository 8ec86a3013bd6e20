"""Generalized Advantage Estimation, equal to veRL 0.9.1's
``compute_gae_advantage_return`` on the same tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from rft.contracts import AdvantageInputs
from rft.ops import masked_whiten


@dataclass
class GAEArgs:
    """Arguments of the ``ppo`` advantage (``algorithm.advantage_fn_args``)."""

    gamma: float = 1.0
    """Discount factor ``γ`` (veRL ``algorithm.gamma``)."""
    lam: float = 1.0
    """GAE's ``λ``, trading bias (0) for variance (1) (veRL ``algorithm.lam``)."""


def gae_advantages(inputs: AdvantageInputs, args: GAEArgs
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (https://arxiv.org/abs/1506.02438).

    ``δ_t = r_t + γ V_{t+1} − V_t``, ``Â_t = δ_t + γλ Â_{t+1}``, where ``V_{t+1}`` and
    ``Â_{t+1}`` are those of the next *masked* token (unmasked tokens are skipped).
    ``returns = Â + V``; ``advantages = whiten(Â, mask)`` (on every position, padding
    included, as veRL leaves it). Needs the critic's ``inputs.values`` ``(B, T)``. Loops
    over time steps (the recurrence needs it), vectorised over the batch. Raises
    ``ValueError`` when fewer than two tokens are masked (unbiased variance), like veRL.
    """
    values = inputs.require("values", "gae")  # (B, T)
    token_level_rewards, response_mask = inputs.token_level_rewards, inputs.response_mask
    gamma, lam = args.gamma, args.lam
    with torch.no_grad():
        mask = response_mask.to(values.dtype)
        length = token_level_rewards.shape[-1]
        gae = torch.empty_like(values)  # (B, T)
        next_values = torch.zeros_like(values[:, 0])  # (B,)
        last_gae = torch.zeros_like(values[:, 0])  # (B,)
        for t in reversed(range(length)):
            delta = token_level_rewards[:, t] + gamma * next_values - values[:, t]
            current = delta + gamma * lam * last_gae
            next_values = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_values
            last_gae = current * mask[:, t] + (1 - mask[:, t]) * last_gae
            gae[:, t] = last_gae
        returns = gae + values
        advantages = masked_whiten(gae, response_mask)
    return advantages, returns


gae_advantages.needs_values = True  # type: ignore[attr-defined]  # reads the critic's values


gae_advantages.Args = GAEArgs  # type: ignore[attr-defined]
