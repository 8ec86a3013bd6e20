"""Group-baseline outcome advantages: GRPO (and Dr.GRPO) and OPO.

Equal to veRL 0.9.1's ``compute_grpo_outcome_advantage`` and
``compute_opo_outcome_advantage`` on the same tensors (``tests/test_grpo.py`` of this
distribution). Vectorised with segment sums over group ids (:mod:`rft.group_ops`); no
gradient flows through advantages. Each registered function follows
:class:`rft.contracts.AdvantageFn`: ``fn(inputs, args) -> (advantages, returns)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rft.contracts import AdvantageInputs
from rft.group_ops import (group_counts, group_ids, group_stats, num_groups, outcome_scores,
                           segment_sum)


@dataclass
class GRPOArgs:
    """Arguments of the ``grpo`` advantage (``algorithm.advantage_fn_args``)."""

    epsilon: float = 1e-6
    """Added to the group std before dividing (veRL's ``epsilon``)."""
    norm_adv_by_std_in_grpo: bool = True
    """Divide by the group std (GRPO); ``False``: only subtract the mean (Dr.GRPO,
    https://arxiv.org/abs/2503.20783)."""
    std_threshold: float | None = None
    """Trinity-RFT's ``std_threshold``: a group (of two or more) whose reward std is at
    most this gets zero advantage (it carries no signal); ``None``: off."""


@dataclass
class GRPONoStdArgs(GRPOArgs):
    """Arguments of ``grpo_no_std``: ``grpo`` with ``norm_adv_by_std_in_grpo=False``."""

    norm_adv_by_std_in_grpo: bool = False
    """Divide by the group std; ``False`` (this name's default): Dr.GRPO."""


def grpo_advantages(inputs: AdvantageInputs, args: GRPOArgs
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage (https://arxiv.org/abs/2402.03300).

    With ``r_i = Σ_t token_level_rewards_it`` and ``μ_g``, ``σ_g`` the mean and unbiased
    std of ``r`` over sample ``i``'s group ``g`` (``inputs.index``)::

        A_i = (r_i − μ_g) / (σ_g + ε)     (GRPO)
        A_i =  r_i − μ_g                   (Dr.GRPO: norm_adv_by_std_in_grpo=False)

    broadcast over the response, ``A_it = A_i · mask_it``; ``returns`` is the same tensor.
    A singleton group uses ``μ = 0, σ = 1`` (veRL), so its advantage is ``r_i / (1 + ε)``
    (or ``r_i``). With ``std_threshold = τ``: ``A_i = 0`` where ``n_g > 1`` and ``σ_g ≤ τ``.
    """
    with torch.no_grad():
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        counts, mean, std = group_stats(scores, group_ids(inputs.index, scores.device))  # (B,)
        single = counts == 1
        mean = torch.where(single, torch.zeros_like(mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        centred = scores - mean
        scalars = (centred / (std + args.epsilon) if args.norm_adv_by_std_in_grpo
                   else centred)  # (B,)
        if args.std_threshold is not None:
            flat = ~single & (std <= args.std_threshold)  # (B,)
            scalars = torch.where(flat, torch.zeros_like(scalars), scalars)
        advantages = scalars.unsqueeze(-1) * inputs.response_mask  # (B, T)
    return advantages, advantages


grpo_advantages.Args = GRPOArgs  # type: ignore[attr-defined]


def grpo_no_std_advantages(inputs: AdvantageInputs, args: GRPONoStdArgs
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr.GRPO: :func:`grpo_advantages` whose ``norm_adv_by_std_in_grpo`` defaults to
    ``False`` (``A_i = r_i − μ_g``)."""
    return grpo_advantages(inputs, args)


grpo_no_std_advantages.Args = GRPONoStdArgs  # type: ignore[attr-defined]


def opo_advantages(inputs: AdvantageInputs, args: None) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: length-weighted group baseline (https://arxiv.org/abs/2505.23585).

    With ``ℓ_i = Σ_t mask_it``: ``b_g = Σ_{j∈g} ℓ_j r_j / Σ_{j∈g} ℓ_j`` for ``n > 1``
    (``0`` for a singleton), ``A_it = (r_i − b_g) · mask_it``; ``returns`` is the same.

    Divergence from veRL: a group whose responses are all empty (``Σ ℓ = 0``) gets
    ``b_g = 0`` (advantages 0 under the zero mask) where veRL divides 0 by 0 and returns
    NaN. veRL's unused ``epsilon`` argument is not taken.
    """
    response_mask = inputs.response_mask  # (B, T)
    with torch.no_grad():
        lengths = response_mask.sum(dim=-1).to(inputs.token_level_rewards.dtype)  # (B,)
        scores = outcome_scores(inputs.token_level_rewards)  # (B,)
        ids = group_ids(inputs.index, scores.device)
        groups = num_groups(ids)
        counts = group_counts(ids, scores.dtype)  # (B,)
        weighted = segment_sum(lengths * scores, ids, groups)[ids]  # (B,)
        total = segment_sum(lengths, ids, groups)[ids]  # (B,)
        baseline = torch.where((counts > 1) & (total > 0),
                               weighted / torch.where(total > 0, total, 1), 0.0)  # (B,)
        advantages = (scores - baseline).unsqueeze(-1) * response_mask  # (B, T)
    return advantages, advantages
