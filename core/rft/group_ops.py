"""Segment operations over groups of rollouts (the samples that answer one prompt).

Group-baseline advantages (GRPO, RLOO, OPO, REINFORCE++-baseline, OPMD, …) need
per-group sums, means and standard deviations of a score per sample. These helpers do it
with segment sums over contiguous group ids (``index_add_`` / ``bincount``), never a
Python loop over samples. Plugins import them from here::

    from rft.group_ops import group_ids, group_stats

``index`` (a sample's group label) may be a tensor of ids, or any sequence / numpy array
of hashable labels (strings, uuids) as veRL passes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

GroupIndex = torch.Tensor | np.ndarray | Sequence[Any]
"""Group label per sample, ``(B,)``: a tensor, a numpy array or a sequence of labels."""


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


def num_groups(ids: torch.Tensor) -> int:
    """``G``, the number of groups of contiguous ids ``ids`` (0 for an empty batch)."""
    return int(ids.max()) + 1 if ids.numel() else 0


def segment_sum(values: torch.Tensor, ids: torch.Tensor, groups: int) -> torch.Tensor:
    """``Σ_{i: ids_i = g} values_i`` for every group ``g`` → ``(G,)``."""
    return values.new_zeros(groups).index_add_(0, ids, values)


def segment_max(values: torch.Tensor, ids: torch.Tensor, groups: int) -> torch.Tensor:
    """``max_{i: ids_i = g} values_i`` for every group ``g`` → ``(G,)`` (``−inf`` if empty)."""
    out = values.new_full((groups,), float("-inf"))
    return out.scatter_reduce(0, ids, values, reduce="amax", include_self=True)


def group_counts(ids: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Per-sample size ``n`` of the sample's group, ``(B,)``."""
    return torch.bincount(ids, minlength=num_groups(ids)).to(dtype)[ids]


def group_stats(scores: torch.Tensor, ids: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group size ``n``, mean and unbiased std of ``scores`` over the group,
    each ``(B,)``. A singleton's std is 0 (not NaN); callers decide what a singleton gets.
    """
    groups = num_groups(ids)
    counts = torch.bincount(ids, minlength=groups).to(scores.dtype)  # (G,)
    mean = segment_sum(scores, ids, groups) / counts  # (G,)
    centred = scores - mean[ids]  # (B,)
    sq = segment_sum(centred * centred, ids, groups)  # (G,)
    std = torch.sqrt(sq / (counts - 1).clamp_min(1))  # (G,)
    return counts[ids], mean[ids], std[ids]


def outcome_scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    """A response's outcome score ``r_i = Σ_t token_level_rewards_it``, ``(B,)``."""
    return token_level_rewards.sum(dim=-1)
