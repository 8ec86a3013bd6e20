"""Pure tensor maths shared by losses and advantages: masked statistics, loss aggregation,
entropy, the expected entropy signal and log-probabilities from logits.

Conventions: ``B`` is the batch (number of sequences), ``T`` the response length, ``V`` the
vocabulary. A ``mask`` is ``1`` on tokens that count and ``0`` on padding; it may be bool,
integer or float. Every function here equals veRL 0.9.1's ``verl.utils.torch_functional``
/ ``core_algos.agg_loss`` on the same tensors (``tests/test_verl_equivalence.py``), except
where a docstring says otherwise.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

LossAggMode = Literal[
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]
"""How a per-token loss matrix ``(B, T)`` becomes one scalar (see :func:`agg_loss`)."""

LOSS_AGG_MODES: tuple[str, ...] = (
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

_EPS = 1e-8


def masked_sum(values: torch.Tensor, mask: torch.Tensor,
               dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is set: ``Σ values·mask``.

    Values outside the mask (even NaN or inf) do not reach the sum.
    """
    valid = torch.where(mask.bool(), values, 0.0)  # (B, T)
    return (valid * mask).sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor,
                dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """Mean over the mask: ``Σ values·mask / (Σ mask + 1e-8)`` (0 for an empty mask)."""
    return masked_sum(values, mask, dim) / (mask.sum(dim=dim) + _EPS)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over all masked elements: ``masked_mean((values − μ)²) · n/(n−1)``.

    With ``unbiased`` (Bessel's correction, ``n = Σ mask``) it raises ``ValueError`` when
    fewer than two elements are masked, like veRL.
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.sum()
        if count == 0:
            raise ValueError("masked_var: the mask selects no element")
        if count == 1:
            raise ValueError("masked_var: the mask selects one element; the unbiased "
                             "variance divides by zero (use a larger batch)")
        variance = variance * (count / (count - 1))
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Whiten with statistics over the mask: ``(values − μ) / √(σ² + 1e-8)``.

    ``μ`` and the unbiased ``σ²`` are taken over masked elements only, but every element
    (padding too) is transformed. With ``shift_mean=False`` the mean is added back.
    """
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + _EPS)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def _safe_div(numerator: torch.Tensor, denominator: torch.Tensor | float) -> torch.Tensor:
    """``numerator / denominator``, or ``numerator`` (which is then 0) when the count is 0."""
    if isinstance(denominator, torch.Tensor):
        denominator = torch.where(denominator == 0, torch.ones_like(denominator), denominator)
    elif denominator == 0:
        denominator = 1
    return numerator / denominator


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    dp_size: int = 1,
    batch_num_tokens: int | float | torch.Tensor | None = None,
    global_batch_size: int | float | torch.Tensor | None = None,
    loss_scale_factor: int | float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss ``(B, T)`` into a scalar.

    With ``m`` the mask, ``L_i = Σ_t loss_it·m_it`` a sequence's token sum,
    ``n_i = Σ_t m_it`` its token count and ``S = {i : n_i > 0}``:

    - ``token-mean``:              ``Σ_i L_i / N_tok · dp``, ``N_tok = batch_num_tokens or Σ n_i``
    - ``token-sum``:               ``Σ_i L_i · dp``
    - ``seq-mean-token-sum``:      ``Σ_{i∈S} L_i / N_seq · dp``, ``N_seq = global_batch_size or |S|``
    - ``seq-mean-token-mean``:     ``Σ_{i∈S} (L_i / (n_i + 1e-8)) / N_seq · dp``
    - ``seq-mean-token-sum-norm``: ``seq-mean-token-sum / loss_scale_factor`` (default ``T``)

    Passing the *mini-batch's* token count / sequence count as ``batch_num_tokens`` /
    ``global_batch_size`` makes the micro-batch losses add up to the mini-batch loss, and
    ``dp_size`` undoes the gradient averaging of data-parallel ranks (veRL's semantics;
    with ``dp_size > 1`` the global count is required).

    Divergence from veRL: when the count divided by is 0 (an all-zero mask and no
    global count) veRL returns NaN; this returns 0, so an empty micro-batch adds nothing.
    """
    if mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("agg_loss: batch_num_tokens (global) is required when dp_size > 1")
            batch_num_tokens = mask.sum()
        return _safe_div(masked_sum(loss_mat, mask), batch_num_tokens) * dp_size
    if mode == "token-sum":
        return masked_sum(loss_mat, mask) * dp_size
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        token_counts = mask.sum(dim=-1)  # (B,)
        seq_losses = (loss_mat * mask).sum(dim=-1)  # (B,)
        if mode == "seq-mean-token-mean":
            seq_losses = seq_losses / (token_counts + _EPS)
        seq_mask = (token_counts > 0).to(loss_mat.dtype)  # (B,) sequences with any token
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("agg_loss: global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = _safe_div(masked_sum(seq_losses, seq_mask), global_batch_size) * dp_size
        if mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_scale_factor if loss_scale_factor is not None else mask.shape[-1])
        return loss
    raise ValueError(f"unknown loss_agg_mode {mode!r}; expected one of {', '.join(LOSS_AGG_MODES)}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax distribution, ``H = logsumexp(z) − Σ_v softmax(z)_v · z_v``.

    ``logits``: ``(..., V)`` → entropy ``(...)``.
    """
    probs = F.softmax(logits, dim=-1)  # (..., V)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def entropy_from_log_probs(log_p: torch.Tensor) -> torch.Tensor:
    """Entropy from log-probabilities, ``H = −Σ_v p_v log p_v`` with ``p = exp(log p)``;
    equal to :func:`entropy_from_logits` of ``z`` when ``log_p = log_softmax(z)``.

    ``log_p``: ``(..., V)`` → entropy ``(...)``. With ``log_p`` kept for the log-probs'
    backward anyway, its autograd holds ``p`` beside it, where :func:`entropy_from_logits`
    holds ``z`` and ``softmax(z)``: one ``(..., V)`` tensor less.
    """
    return -(log_p.exp() * log_p).sum(dim=-1)


def expected_entropy_signal_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """The expected entropy signal of the softmax distribution ``p = softmax(z)`` (Trinity-RFT's
    ``necs``, used by Clip_V), in float32 or wider::

        H = −Σ_v p_v log p_v
        N = H · Σ_v p_v² + Σ_v p_v² log p_v  =  Σ_v p_v² (log p_v + H)  =  E_{v~p}[S_v]

    with ``S_v = p_v (H + log p_v)`` the first-order entropy change of pushing token ``v``
    up (see ``rft_plugin_grpo.clip_b.entropy_signal``). No gradient is needed: it is a
    statistic of the batch before the update.

    ``logits``: ``(..., V)`` → ``(...)``.
    """
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    log_p = F.log_softmax(logits, dim=-1)  # (..., V)
    p = log_p.exp()  # (..., V)
    entropy = -(p * log_p).sum(dim=-1, keepdim=True)  # (..., 1)
    p_sq = p * p  # (..., V)
    return (p_sq * (log_p + entropy)).sum(dim=-1)  # (...)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of each label, ``log softmax(z)_y = z_y − logsumexp(z)``.

    ``logits``: ``(..., V)``, ``labels``: ``(...)`` integer ids → ``(...)``. Through the
    fused ``log_softmax`` in every dtype: on the CPU its forward and backward
    (``g − softmax(z) · Σ g``) are one vectorised pass each, where ``logsumexp``'s are
    several (1–2 against ~6 ms forward and backward at ``(800, 964)``, one thread), and in
    bfloat16 / float16 ``logsumexp`` loses too much precision.
    """
    return F.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def clip_by_value(x: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Element-wise clamp with tensor bounds: ``max(min(x, high), low)``."""
    return torch.max(torch.min(x, high), low)
