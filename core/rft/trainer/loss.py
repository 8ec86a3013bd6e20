"""Assembling the actor loss from the functions the config selected (veRL's actor loss).

Validation resolves every ``algorithm.*_fn`` name once into a
:class:`~rft.config.plan.Selected` (implementation + ``Args`` instance), gathered in the
run plan's :class:`~rft.config.plan.LossPlan`; this module calls them. The total loss of one micro-batch is veRL 0.9.1's
(``verl/workers/utils/losses.py::ppo_loss``)::

    loss = agg(pg_loss) − entropy_term + kl_coef · agg(kl)

where ``agg = agg_loss(·, mask, loss_agg_mode, batch_num_tokens=N_tok,
global_batch_size=N_seq, loss_scale_factor=F)`` with ``N_tok`` / ``N_seq`` the token and
sequence counts of the whole **mini-batch** (see :class:`AggContext`), so the losses of
its micro-batches add up to the mini-batch loss and their gradients accumulate to its
gradient.

Calling conventions (what a plugin function receives)
-----------------------------------------------------
The contracts are :mod:`rft.contracts` (typed inputs, return values, shape letters). Every
function is called ``fn(inputs, args)``: ``inputs`` the typed inputs of its kind,
``args`` the ``Args`` instance validation built (``None`` for a function without
``Args``). No signature is read; the only other thing the trainer reads from a function
is ``needs_ref_log_prob`` (:func:`rft.contracts.needs_ref_log_prob`).

advantage fn (``algorithm.advantage_fn``)
    :class:`~rft.contracts.AdvantageInputs` → ``(advantages, returns)``, both ``(B, T)``.
    Not called when the preset computes advantages in the explorer, when there is no
    advantage fn, or when every experience already carries advantages.

policy loss fn (``algorithm.policy_loss_fn``)
    :class:`~rft.contracts.PolicyLossInputs` → ``(pg_loss, metrics)``: a per-token
    ``pg_loss`` ``(B, T)`` is aggregated here with ``inputs.agg``; a 0-dim one is taken as
    already aggregated (sequence-level losses such as DPO). ``metrics`` are reported as
    ``actor/<name>``. For ``sft`` batches ``old_log_prob`` is ``log_prob.detach()`` and
    ``advantages`` are zeros. ``global_step`` is the trainer's ``global_steps + 1`` (the
    step being taken); ``teacher_log_prob`` the batch's ``Experience.teacher_logprobs``.

KL fn (``algorithm.kl_loss_fn`` / ``algorithm.kl_penalty_fn``)
    :class:`~rft.contracts.KLInputs` → ``kl`` per token ``(B, T)``; ``kl_coef`` is the
    ``kl_coef`` field of its ``Args`` (``KLArgs``). As a loss (veRL ``use_kl_loss``):
    ``+ kl_coef · agg(kl)``. As a reward penalty (veRL ``use_kl_in_reward`` with a fixed
    controller), before advantages: ``token_level_rewards = token_level_scores −
    kl_coef · kl(old_log_prob, ref_log_prob) · response_mask``. The name ``none`` disables
    either.

entropy fn (``algorithm.entropy_loss_fn``)
    :class:`~rft.contracts.EntropyInputs` → a 0-dim term subtracted from the loss;
    ``entropy`` ``(B, T)`` from :func:`rft.ops.entropy_from_logits`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from rft.config.plan import LossPlan, Selected, TrainerPlan, kl_coef_of
from rft.contracts import (AdvantageInputs, AggContext, EntropyInputs, KLInputs,
                           MissingInputError, PolicyLossInputs)
from rft.errors import RftError
from rft.experience import Batch
from rft.ops import masked_mean
from rft.plugins import args_type_of


# --------------------------------------------------------------------------------------
# Small helpers around Selected
# --------------------------------------------------------------------------------------


def args_dict(selected: Selected | None) -> dict[str, Any]:
    """``dataclasses.asdict(selected.args)``, or ``{}`` when there are no args."""
    if selected is None or selected.args is None:
        return {}
    if dataclasses.is_dataclass(selected.args) and not isinstance(selected.args, type):
        return dataclasses.asdict(selected.args)
    return dict(selected.args)


def args_of(selected: Selected) -> Any:
    """The ``args`` a function is called with: the ``Args`` instance validation built, or
    the ``Args`` defaults when ``selected`` was assembled without one (tests, scripts);
    ``None`` for a function without ``Args``."""
    if selected.args is not None:
        return selected.args
    args_type = args_type_of(selected.implementation)
    return args_type() if args_type is not None else None


# --------------------------------------------------------------------------------------
# Advantages and KL penalty (before the update)
# --------------------------------------------------------------------------------------


def batch_advantages(plan: TrainerPlan, batch: Batch, rewards: torch.Tensor,
                     mask: torch.Tensor, values: torch.Tensor | None,
                     entropy: torch.Tensor | None = None, *,
                     old_log_prob: torch.Tensor | None = None,
                     expected_entropy_signal: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(advantages, returns, response_mask)`` ``(B, T)`` of a rollout batch: the batch's
    own advantages when the explorer computed them, else the advantage fn resolved from
    ``algorithm.advantage_fn`` on ``rewards`` / ``mask`` ``(B, T)``, the critic's
    ``values``, the policy's ``entropy`` and ``old_log_prob`` from the same forward pass
    (for a fn that declares ``needs_entropy``) and its ``expected_entropy_signal`` (for one
    that declares ``needs_expected_entropy_signal``), each ``(B, T)``.
    ``response_mask`` is ``mask`` unless the fn drops tokens from the update (every trainer
    backend calls this one rule)."""
    selected = plan.loss.advantage
    if batch.advantages is not None or plan.preset.advantage_in_explorer or selected is None:
        if batch.advantages is None:
            raise RftError("algorithm.advantage_fn: the experiences carry no advantages and "
                           f"{plan.algorithm.algorithm_type!r} computes none in the trainer")
        returns = batch.returns if batch.returns is not None else batch.advantages
        return batch.advantages, returns, mask
    baselines = [e.info.get("reward_baseline") for e in batch.experiences]
    inputs = AdvantageInputs(
        token_level_rewards=rewards, response_mask=mask, index=batch.group_ids,
        values=values, rollout_log_prob=batch.rollout_log_prob,
        teacher_log_prob=batch.teacher_log_prob, entropy=entropy, old_log_prob=old_log_prob,
        expected_entropy_signal=expected_entropy_signal,
        reward_baselines=(torch.tensor(baselines, dtype=torch.float32)
                          if all(b is not None for b in baselines) else None))
    return advantages_and_mask(selected, inputs)


