"""Advantage estimators of veRL 0.9.1 (``verl.trainer.ppo.core_algos``), vectorised.

Each function is tensor in, tensor out, with veRL's argument meaning, and returns
``(advantages, returns)``, both ``(B, T)``. ``token_level_rewards`` and ``response_mask``
are ``(B, T)``; ``index`` gives each sample's group (the prompt it answers): a tensor of
ids, or any sequence / numpy array of hashable ids (strings, uuids) as in veRL.

Group statistics use segment sums over group ids (``index_add_`` / ``bincount``), never a
Python loop over samples. Only GAE and REINFORCE++ loop, over time steps, as their
recurrences need. No gradient flows through advantages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rft.ops import masked_whiten

GroupIndex = torch.Tensor | np.ndarray | Sequence[Any]


def group_ids(index: GroupIndex, device: torch.device | None = None) -> torch.Tensor:
    """Map group labels ``(B,)`` to contiguous ids ``0 … G−1`` (a ``long`` tensor ``(B,)``)."""
    if isinstance(index, torch.Tensor):
        return torch.unique(index, return_inverse=True)[1].to(device=device, dtype=torch.long)
    array = np.asarray(index)
    try:
        inverse = np.unique(array, return_inverse=True)[1].reshape(-1)
    except TypeError:  # labels of mixed, unorderable types: number them by first appearance
        lookup: dict[Any, int] = {}
        inverse = np.fromiter((lookup.setdefault(x, len(lookup)) for x in array.tolist()),
                              dtype=np.int64, count=len(array))
    return torch.as_tensor(inverse, dtype=torch.long, device=device)


def _segment_sum(values: torch.Tensor, ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    """``Σ_{i: ids_i = g} values_i`` for every group ``g`` → ``(G,)``."""
    return values.new_zeros(num_groups).index_add_(0, ids, values)


def _group_stats(scores: torch.Tensor, ids: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group size ``n``, mean and unbiased std of ``scores`` over the group,
    each ``(B,)``; a singleton's std is NaN-free 0 (its mean/std are replaced by callers)."""
    num_groups = int(ids.max()) + 1 if ids.numel() else 0
    counts = torch.bincount(ids, minlength=num_groups).to(scores.dtype)  # (G,)
    mean = _segment_sum(scores, ids, num_groups) / counts  # (G,)
    centred = scores - mean[ids]  # (B,)
    sq = _segment_sum(centred * centred, ids, num_groups)  # (G,)
    std = torch.sqrt(sq / (counts - 1).clamp_min(1))  # (G,)
    return counts[ids], mean[ids], std[ids]


def grpo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage (``grpo``; Dr.GRPO with ``norm_adv_by_std_in_grpo=False``).

    With ``r_i = Σ_t token_level_rewards_it`` and ``μ_g``, ``σ_g`` the mean and unbiased std
    of ``r`` over sample ``i``'s group ``g``::

        A_i = (r_i − μ_g) / (σ_g + ε)     (GRPO)
        A_i =  r_i − μ_g                   (Dr.GRPO)

    broadcast over the response, ``A_it = A_i · mask_it``. A singleton group uses
    ``μ = 0, σ = 1`` (veRL), so its advantage is ``r_i / (1 + ε)`` (or ``r_i``).
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)  # (B,)
        ids = group_ids(index, scores.device)
        counts, mean, std = _group_stats(scores, ids)  # (B,)
        single = counts == 1
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        centred = scores - mean
        scalars = centred / (std + epsilon) if norm_adv_by_std_in_grpo else centred  # (B,)
        advantages = scalars.unsqueeze(-1) * response_mask  # (B, T)
    return advantages, advantages


