"""Assembling the actor loss from the functions the config selected (veRL's actor loss).

Validation resolves every ``algorithm.*_fn`` name once into a
:class:`~rft.config.validate.Selected` (implementation + ``Args`` instance); this module
calls them. The total loss of one micro-batch is veRL 0.9.1's
(``verl/workers/utils/losses.py::ppo_loss``)::

    loss = agg(pg_loss) − entropy_term + kl_coef · agg(kl)

where ``agg = agg_loss(·, mask, loss_agg_mode, batch_num_tokens=N_tok,
global_batch_size=N_seq, loss_scale_factor=F)`` with ``N_tok`` / ``N_seq`` the token and
sequence counts of the whole **mini-batch** (see :class:`AggContext`), so the losses of
its micro-batches add up to the mini-batch loss and their gradients accumulate to its
gradient.

Calling conventions (what a plugin function receives)
-----------------------------------------------------
``a`` is ``dataclasses.asdict(selected.args)`` (empty when the function has no ``Args``).

advantage fn (``algorithm.advantage_fn``)
    ``fn(**inputs, **a) -> (advantages, returns)``, both ``(B, R)``. ``inputs`` holds those
    of the following that the function's signature names: ``token_level_rewards`` (B, R),
    ``response_mask`` (B, R) float, ``index`` (list of B group ids: rollouts of one task in
    one step share one), ``values`` (B, R) (critic values, with a critic only),
    ``reward_baselines`` (B,) (``Experience.info["reward_baseline"]``, e.g. ReMax's greedy
    reward). A required parameter that the batch cannot provide is an error. Not called
    when the preset computes advantages in the explorer, when there is no advantage fn, or
    when every experience already carries advantages.

policy loss fn (``algorithm.policy_loss_fn``)
    ``fn(per_token_logps, old_per_token_logps, advantages, mask, **a, **extra)
    -> (pg_loss, metrics)`` with ``pg_loss`` per token ``(B, R)`` (the trainer aggregates
    it) and ``metrics`` a dict of scalar tensors (reported as ``actor/<name>``).
    ``extra`` holds those of ``ref_per_token_logps`` (B, R), ``is_expert_mask`` (B,) bool
    (rows carrying ``info["is_expert"]``, for ``mix``), ``loss_agg_mode``, ``batch_num_tokens``, ``global_batch_size``, ``loss_scale_factor``, ``dp_size`` that
    the signature *names explicitly*. A function may return a 0-dim ``pg_loss``: it is then
    taken as already aggregated over the micro-batch (and must use the global counts it
    was given so micro-batches add up). This is the hook for sequence-level losses such as
    DPO: declare ``ref_per_token_logps`` (the trainer then keeps a reference model) and
    ``global_batch_size``; rows ``2k`` / ``2k+1`` of a ``dpo`` batch are the chosen /
    rejected responses of pair ``k`` and a micro-batch never splits a pair.
    For ``sft`` batches ``old_per_token_logps`` is ``per_token_logps.detach()`` and
    ``advantages`` are zeros: an SFT loss uses ``per_token_logps`` and ``mask``.

KL fn (``algorithm.kl_loss_fn`` / ``algorithm.kl_penalty_fn``)
    ``fn(per_token_logps, ref_per_token_logps) -> kl`` per token ``(B, R)``; ``kl_coef``
    is the ``kl_coef`` field of its ``Args`` (``KLArgs``). As a loss (veRL
    ``use_kl_loss``): ``+ kl_coef · agg(kl)``. As a reward penalty (veRL
    ``use_kl_in_reward`` with a fixed controller), before advantages:
    ``token_level_rewards = token_level_scores − kl_coef · kl(old_logps, ref_logps) · mask``.
    The name ``none`` disables either.

entropy fn (``algorithm.entropy_loss_fn``)
    ``fn(entropy, mask, loss_agg_mode=..., batch_num_tokens=..., global_batch_size=...,
    loss_scale_factor=..., dp_size=..., **a) -> term`` (scalar) subtracted from the loss;
    ``entropy`` ``(B, R)`` from :func:`rft.ops.entropy_from_logits`. The aggregation
    keywords are dropped for a function whose signature neither names them nor takes
    ``**kwargs``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rft.config.validate import Selected, Validation
from rft.errors import RftError
from rft.ops import agg_loss, masked_mean

ADVANTAGE_INPUTS: tuple[str, ...] = (
    "token_level_rewards", "response_mask", "index", "values", "reward_baselines")
"""Batch fields an advantage fn may name in its signature."""

POLICY_LOSS_EXTRAS: tuple[str, ...] = (
    "ref_per_token_logps", "is_expert_mask", "loss_agg_mode", "batch_num_tokens",
    "global_batch_size", "loss_scale_factor", "dp_size")
"""Optional keywords a policy loss fn receives when its signature names them."""


# --------------------------------------------------------------------------------------
# Small helpers around Selected
# --------------------------------------------------------------------------------------


def is_off(selected: Selected | None) -> bool:
    """True when a function slot is empty or selects the name ``none``."""
    return selected is None or selected.name == "none"


def args_dict(selected: Selected | None) -> dict[str, Any]:
    """``dataclasses.asdict(selected.args)``, or ``{}`` when there are no args."""
    if selected is None or selected.args is None:
        return {}
    if dataclasses.is_dataclass(selected.args):
        return dataclasses.asdict(selected.args)
    return dict(selected.args)


@functools.lru_cache(maxsize=256)
def _signature(fn: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str], bool]:
    """``(all parameter names, required keyword-able names, takes **kwargs)`` of ``fn``."""
    params = inspect.signature(fn).parameters.values()
    names = frozenset(p.name for p in params
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    required = frozenset(p.name for p in params if p.default is p.empty
                         and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    return names, required, var_kw


def signature_of(fn: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str], bool]:
    """Cached :func:`_signature`; functions that cannot be hashed are inspected each time."""
    try:
        return _signature(fn)
    except TypeError:
        return _signature.__wrapped__(fn)


def wants(selected: Selected | None, parameter: str) -> bool:
    """Whether ``selected``'s function names ``parameter`` in its signature."""
    return selected is not None and parameter in signature_of(selected.implementation)[0]