def compute_advantages(selected: Selected, inputs: AdvantageInputs
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` of :func:`advantages_and_mask`."""
    advantages, returns, _ = advantages_and_mask(selected, inputs)
    return advantages, returns


def advantages_and_mask(selected: Selected, inputs: AdvantageInputs
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``selected``'s advantage fn on ``inputs``, its results checked.

    :return: ``(advantages, returns, response_mask)`` ``(B, T)`` (the shape of
        ``inputs.token_level_rewards``), detached; the first two float32, the mask the
        fn's (a fn returning two tensors keeps ``inputs.response_mask``). A missing
        optional input (``values`` without a critic, …), a failure on the batch, or a mask
        keeping a token the input mask drops is a one-line :class:`RftError` naming the
        config key.
    """
    shape = tuple(inputs.token_level_rewards.shape)
    try:
        result = selected.implementation(inputs, args_of(selected))
    except MissingInputError as exc:
        raise MissingInputError(f"{selected.key}: {selected.name!r}", exc.field) from exc
    except ValueError as exc:  # e.g. whitening over fewer than two tokens
        raise RftError(f"{selected.key}: {selected.name!r} failed on this batch: {exc}") from exc
    if not (isinstance(result, tuple) and len(result) in (2, 3)):
        raise RftError(f"{selected.key}: {selected.name!r} must return (advantages, returns) "
                       f"or (advantages, returns, response_mask), got {type(result).__name__}")
    labels = ("advantages", "returns", "response_mask")[:len(result)]
    for label, tensor in zip(labels, result, strict=True):
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(shape):
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise RftError(f"{selected.key}: {selected.name!r} returned {label} of shape {got}, "
                           f"expected {tuple(shape)}")
        if not torch.isfinite(tensor).all():
            raise RftError(f"{selected.key}: {selected.name!r} returned non-finite {label}")
    mask = inputs.response_mask
    if len(result) == 3:
        kept = result[2].detach().to(mask.dtype)  # (B, T)
        if bool(((kept != 0) & (mask == 0)).any()):
            raise RftError(f"{selected.key}: {selected.name!r} returned a response_mask that "
                           "keeps tokens the input mask drops")
        mask = kept
    return result[0].detach().float(), result[1].detach().float(), mask


def apply_kl_penalty(token_level_scores: torch.Tensor, old_log_prob: torch.Tensor,
                     ref_log_prob: torch.Tensor, response_mask: torch.Tensor,
                     selected: Selected) -> tuple[torch.Tensor, dict[str, float]]:
    """KL penalty in the reward (veRL ``apply_kl_penalty``, fixed controller).

    ``kl = fn(KLInputs(old_log_prob, ref_log_prob), args) · response_mask`` ``(B, T)``;
    ``token_level_rewards = token_level_scores − β · kl`` with ``β = kl_coef``.

    :return: the rewards ``(B, T)`` and ``actor/reward_kl_penalty`` (batch mean of each
        sequence's masked-mean KL) and ``actor/reward_kl_penalty_coeff`` (``β``).
    """
    beta = kl_coef_of(selected)
    with torch.no_grad():
        kl = selected.implementation(KLInputs(old_log_prob, ref_log_prob),
                                     args_of(selected)) * response_mask  # (B, T)
        rewards = token_level_scores - beta * kl  # (B, T)
        current_kl = masked_mean(kl, response_mask, dim=-1).mean().item()
    return rewards, {"actor/reward_kl_penalty": current_kl,
                     "actor/reward_kl_penalty_coeff": beta}


# --------------------------------------------------------------------------------------
# The actor loss of one micro-batch
# --------------------------------------------------------------------------------------


@dataclass
class LossInputs:
    """Tensors of one micro-batch, ``(B, T)`` unless said otherwise (names as in
    :mod:`rft.contracts`)."""

    log_prob: torch.Tensor
    """Log-probs of the response tokens under the current policy (with gradient)."""
    response_mask: torch.Tensor
    """Response mask (1: the token counts)."""
    old_log_prob: torch.Tensor | None = None
    """Log-probs before the update; ``None``: ``log_prob.detach()`` (SFT)."""
    advantages: torch.Tensor | None = None
    """Advantages; ``None``: zeros (SFT)."""
    entropy: torch.Tensor | None = None
    """Per-token entropies (with gradient when an entropy loss is used)."""
    ref_log_prob: torch.Tensor | None = None
    """Log-probs under the reference model."""
    is_expert_mask: torch.Tensor | None = None
    """(B,) bool: rows that are expert (SFT) data in a mixed batch (``mix``)."""
    rollout_is_weights: torch.Tensor | None = None
    """Off-policy importance weights (``algorithm.rollout_correction.rollout_is``,
    detached): the per-token policy loss is multiplied by them before aggregation."""
    teacher_log_prob: torch.Tensor | None = None
    """Log-probs under a teacher model (``Experience.teacher_logprobs``)."""
    global_step: int | None = None
    """The training step being taken, from 1 (``PolicyLossInputs.global_step``)."""
    rollout_version: torch.Tensor | None = None
    """(B, T) int64 weights version that produced each response token
    (``Batch.rollout_version``)."""


@dataclass
class LossOutput:
    """The micro-batch loss and its metrics."""

    loss: torch.Tensor
    """Scalar to call ``backward()`` on."""
    summed: dict[str, float] = field(default_factory=dict)
    """Metrics normalised by mini-batch counts: summed over micro-batches they give the
    mini-batch value (``actor/pg_loss``, ``actor/kl_loss``, ``actor/entropy``)."""
    averaged: dict[str, float] = field(default_factory=dict)
    """Metrics averaged over micro-batches (policy loss fn metrics, ``actor/kl_coef``)."""


def _metric_name(name: str) -> str:
    return name if "/" in name else f"actor/{name}"


def policy_loss_term(fns: LossPlan, inputs: LossInputs, agg: AggContext
                     ) -> tuple[torch.Tensor, dict[str, float]]:
    """Aggregated policy loss of one micro-batch and the policy fn's metrics."""
    selected = fns.policy_loss
    log_prob = inputs.log_prob
    old_log_prob = inputs.old_log_prob if inputs.old_log_prob is not None else log_prob.detach()
    advantages = (inputs.advantages if inputs.advantages is not None
                  else torch.zeros_like(log_prob).detach())
    if fns.policy_needs_ref and inputs.ref_log_prob is None:
        raise RftError(f"{selected.key}: {selected.name!r} needs ref_log_prob but no "
                       "reference log-probs were computed")
    try:
        result = selected.implementation(
            PolicyLossInputs(log_prob, old_log_prob, advantages, inputs.response_mask, agg,
                             inputs.ref_log_prob, inputs.is_expert_mask,
                             teacher_log_prob=inputs.teacher_log_prob,
                             global_step=inputs.global_step,
                             rollout_version=inputs.rollout_version),
            args_of(selected))
    except MissingInputError as exc:
        raise MissingInputError(f"{selected.key}: {selected.name!r}", exc.field) from exc
    pg_loss, metrics = result if isinstance(result, tuple) else (result, {})
    if not isinstance(pg_loss, torch.Tensor):
        raise RftError(f"{selected.key}: {selected.name!r} must return a tensor loss, got "
                       f"{type(pg_loss).__name__}")
    if pg_loss.dim() != 0:
        if pg_loss.shape != inputs.response_mask.shape:
            raise RftError(f"{selected.key}: {selected.name!r} returned a loss of shape "
                           f"{tuple(pg_loss.shape)}, expected per-token "
                           f"{tuple(inputs.response_mask.shape)} or a scalar")
        if inputs.rollout_is_weights is not None:  # veRL: pg_losses * rollout_is_weights
            pg_loss = pg_loss * inputs.rollout_is_weights
        pg_loss = agg(pg_loss, inputs.response_mask)
    elif inputs.rollout_is_weights is not None:
        raise RftError(f"algorithm.rollout_correction.rollout_is: {selected.name!r} "
                       f"({selected.key}) returns an aggregated loss; importance weights "
                       "need a per-token policy loss")
    values = {_metric_name(k): float(v.detach().item() if isinstance(v, torch.Tensor) else v)
              for k, v in (metrics or {}).items()}
    return pg_loss, values


def actor_loss(fns: LossPlan, inputs: LossInputs, agg: AggContext) -> LossOutput:
    """``loss = agg(pg_loss) − entropy_term + kl_coef · agg(kl)`` of one micro-batch.

    ``agg`` carries the mini-batch counts (see :class:`AggContext`).
    """
    mask = inputs.response_mask
    pg_loss, averaged = policy_loss_term(fns, inputs, agg)
    summed = {"actor/pg_loss": pg_loss.detach().item()}
    loss = pg_loss

    if inputs.entropy is not None:
        with torch.no_grad():
            summed["actor/entropy_loss"] = agg(inputs.entropy.detach(), mask).item()
    if fns.entropy is not None and fns.uses_entropy_loss:
        if inputs.entropy is None:
            raise RftError(f"{fns.entropy.key}: {fns.entropy.name!r} needs per-token "
                           "entropies but none were computed")
        term = fns.entropy.implementation(
            EntropyInputs(inputs.entropy, mask, agg, inputs.is_expert_mask),
            args_of(fns.entropy))
        loss = loss - term

    if fns.kl_loss is not None and fns.uses_kl_loss:
        if inputs.ref_log_prob is None:
            raise RftError(f"{fns.kl_loss.key}: KL loss {fns.kl_loss.name!r} needs reference "
                           "log-probs but no reference model ran")
        kl = fns.kl_loss.implementation(KLInputs(inputs.log_prob, inputs.ref_log_prob),
                                        args_of(fns.kl_loss))  # (B, T)
        kl_loss = agg(kl, mask)
        coef = kl_coef_of(fns.kl_loss)
        loss = loss + kl_loss * coef
        summed["actor/kl_loss"] = kl_loss.detach().item()
        averaged["actor/kl_coef"] = coef
    return LossOutput(loss, summed, averaged)
