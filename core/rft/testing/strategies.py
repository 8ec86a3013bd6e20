"""Hypothesis strategies for the typed inputs of rft's plugin kinds.

    from hypothesis import given
    from rft.testing.strategies import policy_loss_inputs
    from rft.testing.checks import check_policy_loss

    @given(policy_loss_inputs())
    def test_my_loss_keeps_the_contract(inputs):
        check_policy_loss(my_loss, MyLossArgs(), inputs)

Every strategy draws what a trainer really hands a plugin, and the edge cases it hands
it rarely: ``B`` rows of ``T`` positions in float64, right-padded masks with ragged
lengths, rows with empty responses, masks with holes (multi-turn observation tokens),
groups of every size including singletons, and log-ratios up to ``±20``. Shapes and
masks come from :func:`rft.testing.algorithms.batches` (the same batches rft's own veRL
property tests use); the tensors from the seeded generator of each drawn batch, so an
example reproduces from hypothesis' report.

Needs ``hypothesis`` (``pip install "rft-framework[testing]"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from rft.contracts import AdvantageInputs, AggContext, EntropyInputs, KLInputs, PolicyLossInputs
from rft.ops import LOSS_AGG_MODES
from rft.testing.algorithms import Batch, batches, rewards_for
from rft.workflow import Task

__all__ = ["ADVANTAGE_KINDS", "LOG_RATIO_DRIFTS", "REWARD_KINDS", "advantage_inputs",
           "agg_contexts", "entropy_inputs", "exact_match_reward", "kl_inputs",
           "policy_loss_inputs", "reward_cases", "workflow_tasks"]

LOG_RATIO_DRIFTS: tuple[float, ...] = (0.0, 0.05, 1.0, 20.0)
"""Standard deviations of ``log_prob − old_log_prob``: on-policy (exactly 0), near,
off-policy, extreme (clamped to ``±max_log_ratio``)."""
ADVANTAGE_KINDS: tuple[str, ...] = ("token", "sequence", "zero")
"""Advantages ``(B, T)``: random per token, one value per row on its response tokens
(outcome estimators), or all zero."""
REWARD_KINDS: tuple[str, ...] = ("outcome", "binary", "continuous", "constant")
"""Token-level rewards (see :func:`rft.testing.algorithms.rewards_for`)."""


def _group_index(draw: st.DrawFn, batch: Batch) -> Any:
    """``batch.groups`` as one of the accepted :data:`rft.group_ops.GroupIndex` forms:
    an object array of strings (veRL's uids), a list of strings, an integer tensor."""
    form = draw(st.sampled_from(["array", "list", "tensor"]))
    if form == "array":
        return batch.groups
    if form == "list":
        return [str(label) for label in batch.groups]
    labels = sorted(set(batch.groups))
    return torch.tensor([labels.index(label) * 3 + 1 for label in batch.groups])


@st.composite
def agg_contexts(draw: st.DrawFn, response_mask: torch.Tensor,
                 modes: Sequence[str] = LOSS_AGG_MODES) -> AggContext:
    """The trainer's :class:`~rft.contracts.AggContext` for a micro-batch whose mask is
    ``response_mask`` ``(B, T)``: every ``loss_agg_mode``, with the micro-batch's own
    counts (``None``) or those of a larger mini-batch it belongs to (more rows and
    tokens), with or without a ``loss_scale_factor``."""
    mode = draw(st.sampled_from(list(modes)))
    scale_factor = draw(st.sampled_from([None, 7.0]))
    if draw(st.booleans()):
        return AggContext(mode, loss_scale_factor=scale_factor)
    rows, width = response_mask.shape
    extra_rows = draw(st.integers(0, 4))
    extra_tokens = draw(st.integers(0, extra_rows * width))
    return AggContext(mode, float(response_mask.sum().item()) + extra_tokens,
                      float(rows + extra_rows), scale_factor)


def _advantages(draw: st.DrawFn, batch: Batch, kinds: Sequence[str]) -> torch.Tensor:
    kind = draw(st.sampled_from(list(kinds)))
    scale = draw(st.sampled_from([1.0, 5.0]))
    if kind == "zero":
        return torch.zeros(batch.B, batch.T, dtype=torch.float64)
    if kind == "sequence":
        return batch.randn(batch.B, scale=scale).unsqueeze(-1) * batch.mask  # (B, T)
    return batch.randn(scale=scale)  # (B, T)


@st.composite
def policy_loss_inputs(draw: st.DrawFn, *, max_b: int = 12, max_t: int = 16,
                       modes: Sequence[str] = LOSS_AGG_MODES, max_log_ratio: float = 20.0,
                       advantage_kinds: Sequence[str] = ADVANTAGE_KINDS, pairs: bool = False,
                       ref_log_prob: bool | None = None, expert_rows: bool = False
                       ) -> PolicyLossInputs:
    """A micro-batch for a policy loss (:class:`~rft.contracts.PolicyLossInputs`).

    ``log_prob`` ``(B, T)`` is a fresh leaf that requires grad; ``old_log_prob`` and
    ``ref_log_prob`` differ from it by log-ratios with standard deviation drawn from
    :data:`LOG_RATIO_DRIFTS`, ``|log ratio| ≤ max_log_ratio``; every log-prob is ``≤ 0``.
    Masked-out positions hold values like any other (a loss must not let them count).

    :param modes: the ``loss_agg_mode`` values ``agg`` is drawn from.
    :param advantage_kinds: see :data:`ADVANTAGE_KINDS`.
    :param pairs: an even ``B`` (DPO's (chosen, rejected) rows).
    :param ref_log_prob: ``True`` always, ``False`` never, ``None`` sometimes (a loss that
        declares ``needs_ref_log_prob`` always gets it; others must cope with both).
    :param expert_rows: sometimes set ``is_expert_mask`` ``(B,)`` (``mix``); else ``None``.
    """
    batch = draw(batches(max_b=max_b, max_t=max_t, even_b=pairs))
    old_log_prob = batch.logps(draw(st.sampled_from([0.1, 1.0, 10.0])))  # (B, T)
    log_prob = batch.drifted(old_log_prob, draw(st.sampled_from(LOG_RATIO_DRIFTS)),
                             max_log_ratio).requires_grad_()  # (B, T)
    advantages = _advantages(draw, batch, advantage_kinds)  # (B, T)
    with_ref = draw(st.booleans()) if ref_log_prob is None else ref_log_prob
    ref = (batch.drifted(log_prob.detach(), draw(st.sampled_from(LOG_RATIO_DRIFTS)),
                         max_log_ratio) if with_ref else None)  # (B, T)
    expert = None
    if expert_rows and draw(st.booleans()):
        expert = torch.rand(batch.B, generator=batch.gen) < draw(st.sampled_from([0.0, 0.5, 1.0]))
    return PolicyLossInputs(log_prob, old_log_prob, advantages, batch.mask,
                            draw(agg_contexts(batch.mask, modes)), ref_log_prob=ref,
                            is_expert_mask=expert)


@st.composite
def advantage_inputs(draw: st.DrawFn, *, max_b: int = 24, max_t: int = 16,
                     reward_kinds: Sequence[str] = REWARD_KINDS, values: bool = False,
                     reward_baselines: bool = False, min_tokens: int = 0) -> AdvantageInputs:
    """A batch for an advantage function (:class:`~rft.contracts.AdvantageInputs`).

    ``index`` groups the rows (singletons and constant-reward groups included) and comes
    as an array of strings, a list or an integer tensor.

    :param reward_kinds: see :data:`REWARD_KINDS`.
    :param values: fill ``values`` ``(B, T)`` (a critic's, masked) — for estimators that
        ``require("values", …)``.
    :param reward_baselines: fill ``reward_baselines`` ``(B,)`` (e.g. ReMax's greedy
        reward).
    :param min_tokens: at least this many masked tokens (whitening estimators need 2).
    """
    batch = draw(batches(max_b=max_b, max_t=max_t, min_tokens=min_tokens))
    rewards = rewards_for(batch, draw(st.sampled_from(list(reward_kinds))))  # (B, T)
    return AdvantageInputs(rewards, batch.mask, _group_index(draw, batch),
                           values=batch.randn() * batch.mask if values else None,
                           reward_baselines=batch.randn(batch.B) if reward_baselines else None)


@st.composite
def kl_inputs(draw: st.DrawFn, *, max_b: int = 12, max_t: int = 16,
              max_log_ratio: float = 20.0) -> KLInputs:
    """Log-probs of the policy (a leaf that requires grad) and of the reference
    (:class:`~rft.contracts.KLInputs`), ``(B, T)``, ``|log ratio| ≤ max_log_ratio``; at a
    drawn share of the positions (none, some, all) the two are exactly equal."""
    batch = draw(batches(max_b=max_b, max_t=max_t))
    log_prob = batch.logps(draw(st.sampled_from([0.1, 1.0, 10.0])))  # (B, T)
    ref = batch.drifted(log_prob, draw(st.sampled_from(LOG_RATIO_DRIFTS)), max_log_ratio)
    equal = torch.rand(batch.B, batch.T, generator=batch.gen) < draw(
        st.sampled_from([0.0, 0.3, 1.0]))  # (B, T)
    ref = torch.where(equal, log_prob, ref)  # (B, T)
    return KLInputs(log_prob.requires_grad_(), ref)


@st.composite
def entropy_inputs(draw: st.DrawFn, *, max_b: int = 12, max_t: int = 16,
                   modes: Sequence[str] = LOSS_AGG_MODES) -> EntropyInputs:
    """Per-token entropies ``(B, T)``, ``≥ 0``, a leaf that requires grad, with a mask and
    the trainer's aggregation (:class:`~rft.contracts.EntropyInputs`)."""
    batch = draw(batches(max_b=max_b, max_t=max_t))
    entropy = batch.randn(scale=draw(st.sampled_from([0.1, 1.0, 5.0]))).abs()  # (B, T)
    return EntropyInputs(entropy.requires_grad_(), batch.mask,
                         draw(agg_contexts(batch.mask, modes)))


# --------------------------------------------------------------------------------------
# Rewards and workflows
# --------------------------------------------------------------------------------------

_NUMBERS = st.one_of(st.integers(-10_000, 10_000).map(str),
                     st.fractions(max_denominator=12).map(str),
                     st.decimals(-1000, 1000, places=2, allow_nan=False,
                                 allow_infinity=False).map(str))


def _formatted(number: str) -> st.SearchStrategy[str]:
    return st.sampled_from([
        number, f"The answer is {number}.", f"<answer>{number}</answer>",
        f"<think>so it is {number}</think> <answer>{number}</answer>",
        f"x = \\boxed{{{number}}}", f"#### {number}", f"{number} {number}",
        f"<think>unfinished {number}", f"\\boxed{{{number}", f"<answer></answer>{number}",
    ])


def reward_cases(truths: st.SearchStrategy[Any] | None = None
                 ) -> st.SearchStrategy[tuple[str, Any]]:
    """``(response text, ground truth)`` pairs for a reward function: answers in the
    formats rewards parse (``<answer>``, ``<think>``, ``\\boxed{}``, ``####``), broken
    ones, the right and a wrong number, empty and arbitrary unicode text.

    :param truths: ground truths to draw (default: integers, fractions, decimals as
        strings).
    """
    truths = truths if truths is not None else _NUMBERS

    @st.composite
    def case(draw: st.DrawFn) -> tuple[str, Any]:
        truth = draw(truths)
        answer = draw(st.one_of(st.just(str(truth)), _NUMBERS))
        response = draw(st.one_of(_formatted(answer), st.just(""),
                                  st.text(max_size=80)))
        return response, truth

    return case()


def exact_match_reward(response: str, truth: Any) -> dict[str, float]:
    """``{"accuracy": 1.0}`` when the stripped response equals ``str(truth)``, else 0 —
    the default reward of :func:`workflow_tasks`."""
    return {"accuracy": float(response.strip() == str(truth).strip())}


@st.composite
def workflow_tasks(draw: st.DrawFn, *,
                   reward_fn: Callable[..., Mapping[str, float]] | None = exact_match_reward,
                   reward_args: Any = None, workflow_args: Any = None,
                   max_repeat_times: int = 3, max_tokens: int = 8,
                   greedy_baseline: bool | None = False) -> Task:
    """A :class:`rft.workflow.Task` as a taskset builds it from a raw row
    ``{"question": "a+b=", "answer": "c"}``: plain prompt (sometimes with a system prompt),
    ground truth, ``repeat_times`` in ``1 … max_repeat_times``, sampling args
    (``max_tokens``, temperature), the reward function and its args.

    :param greedy_baseline: ``None`` draws it (ReMax's flag, see
        :attr:`rft.workflow.Task.greedy_baseline`).
    """
    a, b = draw(st.integers(0, 99)), draw(st.integers(0, 99))
    raw = {"question": f"{a}+{b}=", "answer": str(a + b)}
    system = draw(st.sampled_from([None, "Answer with a number."]))
    return Task(raw=raw, index=draw(st.integers(0, 1000)), taskset="test",
                prompt=raw["question"], truth=raw["answer"], system_prompt=system,
                repeat_times=draw(st.integers(1, max_repeat_times)),
                sampling={"max_tokens": max_tokens,
                          "temperature": draw(st.sampled_from([0.0, 1.0]))},
                workflow_args=workflow_args, reward_fn=reward_fn, reward_args=reward_args,
                greedy_baseline=(draw(st.booleans()) if greedy_baseline is None
                                 else greedy_baseline))