def _optional_kwargs(fn: Callable[..., Any], offered: Mapping[str, Any], *,
                     var_kw_gets_all: bool) -> dict[str, Any]:
    """The ``offered`` keywords that ``fn`` names (all of them if it takes ``**kwargs``
    and ``var_kw_gets_all``)."""
    names, _, var_kw = signature_of(fn)
    if var_kw and var_kw_gets_all:
        return dict(offered)
    return {k: v for k, v in offered.items() if k in names}


def kl_coef_of(selected: Selected | None) -> float:
    """``kl_coef`` of a KL function's args (``0`` for ``none`` or no args)."""
    if is_off(selected):
        return 0.0
    return float(args_dict(selected).get("kl_coef", 0.0))


# --------------------------------------------------------------------------------------
# Aggregation context: global counts of the mini-batch
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AggContext:
    """How per-token losses of one micro-batch are reduced, with mini-batch-wide counts.

    ``batch_num_tokens`` is ``Σ mask`` over the whole mini-batch and ``global_batch_size``
    its number of sequences (veRL passes ``ppo_mini_batch_size``, empty responses
    included); ``loss_scale_factor`` is the constant of ``seq-mean-token-sum-norm``.
    """

    mode: str = "token-mean"
    batch_num_tokens: float | None = None
    global_batch_size: float | None = None
    loss_scale_factor: float | None = None
    dp_size: int = 1

    @classmethod
    def for_mini_batch(cls, mask: torch.Tensor, mode: str,
                       loss_scale_factor: float | None = None) -> AggContext:
        """Counts of a mini-batch whose response mask is ``mask`` ``(B, R)``."""
        return cls(mode, float(mask.sum().item()), float(mask.shape[0]), loss_scale_factor)

    def kwargs(self) -> dict[str, Any]:
        """Keywords of :func:`rft.ops.agg_loss` besides ``mode``."""
        return {"dp_size": self.dp_size, "batch_num_tokens": self.batch_num_tokens,
                "global_batch_size": self.global_batch_size,
                "loss_scale_factor": self.loss_scale_factor}

    def __call__(self, loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``agg_loss(loss_mat, mask, mode, **kwargs)``."""
        return agg_loss(loss_mat, mask, self.mode, **self.kwargs())


# --------------------------------------------------------------------------------------
# The selected functions
# --------------------------------------------------------------------------------------


@dataclass
class LossFns:
    """The functions of the actor loss, as validation selected them."""

    policy_loss: Selected
    kl_loss: Selected | None = None
    kl_penalty: Selected | None = None
    entropy: Selected | None = None
    advantage: Selected | None = None
    loss_agg_mode: str = "token-mean"

    @classmethod
    def from_validation(cls, validation: Validation,
                        loss_agg_mode: str | None = None) -> LossFns:
        """Pick the ``algorithm.*`` entries of ``validation.selected``."""
        selected = validation.selected
        if "algorithm.policy_loss_fn" not in selected:
            raise RftError("algorithm.policy_loss_fn: no policy loss function was selected "
                           "(was the config validated?)")
        return cls(
            policy_loss=selected["algorithm.policy_loss_fn"],
            kl_loss=selected.get("algorithm.kl_loss_fn"),
            kl_penalty=selected.get("algorithm.kl_penalty_fn"),
            entropy=selected.get("algorithm.entropy_loss_fn"),
            advantage=selected.get("algorithm.advantage_fn"),
            loss_agg_mode=loss_agg_mode or "token-mean",
        )

    @property
    def uses_kl_loss(self) -> bool:
        return not is_off(self.kl_loss)

    @property
    def uses_kl_penalty(self) -> bool:
        return not is_off(self.kl_penalty)

    @property
    def uses_entropy_loss(self) -> bool:
        """An entropy term with a non-zero coefficient is selected (it needs gradients)."""
        if is_off(self.entropy):
            return False
        return getattr(self.entropy.args, "entropy_coef", None) != 0

    @property
    def policy_needs_ref(self) -> bool:
        """The policy loss fn names ``ref_per_token_logps`` (DPO-like losses)."""
        return wants(self.policy_loss, "ref_per_token_logps")

    @property
    def needs_ref(self) -> bool:
        """Reference log-probs are needed: KL loss, KL penalty or a policy loss asking."""
        return self.uses_kl_loss or self.uses_kl_penalty or self.policy_needs_ref


# --------------------------------------------------------------------------------------
# Advantages and KL penalty (before the update)
# --------------------------------------------------------------------------------------


def compute_advantages(selected: Selected, available: Mapping[str, Any],
                       shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Call the advantage fn with the ``available`` inputs its signature names.

    :param available: subset of :data:`ADVANTAGE_INPUTS`; a value of ``None`` counts as
        not available.
    :param shape: ``(B, R)`` the results must have.
    """
    fn = selected.implementation
    names, required, _ = signature_of(fn)
    fields = args_dict(selected)
    inputs = {k: v for k, v in available.items() if k in names and v is not None}
    missing = sorted(required - set(inputs) - set(fields))
    if missing:
        raise RftError(f"{selected.key}: {selected.name!r} needs {', '.join(missing)}, which "
                       "this run does not provide (values need a critic: an algorithm whose "
                       "preset sets use_critic; reward_baselines come from "
                       "Experience.info['reward_baseline'])")
    try:
        result = fn(**inputs, **fields)
    except ValueError as exc:  # e.g. whitening over fewer than two tokens
        raise RftError(f"{selected.key}: {selected.name!r} failed on this batch: {exc}") from exc
    if not (isinstance(result, tuple) and len(result) == 2):
        raise RftError(f"{selected.key}: {selected.name!r} must return (advantages, returns), "
                       f"got {type(result).__name__}")
    advantages, returns = result
    for label, tensor in (("advantages", advantages), ("returns", returns)):
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != tuple(shape):
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise RftError(f"{selected.key}: {selected.name!r} returned {label} of shape {got}, "
                           f"expected {tuple(shape)}")
        if not torch.isfinite(tensor).all():
            raise RftError(f"{selected.key}: {selected.name!r} returned non-finite {label}")
    return advantages.detach().float(), returns.detach().float()


def apply_kl_penalty(token_level_scores: torch.Tensor, old_logprobs: torch.Tensor,
                     ref_logprobs: torch.Tensor, mask: torch.Tensor,
                     selected: Selected) -> tuple[torch.Tensor, dict[str, float]]:
    """KL penalty in the reward (veRL ``apply_kl_penalty``, fixed controller).

    ``kl = fn(old_logprobs, ref_logprobs) · mask`` ``(B, R)``;
    ``token_level_rewards = token_level_scores − β · kl`` with ``β = kl_coef``.

    :return: the rewards ``(B, R)`` and ``actor/reward_kl_penalty`` (batch mean of each
        sequence's masked-mean KL) and ``actor/reward_kl_penalty_coeff`` (``β``).
    """
    beta = kl_coef_of(selected)
    with torch.no_grad():
        kl = selected.implementation(old_logprobs, ref_logprobs) * mask  # (B, R)
        rewards = token_level_scores - beta * kl  # (B, R)
        current_kl = masked_mean(kl, mask, dim=-1).mean().item()
    return rewards, {"actor/reward_kl_penalty": current_kl,
                     "actor/reward_kl_penalty_coeff": beta}


# --------------------------------------------------------------------------------------
# The actor loss of one micro-batch
# --------------------------------------------------------------------------------------


@dataclass
class LossInputs:
    """Tensors of one micro-batch, all ``(B, R)``."""

    per_token_logps: torch.Tensor
    """Log-probs of the response tokens under the current policy (with gradient)."""
    mask: torch.Tensor
    """Response mask (1: the token counts)."""
    old_per_token_logps: torch.Tensor | None = None
    """Log-probs before the update; ``None``: ``per_token_logps.detach()`` (SFT)."""
    advantages: torch.Tensor | None = None
    """Advantages; ``None``: zeros (SFT)."""
    entropy: torch.Tensor | None = None
    """Per-token entropies (with gradient when an entropy loss is used)."""
    ref_per_token_logps: torch.Tensor | None = None
    """Log-probs under the reference model."""
    is_expert_mask: torch.Tensor | None = None
    """(B,) bool: rows that are expert (SFT) data in a mixed batch (``mix``)."""


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


def policy_loss_term(fns: LossFns, inputs: LossInputs, agg: AggContext
                     ) -> tuple[torch.Tensor, dict[str, float]]:
    """Aggregated policy loss of one micro-batch and the policy fn's metrics."""
    selected = fns.policy_loss
    logps = inputs.per_token_logps
    old = inputs.old_per_token_logps if inputs.old_per_token_logps is not None else logps.detach()
    advantages = (inputs.advantages if inputs.advantages is not None
                  else torch.zeros_like(logps).detach())
    offered: dict[str, Any] = {"loss_agg_mode": agg.mode, **agg.kwargs()}
    if inputs.ref_per_token_logps is not None:
        offered["ref_per_token_logps"] = inputs.ref_per_token_logps
    if inputs.is_expert_mask is not None:
        offered["is_expert_mask"] = inputs.is_expert_mask
    extra = _optional_kwargs(selected.implementation, offered, var_kw_gets_all=False)
    if fns.policy_needs_ref and "ref_per_token_logps" not in extra:
        raise RftError(f"{selected.key}: {selected.name!r} needs ref_per_token_logps but no "
                       "reference log-probs were computed")
    result = selected.implementation(logps, old, advantages, inputs.mask,
                                     **args_dict(selected), **extra)
    pg_loss, metrics = result if isinstance(result, tuple) else (result, {})
    if not isinstance(pg_loss, torch.Tensor):
        raise RftError(f"{selected.key}: {selected.name!r} must return a tensor loss, got "
                       f"{type(pg_loss).__name__}")
    if pg_loss.dim() != 0:
        if pg_loss.shape != inputs.mask.shape:
            raise RftError(f"{selected.key}: {selected.name!r} returned a loss of shape "
                           f"{tuple(pg_loss.shape)}, expected per-token "
                           f"{tuple(inputs.mask.shape)} or a scalar")
        pg_loss = agg(pg_loss, inputs.mask)
    values = {_metric_name(k): float(v.detach().item() if isinstance(v, torch.Tensor) else v)
              for k, v in (metrics or {}).items()}
    return pg_loss, values


def actor_loss(fns: LossFns, inputs: LossInputs, agg: AggContext) -> LossOutput:
    """``loss = agg(pg_loss) − entropy_term + kl_coef · agg(kl)`` of one micro-batch.

    ``agg`` carries the mini-batch counts (see :class:`AggContext`).
    """
    mask = inputs.mask
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
        fn = fns.entropy.implementation
        offered = {"loss_agg_mode": agg.mode, **agg.kwargs()}
        term = fn(inputs.entropy, mask, **_optional_kwargs(fn, offered, var_kw_gets_all=True),
                  **args_dict(fns.entropy))
        loss = loss - term

    if fns.kl_loss is not None and fns.uses_kl_loss:
        if inputs.ref_per_token_logps is None:
            raise RftError(f"{fns.kl_loss.key}: KL loss {fns.kl_loss.name!r} needs reference "
                           "log-probs but no reference model ran")
        kl = fns.kl_loss.implementation(inputs.per_token_logps,
                                        inputs.ref_per_token_logps)  # (B, R)
        kl_loss = agg(kl, mask)
        coef = kl_coef_of(fns.kl_loss)
        loss = loss + kl_loss * coef
        summed["actor/kl_loss"] = kl_loss.detach().item()
        averaged["actor/kl_coef"] = coef
    return LossOutput(loss, summed, averaged)
