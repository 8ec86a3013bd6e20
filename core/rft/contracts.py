"""Calling contracts of the loss path: what an advantage, policy-loss, KL or entropy
function receives and returns.

Every such function is called as ``fn(inputs, args)``:

- ``inputs`` is a frozen dataclass of tensors, one type per kind
  (:class:`AdvantageInputs`, :class:`PolicyLossInputs`, :class:`KLInputs`,
  :class:`EntropyInputs`);
- ``args`` is the built instance of the implementation's ``Args`` dataclass (config
  validation always builds it from the YAML ``*_args``, its defaults filling the gaps), or
  ``None`` for a function without ``Args``. Defaults live only in the ``Args`` dataclass.

The trainer never reads a function's signature; what a function needs beyond its inputs
it declares with attributes: ``fn.Args`` (its arguments) and, for a policy loss,
``fn.needs_ref_log_prob = True`` (the trainer then runs the reference model; read through
:func:`needs_ref_log_prob`).

Shape letters (used in every ``(…)`` shape comment of the project)
------------------------------------------------------------------
``B``
    rows (sequences) of a batch: one experience per row.
``T``
    response positions: tensors of the loss path are right-padded to the longest response
    of the batch; position ``t`` scores response token ``t``.
``L``
    full-sequence positions, prompt + response (model inputs: ``input_ids``,
    ``attention_mask``).
``V``
    vocabulary (logits).

Names
-----
One name per quantity, veRL's, from the batch to the plugin: ``log_prob`` (current policy),
``old_log_prob`` (before the update), ``ref_log_prob`` (reference model),
``rollout_log_prob`` (the inference engine's, at sampling time), ``response_mask``,
``token_level_rewards``, ``advantages``, ``returns``, ``values``, ``entropy``,
``expected_entropy_signal`` (Trinity-RFT's ``necs``).
The user-facing :class:`rft.experience.Experience` keeps Trinity-RFT's names; the
mappings are ``Experience.logprobs → rollout_log_prob``,
``Experience.teacher_logprobs → teacher_log_prob`` and
``Experience.action_mask → response_mask``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rft.errors import RftError

if TYPE_CHECKING:  # torch is imported by the modules that compute, not by `import rft`
    from torch import Tensor

    from rft.group_ops import GroupIndex

__all__ = [
    "AdvantageFn", "AdvantageInputs", "AggContext", "EntropyInputs", "EntropyLossFn",
    "KLFn", "KLInputs", "MissingInputError", "PolicyLossFn", "PolicyLossInputs",
    "needs_entropy",
    "needs_expected_entropy_signal",
    "needs_ref_log_prob",
    "needs_values",
]

ArgsT = TypeVar("ArgsT", contravariant=True)
"""The implementation's ``Args`` dataclass (``None`` for a function without one)."""


# --------------------------------------------------------------------------------------
# Aggregation: per-token losses → one scalar, with mini-batch-wide counts
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AggContext:
    """How per-token losses of one micro-batch are reduced, with mini-batch-wide counts.

    Calling it, ``agg(loss_mat, mask)``, is :func:`rft.ops.agg_loss` with these settings.
    Using the counts of the whole mini-batch (not of the micro-batch) makes the
    micro-batch losses add up to the mini-batch loss, and their gradients accumulate to
    its gradient (veRL's ``global_batch_info``).
    """

    mode: str = "token-mean"
    """``algorithm.loss_agg_mode``: ``token-mean``, ``token-sum``, ``seq-mean-token-sum``,
    ``seq-mean-token-mean`` or ``seq-mean-token-sum-norm`` (formulas:
    :func:`rft.ops.agg_loss`)."""
    batch_num_tokens: float | None = None
    """``Σ response_mask`` over the whole mini-batch; ``None``: the mask's own sum."""
    global_batch_size: float | None = None
    """Sequences of the whole mini-batch (veRL passes ``ppo_mini_batch_size``, empty
    responses included); ``None``: the mask's rows with at least one token."""
    loss_scale_factor: float | None = None
    """The constant divisor of ``seq-mean-token-sum-norm`` (``None``: the mask's width)."""
    dp_size: int = 1
    """Data-parallel ranks the counts are spread over (the loss is multiplied by it, as
    veRL does, so that averaging gradients over ranks gives the global loss's)."""

    @classmethod
    def for_mini_batch(cls, response_mask: Tensor, mode: str,
                       loss_scale_factor: float | None = None) -> AggContext:
        """Counts of a mini-batch whose response mask is ``response_mask`` ``(B, T)``."""
        return cls(mode, float(response_mask.sum().item()), float(response_mask.shape[0]),
                   loss_scale_factor)

    def kwargs(self) -> dict[str, Any]:
        """Keywords of :func:`rft.ops.agg_loss` besides ``mode``."""
        return {"dp_size": self.dp_size, "batch_num_tokens": self.batch_num_tokens,
                "global_batch_size": self.global_batch_size,
                "loss_scale_factor": self.loss_scale_factor}

    def __call__(self, loss_mat: Tensor, mask: Tensor) -> Tensor:
        """``agg_loss(loss_mat, mask, mode, **kwargs())``: ``(B, T)`` → 0-dim."""
        from rft.ops import agg_loss

        return agg_loss(loss_mat, mask, self.mode, **self.kwargs())


