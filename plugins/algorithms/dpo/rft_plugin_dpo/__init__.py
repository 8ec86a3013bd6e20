"""rft-plugin-dpo: Direct Preference Optimization (https://arxiv.org/abs/2305.18290).

Registered names: algorithm ``dpo``; policy loss fn ``dpo``.

Batch layout (:class:`~rft_plugin_dpo.pairs.PreferencePairs`, the preset's
``batch_layout``): rows ``2k`` and ``2k + 1`` of a ``dpo`` batch are the *chosen* and the
*rejected* response of preference pair ``k`` (the trainer never splits a pair across
micro-batches). The loss declares ``needs_ref_log_prob = True`` (so the trainer runs the
frozen reference model and fills ``inputs.ref_log_prob``), divides by
``inputs.agg.global_batch_size`` (the mini-batch's row count, so micro-batch losses add up
to the mini-batch loss), and returns the already aggregated scalar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rft import hookimpl
from rft.algorithm import AlgorithmPreset
from rft.contracts import PolicyLossInputs
from rft.errors import RftError
from rft_plugin_dpo.pairs import PreferencePairs

__all__ = ["DPOArgs", "PRESET", "PreferencePairs", "dpo_loss"]


@dataclass
class DPOArgs:
    """Arguments of the ``dpo`` policy loss (``algorithm.policy_loss_fn_args``)."""

    beta: float = 0.1
    """Temperature ``β``: strength of the implicit KL to the reference model."""
    label_smoothing: float = 0.0
    """Probability ``ε`` that a preference label is flipped (conservative DPO); 0: DPO."""


def dpo_loss(inputs: PolicyLossInputs, args: DPOArgs
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPO loss of the pairs in this micro-batch, normalised by the mini-batch's pairs.

    With ``ρ_i = Σ_t mask_it (log π_it − log π_ref,it)`` a response's log-ratio to the
    reference, and ``z_k = β (ρ_{2k} − ρ_{2k+1})`` (chosen minus rejected)::

        ℓ_k  = −(1 − ε) · log σ(z_k) − ε · log σ(−z_k)
        loss = Σ_k ℓ_k / (N / 2)

    with ``N = inputs.agg.global_batch_size`` (``None``: this batch's row count, giving the
    mean over pairs). At ``π = π_ref`` every ``ℓ_k = log 2``. ``old_log_prob`` and
    ``advantages`` are not used.

    :return: the scalar loss and detached metrics ``chosen_reward`` / ``rejected_reward``
        (mean ``β ρ`` of chosen / rejected), ``accuracy_mean`` (fraction of pairs with
        ``ρ_chosen > ρ_rejected``), ``margin`` (mean ``z``), over this micro-batch.
    """
    beta, label_smoothing = args.beta, args.label_smoothing
    rows = inputs.log_prob.shape[0]
    if rows % 2:
        raise ValueError(f"dpo: a batch holds (chosen, rejected) pairs, got {rows} rows")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"dpo: label_smoothing must be within [0, 0.5), got {label_smoothing}")
    if inputs.ref_log_prob is None:
        raise RftError("dpo: needs ref_log_prob, but no reference model ran")
    log_ratio = ((inputs.log_prob - inputs.ref_log_prob)
                 * inputs.response_mask).sum(dim=-1)  # (B,)
    chosen, rejected = log_ratio[0::2], log_ratio[1::2]  # (B/2,)
    logits = beta * (chosen - rejected)  # (B/2,)
    losses = (-(1 - label_smoothing) * F.logsigmoid(logits)
              - label_smoothing * F.logsigmoid(-logits))  # (B/2,)
    global_batch_size = inputs.agg.global_batch_size
    pairs = (global_batch_size if global_batch_size is not None else rows) / 2
    loss = losses.sum() / pairs
    with torch.no_grad():
        metrics = {
            "chosen_reward": beta * chosen.mean(),
            "rejected_reward": beta * rejected.mean(),
            "accuracy_mean": (chosen > rejected).to(loss.dtype).mean(),
            "margin": logits.mean(),
        }
    return loss, metrics


dpo_loss.Args = DPOArgs  # type: ignore[attr-defined]
dpo_loss.needs_ref_log_prob = True  # type: ignore[attr-defined]

PRESET = AlgorithmPreset(
    advantage_fn=None,
    policy_loss_fn="dpo",
    kl_loss_fn="none",
    kl_penalty_fn="none",
    entropy_loss_fn="none",
    sample_strategy="default",
    repeat_times=2,
    min_repeat_times=2,
    fixed_repeat_times=2,
    use_reference=True,
    train_only=True,
    experience_format="dpo",
    batch_layout=PreferencePairs(),
)
"""DPO: preference pairs from a fixed dataset against a frozen reference model."""


@hookimpl
def register_algorithms() -> dict[str, Any]:
    return {"dpo": PRESET}


@hookimpl
def register_policy_loss_fns() -> dict[str, Any]:
    return {"dpo": dpo_loss}
