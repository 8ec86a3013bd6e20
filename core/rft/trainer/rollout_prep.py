"""The no-gradient half of a :class:`~rft.trainer.torch_trainer.TorchTrainer` step on a
``rollout`` batch: old / reference log-probs, critic values, the KL penalty, advantages,
data metrics and the first step's engine / trainer log-prob check."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

import torch
from torch import nn

from rft.config.plan import LossPlan, TrainerPlan
from rft.contracts import needs_entropy, needs_expected_entropy_signal
from rft.experience import Batch
from rft.trainer.batching import TensorBatch
from rft.trainer.loss import apply_kl_penalty, batch_advantages
from rft.trainer.metrics import data_metrics, first_step_check, rollout_probs_diff, timed
from rft.trainer.models import (response_entropy_signals, response_logprobs, response_values,
                                set_training)
from rft.trainer.rollout_correction import CorrectionSpec, correct, engine_log_prob
from rft.trainer.row_plan import RowPlanning

logger = logging.getLogger("rft.trainer.torch_trainer")


class RolloutPreparation(RowPlanning):
    """Mixin of :class:`~rft.trainer.torch_trainer.TorchTrainer`: step 2–4 of its module
    docstring (:meth:`_prepare_rollout`), micro-batched forward passes without gradient."""

    plan: TrainerPlan
    fns: LossPlan
    global_steps: int
    actor: nn.Module
    ref: nn.Module | None
    critic: nn.Module | None
    _actor_dropout: bool
    _checked_first_step: bool
    correction: CorrectionSpec
    last_advantages: Mapping[str, float]

    def _first_step_check(self, metrics: dict[str, float]) -> None:
        """Once, at the first step with engine log-probs: the gap in one line (rank 0): on
        stdout as ``[trainer] first step: …`` when it agrees, on stderr as ``rft: warning:
        first step: …`` when above :data:`~rft.trainer.metrics.FIRST_STEP_PROBS_DIFF_MEAN`
        (an ``rft:`` line that is not a warning is an error, so an agreeing check is not one)."""
        if self._checked_first_step:
            return
        self._checked_first_step = True  # on every rank (its forward pass is a collective)
        if self.is_rank0:
            report_first_step(metrics)

    def _infer_logprobs(self, model: nn.Module, tensors: TensorBatch) -> torch.Tensor:
        """``(B, R)`` response log-probs of ``model`` over the whole batch, micro-batched."""
        return self._infer(model, tensors, with_entropy=False)[0]

    @torch.no_grad()
    def _infer(self, model: nn.Module, tensors: TensorBatch, *, with_entropy: bool,
               with_expected_entropy_signal: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(B, R)`` response log-probs of ``model`` over the whole batch, micro-batched;
        with ``with_entropy`` its ``(B, R)`` per-token entropies, and with
        ``with_expected_entropy_signal`` also its ``(B, R)`` expected entropy signals
        (:func:`rft.ops.expected_entropy_signal_from_logits`), all from one forward pass."""
        with_entropy = with_entropy or with_expected_entropy_signal
        out = torch.zeros(len(tensors), tensors.response_width)  # (B, R)
        ent = torch.zeros(len(tensors), tensors.response_width) if with_entropy else None
        signal = (torch.zeros(len(tensors), tensors.response_width)
                  if with_expected_entropy_signal else None)  # (B, R)
        was_training = model.training
        set_training(model, False)
        try:
            for rows, real in self._my_inference_batches(tensors):
                micro = tensors.select(rows)
                micro_signal = None
                entropy: torch.Tensor | None
                if signal is not None:
                    logps, entropy, micro_signal = response_entropy_signals(
                        model, micro, device=self.options.device,
                        temperature=self.options.temperature, dtype=self.options.dtype,
                        shared_prompts=self.options.prefix_sharing,
                        layouts=self.layouts)
                else:
                    logps, entropy = response_logprobs(
                        model, micro, device=self.options.device,
                        temperature=self.options.temperature, with_entropy=with_entropy,
                        entropy_grad=False, dtype=self.options.dtype,
                        shared_prompts=self.options.prefix_sharing,
                        layouts=self.layouts)
                if real:
                    width = micro.response_width
                    out[rows, :width] = logps.cpu()
                    if ent is not None and entropy is not None:
                        ent[rows, :width] = entropy.cpu()
                    if signal is not None and micro_signal is not None:
                        signal[rows, :width] = micro_signal.cpu()
        finally:
            set_training(model, was_training)
        gathered = self._gather_rows(out, "log-probs")
        return (gathered, self._gather_rows(ent, "entropies") if ent is not None else None,
                self._gather_rows(signal, "expected entropy signals")
                if signal is not None else None)

    @torch.no_grad()
    def _infer_values(self, tensors: TensorBatch) -> torch.Tensor:
        """``(B, R)`` critic values (masked) over the whole batch."""
        assert self.critic is not None
        out = torch.zeros(len(tensors), tensors.response_width)  # (B, R)
        self.critic.eval()
        try:
            for rows, real in self._my_inference_batches(tensors):
                micro = tensors.select(rows)
                values = response_values(self.critic, micro, device=self.options.device,
                                         dtype=self.options.dtype,
                                         shared_prompts=self.options.prefix_sharing,
                                         layouts=self.layouts)
                if real:
                    out[rows, : micro.response_width] = values.cpu()
        finally:
            self.critic.train()
        return self._gather_rows(out, "values") * tensors["response_mask"]

    def _needs_old_logprobs(self, tensors: TensorBatch) -> bool:
        """Whether old log-probs must be computed before the update (see module doc)."""
        updates = len(self._mini_batches(tensors)) * self.options.ppo_epochs
        return updates > 1 or self.fns.uses_kl_penalty or self._actor_dropout

    def _correct_rollout(self, rollout_log_prob: torch.Tensor, tensors: TensorBatch,
                         mask: torch.Tensor, metrics: dict[str, float]) -> torch.Tensor:
        """Off-policy correction (``algorithm.rollout_correction``) of the engine's tokens
        against the trainer's ``old_log_prob``: the importance weights go to
        ``tensors["rollout_is_weights"]`` ``(B, R)`` (the actor loss multiplies the
        per-token policy loss by them), ``rollout_corr/…`` to ``metrics``; returns the
        ``(B, R)`` response mask without the rejected tokens."""
        with timed(metrics, "rollout_corr"):
            result = correct(tensors["old_log_prob"], rollout_log_prob.to(mask.dtype), mask,
                             self.correction)
        if result.weights is not None:
            tensors["rollout_is_weights"] = result.weights.to(torch.float32)
        metrics.update(result.metrics)
        return result.response_mask

    def _prepare_rollout(self, batch: Batch, tensors: TensorBatch,
                         metrics: dict[str, float]) -> None:
        """Old / reference log-probs, values, KL penalty, advantages and data metrics."""
        mask = batch.response_mask  # (B, R)
        correction = self.plan.algorithm.rollout_correction
        correcting = correction.rollout_is is not None or correction.rollout_rs is not None
        engine_log_prob(self.correction, correction.bypass_mode, batch.rollout_log_prob)
        if ((self.options.use_rollout_logprobs or correction.bypass_mode)
                and batch.rollout_log_prob is not None):
            tensors["old_log_prob"] = batch.rollout_log_prob
        elif correcting or self._needs_old_logprobs(tensors):
            with timed(metrics, "old_log_prob"):
                tensors["old_log_prob"] = self._infer_logprobs(self.actor, tensors)
            if batch.rollout_log_prob is not None:  # the engine's: do they match the trainer's?
                metrics.update(rollout_probs_diff(batch.rollout_log_prob,
                                                  tensors["old_log_prob"], mask))
                self._first_step_check(metrics)
        elif batch.rollout_log_prob is not None and self.global_steps == 0:
            # one update per step needs no old log-probs: the run's first step computes them
            # for the check alone (one forward pass without gradients; nothing else uses
            # them; a resumed run's steps log what the uninterrupted run's do)
            first = self._infer_logprobs(self.actor, tensors)  # (B, R)
            metrics.update(rollout_probs_diff(batch.rollout_log_prob, first, mask))
            self._first_step_check(metrics)
        if self.ref is not None:
            with timed(metrics, "ref"):
                tensors["ref_log_prob"] = self._infer_logprobs(self.ref, tensors)
        values = None
        if self.critic is not None:
            with timed(metrics, "values"):
                values = tensors["values"] = self._infer_values(tensors)
        scores = batch.token_level_rewards  # (B, R)
        rewards = scores
        if self.fns.uses_kl_penalty:
            old_log_prob = tensors.get("old_log_prob")
            assert old_log_prob is not None and self.fns.kl_penalty is not None
            rewards, kl_metrics = apply_kl_penalty(scores, old_log_prob, tensors["ref_log_prob"],
                                                   mask, self.fns.kl_penalty)
            metrics.update(kl_metrics)
        if correcting:  # veRL's order: after the KL penalty, before the advantages
            assert batch.rollout_log_prob is not None
            mask = self._correct_rollout(batch.rollout_log_prob, tensors, mask, metrics)
        policy_log_prob = entropy = expected_signal = None
        selected = self.plan.loss.advantage
        with_signal = (selected is not None
                       and needs_expected_entropy_signal(selected.implementation))
        if selected is not None and (needs_entropy(selected.implementation) or with_signal):
            with timed(metrics, "entropy"):
                policy_log_prob, entropy, expected_signal = self._infer(
                    self.actor, tensors, with_entropy=True,
                    with_expected_entropy_signal=with_signal)
        with timed(metrics, "adv"):
            advantages, returns, kept = batch_advantages(
                self.plan, batch, rewards, mask, values, entropy, old_log_prob=policy_log_prob,
                expected_entropy_signal=expected_signal)
        tensors["advantages"], tensors["returns"] = advantages, returns
        self.last_advantages = sequence_advantages(batch, advantages, kept)
        if kept is not batch.response_mask:  # correction / advantage fn dropped tokens
            tensors["response_mask"] = kept
        metrics.update(data_metrics(
            token_level_scores=scores, token_level_rewards=rewards, advantages=advantages,
            returns=returns, response_mask=batch.response_mask,
            response_lengths=tensors.response_lengths(),
            prompt_lengths=batch.attention_mask[:, : batch.prompt_width].sum(-1),
            max_response_length=self.plan.model.max_response_tokens or tensors.response_width,
            max_prompt_length=self.plan.model.max_prompt_tokens or batch.prompt_width,
            values=values))


def report_first_step(metrics: dict[str, float]) -> None:
    """The first step's engine / trainer log-prob check
    (:func:`~rft.trainer.metrics.first_step_check` on ``metrics``) as one line: on stdout as
    ``[trainer] first step: …`` when it agrees, on stderr as ``rft: warning: first step: …``
    when not; nothing without :func:`~rft.trainer.metrics.rollout_probs_diff` metrics. Every
    trainer backend reports it with this function."""
    checked = first_step_check(metrics)
    if checked is None:
        return
    line, ok = checked
    (logger.info if ok else logger.warning)("%s", line)
    if ok:
        print(f"[trainer] {line}", file=sys.stdout, flush=True)
    else:
        print(f"rft: warning: {line}", file=sys.stderr, flush=True)


def sequence_advantages(batch: Batch, advantages: torch.Tensor, mask: torch.Tensor
                        ) -> dict[str, float]:
    """Each row's ``Σ_t A_t m_t / Σ_t m_t`` by ``eid.uid`` (``advantages`` / ``mask``
    ``(B, R)``; rows without a kept token are left out)."""
    kept = mask.to(advantages.dtype)  # (B, R)
    totals = kept.sum(-1)  # (B,)
    means = (advantages * kept).sum(-1) / totals.clamp(min=1)  # (B,)
    # one conversion of each (B,) tensor, not two scalar reads per row
    return {exp.eid.uid: mean for exp, mean, total
            in zip(batch.experiences, means.tolist(), totals.tolist(), strict=True) if total > 0}