# --------------------------------------------------------------------------------------
# Advantage functions (algorithm.advantage_fn)
# --------------------------------------------------------------------------------------

PROVIDED_BY: dict[str, str] = {
    "values": "values need a critic: an algorithm whose preset sets use_critic",
    "reward_baselines": "reward_baselines come from Experience.info['reward_baseline'], "
                        "e.g. an algorithm whose preset sets reward_baseline='greedy'",
    "teacher_log_prob": "teacher_log_prob comes from Experience.teacher_logprobs, which a "
                        "workflow sets by scoring each response with a teacher model, e.g. "
                        "on_policy_distill_workflow with an auxiliary model as teacher",
    "rollout_log_prob": "rollout_log_prob comes from Experience.logprobs, the engine's "
                        "sampling log-probs",
    "global_step": "global_step is set by the trainer",
    "entropy": "entropy comes from the trainer's forward pass before the update, for an "
               "advantage fn that declares needs_entropy = True (the torch and verl trainers "
               "compute it)",
    "old_log_prob": "old_log_prob comes from the trainer's forward pass before the update "
                    "that computes entropy, for an advantage fn that declares needs_entropy "
                    "= True (the torch and verl trainers compute it)",
    "expected_entropy_signal": "expected_entropy_signal comes from the trainer's forward pass "
                               "before the update, for an advantage fn that declares "
                               "needs_expected_entropy_signal = True (the torch and verl "
                               "trainers compute it)",
}
"""What provides each optional input of :class:`AdvantageInputs` (for error messages)."""


class MissingInputError(RftError):
    """An implementation asked for an optional input that this run does not provide."""

    def __init__(self, who: str, field: str) -> None:
        self.who = who
        self.field = field
        source = PROVIDED_BY.get(field, f"{field} is not provided by this run")
        super().__init__(f"{who} needs {field}, which this run does not provide ({source})")


@dataclass(frozen=True)
class AdvantageInputs:
    """What an advantage function receives: the batch after the KL penalty.

    Not computed when the preset computes advantages in the explorer, when the algorithm
    has no advantage function, or when every experience already carries advantages.
    """

    token_level_rewards: Tensor
    """``(B, T)`` rewards per response token (a scalar reward sits on the last response
    token), minus ``kl_coef · kl`` when a KL penalty is selected."""
    response_mask: Tensor
    """``(B, T)`` float, 1 on response tokens that count (padding and masked-out
    observation tokens are 0)."""
    index: GroupIndex
    """``B`` group ids (list of strings, array or tensor): rollouts of one task in one
    step share one."""
    values: Tensor | None = None
    """``(B, T)`` critic values (masked); only with a critic (preset ``use_critic``)."""
    reward_baselines: Tensor | None = None
    """``(B,)`` a baseline reward per row, from ``Experience.info["reward_baseline"]``
    (e.g. ReMax's greedy reward); ``None`` unless every experience carries one."""
    rollout_log_prob: Tensor | None = None
    """``(B, T)`` the engine's log-probs of the response tokens at sampling time
    (``Experience.logprobs``); ``None`` unless every experience carries them."""
    teacher_log_prob: Tensor | None = None
    """``(B, T)`` a teacher model's log-probs of the response tokens
    (``Experience.teacher_logprobs``, set by a distillation workflow); ``None`` unless every
    experience carries them."""
    entropy: Tensor | None = None
    """``(B, T)`` per-token entropies of the current policy before the update (no
    gradient); computed only for a function declaring ``fn.needs_entropy = True``
    (:func:`needs_entropy`)."""
    old_log_prob: Tensor | None = None
    """``(B, T)`` the policy's log-probs of the response tokens before the update (no
    gradient), from the trainer's forward pass that gives ``entropy`` and only with it
    (unlike ``rollout_log_prob``, the engine's, these are the trainer's)."""
    expected_entropy_signal: Tensor | None = None
    """``(B, T)`` per response token, with ``p = softmax(logits / temperature)`` of the
    current policy before the update and ``H`` its entropy::

        N = H · Σ_v p_v² + Σ_v p_v² log p_v  =  E_{v~p}[p_v (H + log p_v)]

    the expected first-order entropy change over the vocabulary (Trinity-RFT's ``necs``,
    :func:`rft.ops.expected_entropy_signal_from_logits`, float32, no gradient); computed
    only for a function declaring ``fn.needs_expected_entropy_signal = True``
    (:func:`needs_expected_entropy_signal`)."""

    def require(self, field: str, who: str) -> Tensor:
        """The input ``field``, or a one-line :class:`MissingInputError` naming ``who``
        (the function asking) and what provides the input."""
        value = getattr(self, field)
        if value is None:
            raise MissingInputError(who, field)
        return value