def rloo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (leave-one-out baseline, https://arxiv.org/abs/2402.14740).

    ``A_i = r_i − mean_{j≠i} r_j = n/(n−1) · (r_i − μ_g)`` for a group of ``n > 1``;
    a singleton keeps ``A_i = r_i`` (veRL's ``rloo``). ``A_it = A_i · mask_it``.
    ``epsilon`` is accepted for veRL's signature and unused.
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)  # (B,)
        counts, mean, _ = _group_stats(scores, group_ids(index, scores.device))
        scale = counts / (counts - 1).clamp_min(1)
        scalars = torch.where(counts > 1, scores * scale - mean * scale, scores)  # (B,)
        advantages = scalars.unsqueeze(-1) * response_mask  # (B, T)
    return advantages, advantages


def opo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: length-weighted group baseline (https://arxiv.org/abs/2505.23585).

    With ``ℓ_i = Σ_t mask_it``: ``b_g = Σ_{j∈g} ℓ_j r_j / Σ_{j∈g} ℓ_j`` for ``n > 1``
    (``0`` for a singleton), ``A_it = (r_i − b_g) · mask_it``.

    Divergence from veRL: a group whose responses are all empty (``Σ ℓ = 0``) gets
    ``b_g = 0`` (advantages 0 under the zero mask) where veRL divides 0 by 0 and returns
    NaN. ``epsilon`` is accepted for veRL's signature and unused.
    """
    with torch.no_grad():
        lengths = response_mask.sum(dim=-1).to(token_level_rewards.dtype)  # (B,)
        scores = token_level_rewards.sum(dim=-1)  # (B,)
        ids = group_ids(index, scores.device)
        num_groups = int(ids.max()) + 1 if ids.numel() else 0
        counts = torch.bincount(ids, minlength=num_groups)[ids]  # (B,)
        weighted = _segment_sum(lengths * scores, ids, num_groups)[ids]  # (B,)
        total = _segment_sum(lengths, ids, num_groups)[ids]  # (B,)
        baseline = torch.where((counts > 1) & (total > 0),
                               weighted / torch.where(total > 0, total, 1), 0.0)  # (B,)
        advantages = (scores - baseline).unsqueeze(-1) * response_mask  # (B, T)
    return advantages, advantages


def reinforce_plus_plus_baseline_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: GroupIndex,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (https://arxiv.org/abs/2501.03262).

    ``A_it = whiten((r_i − μ_g) · mask)_it · mask_it``: the group mean is subtracted
    (``μ = 0`` for a singleton), then the result is whitened over all masked tokens of the
    batch (raises ``ValueError`` with fewer than two masked tokens, like veRL).
    ``epsilon`` is accepted for veRL's signature and unused.
    """
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)  # (B,)
        counts, mean, _ = _group_stats(scores, group_ids(index, scores.device))
        centred = torch.where(counts > 1, scores - mean, scores)  # (B,)
        advantages = centred.unsqueeze(-1) * response_mask  # (B, T)
        advantages = masked_whiten(advantages, response_mask) * response_mask
    return advantages, advantages


def reinforce_plus_plus_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted return-to-go, whitened over the batch.

    ``G_t = m_t · (r_t + γ G'_{t+1})`` where the running return ``G'`` is carried
    unchanged through unmasked (observation) tokens; ``A = whiten(G, mask) · mask``.
    """
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


def gae_advantages(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (https://arxiv.org/abs/1506.02438).

    ``δ_t = r_t + γ V_{t+1} − V_t``, ``Â_t = δ_t + γλ Â_{t+1}``, where ``V_{t+1}`` and
    ``Â_{t+1}`` are those of the next *masked* token (unmasked tokens are skipped).
    ``returns = Â + V``; ``advantages = whiten(Â, mask)`` (on every position, padding
    included, as veRL leaves it).
    """
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


def remax_advantages(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (https://arxiv.org/abs/2310.10505): return-to-go minus the greedy baseline.

    ``G_t = Σ_{s≥t} r_s · mask_s``, ``A_t = G_t − b · mask_t`` with ``b`` the reward of
    the greedy response, ``reward_baselines`` ``(B,)``.
    """
    with torch.no_grad():
        returns = (token_level_rewards * response_mask).flip(-1).cumsum(-1).flip(-1)  # (B, T)
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns
