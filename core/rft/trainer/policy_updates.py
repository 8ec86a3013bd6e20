"""The gradient half of a :class:`~rft.trainer.torch_trainer.TorchTrainer` step: the
critic and actor updates (``ppo_epochs`` passes over mini-batches of micro-batches, the
loss reduced with the mini-batch's global counts, clipping and one optimizer step each)."""

from __future__ import annotations

import logging
import math

import torch
from torch import nn

from rft.builtin.policy_loss import clipped_value_loss
from rft.config.plan import LossPlan
from rft.trainer.batching import TensorBatch
from rft.trainer.fsdp import clip_grad_norm, move_optimizer_state
from rft.trainer.loss import AggContext, LossInputs, actor_loss
from rft.trainer.metrics import LossMetrics
from rft.trainer.models import response_logprobs, response_values, set_training
from rft.trainer.row_plan import RowPlanning

logger = logging.getLogger("rft.trainer.torch_trainer")


class PolicyUpdates(RowPlanning):
    """Mixin of :class:`~rft.trainer.torch_trainer.TorchTrainer`: step 5 of its module
    docstring (:meth:`_update_critic`, :meth:`_update_actor`)."""

    fns: LossPlan
    global_steps: int
    actor: nn.Module
    critic: nn.Module | None
    optimizer: torch.optim.Optimizer
    critic_optimizer: torch.optim.Optimizer | None

    def _agg(self, tensors: TensorBatch, rows: list[int]) -> AggContext:
        """The loss reduction of mini-batch ``rows`` with its *global* counts: sharded,
        each rank counts its share and the counts are all-reduced."""
        scale = self.options.loss_scale_factor or tensors.response_width
        if self.ranks is None:
            mask = tensors["response_mask"][rows]  # (b, R)
            return AggContext.for_mini_batch(mask, self.fns.loss_agg_mode, float(scale))
        mine = self._rank_rows(tensors, rows)
        mask = tensors["response_mask"][mine]  # (b_rank, R)
        counts = torch.tensor([float(mask.sum().item()), float(len(mine))], dtype=torch.float64)
        tokens, sequences = self.ranks.sum_tensor(counts, "mini-batch token counts").tolist()
        return AggContext(self.fns.loss_agg_mode, tokens, sequences, float(scale))

    def _step(self, model: nn.Module, optimizer: torch.optim.Optimizer,
              offload: bool = False) -> float:
        """Clip the accumulated gradient, step (skipped if its norm is not finite)."""
        clip = self.options.grad_clip if self.options.grad_clip is not None else math.inf
        if self.ranks is None:
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        else:
            grad_norm = clip_grad_norm(model.parameters(), clip)
        offload = offload and self.options.device.type != "cpu"
        if torch.isfinite(grad_norm):
            if offload:
                move_optimizer_state(optimizer, self.options.device)
            optimizer.step()
            if offload:
                move_optimizer_state(optimizer, "cpu")
        else:
            logger.warning("grad_norm is not finite (%s): update skipped", grad_norm.item())
        optimizer.zero_grad(set_to_none=True)
        return float(grad_norm.item())

    def _merge(self, record: LossMetrics) -> dict[str, float]:
        """The step's loss metrics over all ranks (one process: its own)."""
        if self.ranks is None:
            return record.result()
        return LossMetrics.merged(self.ranks.gather_objects(record, "loss metrics")).result()

    def _update_actor(self, tensors: TensorBatch) -> dict[str, float]:
        device = self.options.device
        record = LossMetrics()
        entropy_grad = self.fns.uses_entropy_loss
        set_training(self.actor, True)
        for _ in range(self.options.ppo_epochs):
            for mini_rows in self._mini_batches(tensors):
                agg = self._agg(tensors, mini_rows)
                for rows, real in self._my_micro_batches(tensors, mini_rows):
                    micro = tensors.select(rows)
                    log_prob, entropy = response_logprobs(
                        self.actor, micro, device=device, temperature=self.options.temperature,
                        with_entropy=True, entropy_grad=entropy_grad, dtype=self.options.dtype,
                        entropy_chunk=self.options.entropy_chunk_size,
                        shared_prompts=self.options.prefix_sharing,
                        layouts=self.layouts)
                    on = {k: v.to(device) for k, v in micro.tensors.items()}
                    out = actor_loss(self.fns, LossInputs(
                        log_prob=log_prob, response_mask=on["response_mask"],
                        old_log_prob=on.get("old_log_prob"),
                        advantages=on.get("advantages"), entropy=entropy,
                        rollout_is_weights=on.get("rollout_is_weights"),
                        ref_log_prob=on.get("ref_log_prob"),
                        is_expert_mask=on.get("is_expert"),
                        teacher_log_prob=on.get("teacher_log_prob"),
                        rollout_version=on.get("rollout_version"),
                        global_step=self.global_steps + 1), agg)
                    if real:
                        out.loss.backward()
                        record.add_micro(out.summed, out.averaged)
                    else:  # a dummy: its collectives, no contribution
                        (out.loss * 0.0).backward()
                record.close_mini_batch()
                record.add("actor/grad_norm", self._step(self.actor, self.optimizer,
                                                         self.options.optimizer_offload))
        return self._merge(record)

    def _update_critic(self, tensors: TensorBatch) -> dict[str, float]:
        assert self.critic is not None and self.critic_optimizer is not None
        device = self.options.device
        record = LossMetrics()
        self.critic.train()
        for _ in range(self.options.ppo_epochs):
            for mini_rows in self._mini_batches(tensors):
                agg = self._agg(tensors, mini_rows)
                for rows, real in self._my_micro_batches(tensors, mini_rows):
                    micro = tensors.select(rows)
                    on = {k: v.to(device) for k, v in micro.tensors.items()}
                    vpreds = response_values(
                        self.critic, micro, device=device, dtype=self.options.dtype,
                        shared_prompts=self.options.prefix_sharing,
                        layouts=self.layouts)  # (b, r)
                    vf_loss, vf_clipfrac = clipped_value_loss(
                        vpreds, on["values"], on["returns"], on["response_mask"],
                        cliprange_value=self.options.cliprange_value, loss_agg_mode=agg.mode,
                        **agg.kwargs())
                    if real:
                        vf_loss.backward()
                        record.add_micro({"critic/vf_loss": vf_loss.item()},
                                         {"critic/vf_clipfrac": vf_clipfrac.item()})
                    else:
                        (vf_loss * 0.0).backward()
                record.close_mini_batch()
                record.add("critic/grad_norm", self._step(self.critic, self.critic_optimizer,
                                                          self.options.critic_optimizer_offload))
        return self._merge(record)