class AdvantageFn(Protocol[ArgsT]):
    """``fn(inputs, args) -> (advantages, returns)``, both ``(B, T)``, without gradient;
    or ``(advantages, returns, response_mask)``: a function that drops tokens from the
    update returns the ``(B, T)`` mask of the tokens that still count (0 where the input
    mask is 0), and the trainer's losses and their counts use it from then on.

    A function that needs an optional input (``values``, ``reward_baselines``,
    ``rollout_log_prob``, ``teacher_log_prob``, ``entropy``, ``old_log_prob``,
    ``expected_entropy_signal``) takes it with ``inputs.require("values", "<its name>")``;
    ``entropy`` and ``old_log_prob`` are computed only for a function declaring
    ``fn.needs_entropy = True``, ``expected_entropy_signal`` only for one declaring
    ``fn.needs_expected_entropy_signal = True``.
    """

    def __call__(self, inputs: AdvantageInputs, args: ArgsT
                 ) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]: ...


def needs_entropy(fn: Any) -> bool:
    """Whether the advantage fn ``fn`` declares ``fn.needs_entropy = True`` (it reads
    ``inputs.entropy``, so the trainer computes the policy's entropies before the update)."""
    return getattr(fn, "needs_entropy", False) is True


def needs_expected_entropy_signal(fn: Any) -> bool:
    """Whether the advantage fn ``fn`` declares ``fn.needs_expected_entropy_signal = True``
    (it reads ``inputs.expected_entropy_signal``, so the trainer computes it from the
    policy's full-vocabulary logits before the update)."""
    return getattr(fn, "needs_expected_entropy_signal", False) is True


# --------------------------------------------------------------------------------------
# Policy losses (algorithm.policy_loss_fn)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss receives: one micro-batch.

    For ``sft`` batches ``old_log_prob`` is ``log_prob.detach()`` and ``advantages`` are
    zeros. In a ``dpo`` batch rows ``2k`` / ``2k + 1`` are the chosen / rejected response of
    pair ``k``, and a micro-batch never splits a pair.
    """

    log_prob: Tensor
    """``(B, T)`` log-probs of the response tokens under the current policy (with
    gradient: the loss is differentiated through it)."""
    old_log_prob: Tensor
    """``(B, T)`` log-probs before the update (no gradient)."""
    advantages: Tensor
    """``(B, T)`` advantages (no gradient)."""
    response_mask: Tensor
    """``(B, T)`` float, 1 on response tokens that count."""
    agg: AggContext
    """The trainer's aggregation (``loss_agg_mode`` and the mini-batch's global counts):
    a loss that aggregates itself must use it so that micro-batches add up."""
    ref_log_prob: Tensor | None = None
    """``(B, T)`` log-probs under the reference model; computed when a KL term is active
    (selected with a non-zero ``kl_coef``) or the loss declares ``needs_ref_log_prob``,
    else ``None`` (and no reference model is held)."""
    is_expert_mask: Tensor | None = None
    """``(B,)`` bool: rows that are expert (SFT) data in a mixed batch (``mix``), from
    ``Experience.info["is_expert"]``; ``None`` when no experience says."""
    teacher_log_prob: Tensor | None = None
    """``(B, T)`` log-probs of the response tokens under a teacher model, from
    ``Experience.teacher_logprobs`` (a workflow scores the responses with an auxiliary
    model, e.g. on-policy distillation); ``None`` unless every experience carries them."""
    global_step: int | None = None
    """The training step being taken, counted from 1 (the trainer's ``global_steps + 1``;
    Trinity-RFT's ``step``), for losses whose weights follow a schedule (CHORD's ``μ``);
    ``None`` outside a trainer."""
    rollout_version: Tensor | None = None
    """``(B, T)`` int64 weights version that produced each response token
    (``Experience.token_versions``, else the row's ``model_version``; ``-1`` on padding):
    a partial rollout's tokens before a weight sync carry the old version, those after it
    the new one. A loss correcting stale tokens reads it; ``None`` outside a trainer."""

    def require(self, field: str, who: str) -> Any:
        """The optional input ``field``, or a one-line :class:`MissingInputError` naming
        ``who`` (the function asking) and what provides the input."""
        value = getattr(self, field)
        if value is None:
            raise MissingInputError(who, field)
        return value


class PolicyLossFn(Protocol[ArgsT]):
    """``fn(inputs, args) -> (pg_loss, metrics)``.

    ``pg_loss`` is either per token ``(B, T)`` (the trainer aggregates it with
    ``inputs.agg``) or 0-dim, already aggregated over the micro-batch (it must then use
    ``inputs.agg``'s global counts, e.g. ``inputs.agg.global_batch_size``). ``metrics``
    maps names to scalars (0-dim tensors or floats), reported as ``actor/<name>`` (a name
    with a ``/`` is kept as is) and averaged over micro-batches.
    """

    def __call__(self, inputs: PolicyLossInputs, args: ArgsT
                 ) -> tuple[Tensor, dict[str, Tensor | float]]: ...


def needs_values(fn: Any) -> bool:
    """Whether the advantage fn ``fn`` declares ``fn.needs_values = True`` (it reads
    ``inputs.values``, so only an algorithm with a critic can use it; validation says so
    in one line instead of the first train step)."""
    return getattr(fn, "needs_values", False) is True


def needs_ref_log_prob(fn: Any) -> bool:
    """Whether the policy loss ``fn`` declares ``fn.needs_ref_log_prob = True`` (it reads
    ``inputs.ref_log_prob``, so the trainer must run the reference model)."""
    return getattr(fn, "needs_ref_log_prob", False) is True


# --------------------------------------------------------------------------------------
# KL estimators (algorithm.kl_loss_fn, algorithm.kl_penalty_fn)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KLInputs:
    """What a KL estimator receives.

    As a loss (``kl_loss_fn``) ``log_prob`` is the current policy's, with gradient; as a
    reward penalty (``kl_penalty_fn``) it is ``old_log_prob``, without.
    """

    log_prob: Tensor
    """``(B, T)`` log-probs of the policy."""
    ref_log_prob: Tensor
    """``(B, T)`` log-probs of the reference model."""


class KLFn(Protocol[ArgsT]):
    """``fn(inputs, args) -> kl`` per token ``(B, T)``, an estimate of
    ``KL(π ‖ π_ref)``. The coefficient (``args.kl_coef``) is applied by the trainer."""

    def __call__(self, inputs: KLInputs, args: ArgsT) -> Tensor: ...


# --------------------------------------------------------------------------------------
# Entropy losses (algorithm.entropy_loss_fn)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntropyInputs:
    """What an entropy loss receives: one micro-batch."""

    entropy: Tensor
    """``(B, T)`` per-token entropies of the current policy
    (:func:`rft.ops.entropy_from_logits`), with gradient when the term is used."""
    response_mask: Tensor
    """``(B, T)`` float, 1 on response tokens that count."""
    agg: AggContext
    """The trainer's aggregation (``loss_agg_mode`` and the mini-batch's global counts)."""
    is_expert_mask: Tensor | None = None
    """``(B,)`` bool: rows that are expert (SFT) data in a mixed batch (``mix``), as
    :attr:`PolicyLossInputs.is_expert_mask`; ``None`` when no experience says."""


class EntropyLossFn(Protocol[ArgsT]):
    """``fn(inputs, args) -> term``, 0-dim, subtracted from the loss
    (``loss = agg(pg_loss) − term + kl_coef · agg(kl)``)."""

    def __call__(self, inputs: EntropyInputs, args: ArgsT) -> Tensor: ...
