"""The native ``torch`` trainer: one process (CPU or one GPU), or one rank of several.

One :meth:`TorchTrainer.train_step` on a ``rollout`` batch follows veRL's PPO step:

1. pad the experiences (:func:`rft.experience.pad_batch`);
2. without gradient: old log-probs (when more than one optimizer step uses them, for the
   KL penalty, or with dropout — otherwise the first update's ``logps.detach()`` *is*
   the recomputed value), reference log-probs (a KL loss / penalty with a non-zero
   ``kl_coef``, or a policy loss asking for them: ``LossPlan.needs_ref``, which also
   decides whether a reference model is held at all), critic values;
3. ``token_level_rewards −= kl_coef · kl(old, ref)`` when a KL penalty is selected;
4. advantages with the selected advantage fn (unless the explorer computed them);
5. critic update (clipped value loss), then actor update: ``ppo_epochs`` passes over
   mini-batches of ``mini_batch_size`` rows; each mini-batch is split into micro-batches
   (fixed rows, or a token budget), the micro-batch losses are normalised by the
   mini-batch's token / sequence counts so their gradients accumulate to the
   mini-batch gradient, then grad-norm clipping and one optimizer step;
6. one LR-scheduler step; ``global_steps += 1``.

Batches of a dataset (the preset's ``experience_format`` is not ``rollout``: SFT, DPO, …)
skip 2–5 but the reference log-probs (when the loss needs them) and the actor update (the
policy loss fn gets ``log_prob``, ``log_prob.detach()``, zero advantages and the mask).
The algorithm's ``batch_layout`` (:class:`rft.algorithm.BatchLayout`) arranges each batch
and says how many consecutive rows form a unit that mini- and micro-batches keep whole
(e.g. DPO's preference pairs).

Sharded (``trainer.ranks > 1``): ``TorchTrainer(plan)`` then returns a
:class:`~rft.trainer.ranks.RankedTrainer`, which starts the ranks as Ray actors; each rank
holds a ``TorchTrainer`` built with its :class:`~rft.trainer.parallel.RankGroup`, whose
actor, reference model and critic are sharded with FSDP2 (:mod:`rft.trainer.fsdp`). Every
rank gets the whole batch and runs the same step on its share of the rows
(:mod:`rft.trainer.parallel` says how the shares are formed and why the update equals the
one-process update).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any, Literal, overload

import torch
from torch import nn

from rft.adapter import AdapterWeights, LoraSpec
from rft.algorithm import AlgorithmPreset
from rft.config.plan import LossPlan, TrainerPlan
from rft.errors import RftError
from rft.experience import Batch, Experience, pad_batch
from rft.trainer import lora as lora_ops
from rft.trainer.base import Trainer
from rft.trainer.batching import TensorBatch
from rft.trainer.fsdp import full_tensor, shard_model, unique_state_names
from rft.trainer.vision_step import keep_vision_in_models
from rft.trainer.input_checks import check_experiences
from rft.trainer.layout_memo import LayoutMemo
from rft.trainer.metrics import timed
from rft.trainer.models import (has_dropout, load_causal_lm, load_value_model, save_pretrained,
                                unique_tensors)
from rft.trainer.optim import build_optimizer, build_scheduler
from rft.trainer.options import TorchTrainerOptions
from rft.trainer.parallel import RankGroup
from rft.trainer.policy_updates import PolicyUpdates
from rft.trainer.rollout_correction import spec_of
from rft.trainer.rollout_prep import RolloutPreparation

logger = logging.getLogger(__name__)

CRITIC_HEAD_SEED = 0
"""Seed of the critic's fresh value head (the same head on every rank and in every run)."""

_CHECKED_FIELDS = ("logprobs", "action_mask", "token_level_reward", "advantages", "returns",
                   "teacher_logprobs", "token_versions")


class TorchTrainer(PolicyUpdates, RolloutPreparation, Trainer):
    """Native trainer (see the module docstring for one step).

    :param plan: the stage's trainer plan (config sections, preset, loss functions, steps).
    :param model: an already-loaded actor (e.g. shared with an in-process engine);
        default: ``AutoModelForCausalLM.from_pretrained(model.model_path)``.
    :param ranks: this process's rank of a sharded trainer (built by
        :class:`~rft.trainer.ranks.TrainerRank`); ``None``: one process.

    ``TorchTrainer(plan)`` with ``plan.trainer.ranks > 1`` (and neither ``model`` nor
    ``ranks``) builds a :class:`~rft.trainer.ranks.RankedTrainer` instead.

    With ``model.lora_configs`` the actor is a peft model training one adapter
    (:mod:`rft.trainer.lora`): the reference is the actor with the adapter disabled,
    checkpoints and syncs hold the adapter only.
    """

    supports_lora = True

    def __new__(cls, plan: TrainerPlan, model: nn.Module | None = None, *,
                ranks: RankGroup | None = None) -> Any:
        sharded = (plan.trainer.ranks or 1) > 1
        if cls is TorchTrainer and model is None and ranks is None and sharded:
            from rft.trainer.ranks import RankedTrainer

            return RankedTrainer(plan, cls)
        return super().__new__(cls)

    def __init__(self, plan: TrainerPlan, model: nn.Module | None = None, *,
                 ranks: RankGroup | None = None) -> None:
        super().__init__(plan)
        self.preset: AlgorithmPreset = plan.preset
        self.fns: LossPlan = plan.loss
        self.options = TorchTrainerOptions.from_plan(plan)
        self.ranks = ranks
        self.layouts = LayoutMemo()
        self.correction = spec_of(plan.algorithm.rollout_correction)
        """``algorithm.rollout_correction`` parsed (:mod:`rft.trainer.rollout_correction`)."""
        self._checked_first_step = False
        """The first step's engine / trainer log-prob check ran (:meth:`_first_step_check`)."""
        if ranks is not None:
            self.options.device = ranks.device
        device = self.options.device
        options = self.options
        trust = plan.model.trust_remote_code
        if model is None:
            model = load_causal_lm(plan.model.model_path, trust_remote_code=trust,
                                   rope_scaling=plan.model.rope_scaling,
                                   rope_theta=plan.model.rope_theta)
        self.lora = lora_ops.lora_of(plan.model)
        """``model.lora_configs[0]``: the actor is a peft model training that adapter."""
        if self.lora is not None:
            model = lora_ops.apply_lora(model, self.lora, base_model_name=plan.model.model_path)
        self.actor: nn.Module = model
        if options.gradient_checkpointing:
            _enable_gradient_checkpointing(self.actor, "actor")
        self.ref: nn.Module | None = None
        if self.fns.needs_ref:  # an active KL term or a loss reading ref_log_prob
            self.ref = lora_ops.reference_model(self.actor)  # LoRA: adapter disabled
        self.vision_hooks = keep_vision_in_models(
            self.actor, None if self.ref is None or lora_ops.shares_actor_weights(self.ref)
            else self.ref)
        """Vision-language actors: every forward runs the vision tower (FSDP's collectives
        over ranks, :mod:`rft.trainer.vision_step`); empty for a text model."""
        self.critic: nn.Module | None = None
        if self.preset.use_critic:
            path = plan.model.critic_model_path or plan.model.model_path
            with torch.random.fork_rng(devices=[]):  # the same fresh head everywhere
                torch.manual_seed(CRITIC_HEAD_SEED)
                self.critic = load_value_model(path, trust_remote_code=trust,
                                               rope_scaling=plan.model.rope_scaling,
                                               rope_theta=plan.model.rope_theta)
            if options.critic_gradient_checkpointing:
                _enable_gradient_checkpointing(self.critic, "critic")
        if ranks is not None:  # gradient checkpointing was enabled before sharding
            mp = options.dtype if device.type == "cuda" else None
            shard_model(self.actor, ranks, offload=options.param_offload, param_dtype=mp)
            if self.ref is not None and not lora_ops.shares_actor_weights(self.ref):
                shard_model(self.ref, ranks, offload=options.ref_param_offload, param_dtype=mp)
            if self.critic is not None:
                shard_model(self.critic, ranks, offload=options.critic_param_offload,
                            param_dtype=mp)
        else:
            for name, flag in (("param_offload", options.param_offload),
                               ("ref param_offload", options.ref_param_offload),
                               ("critic param_offload", options.critic_param_offload)):
                if flag:
                    logger.warning("trainer.trainer_config %s: parameter offload needs a sharded "
                                   "trainer (trainer.ranks > 1); ignored in one process", name)
            self.actor.to(device)
            if self.ref is not None:
                self.ref.to(device)
            if self.critic is not None:
                self.critic.to(device)
        self.actor.train()
        if self.critic is not None:
            self.critic.train()
        opt_config = plan.algorithm.optimizer
        total = self.options.total_steps
        self.optimizer = build_optimizer(lora_ops.trainable_parameters(self.actor), opt_config)
        self.scheduler = build_scheduler(self.optimizer, opt_config, total)
        self.critic_optimizer = self.critic_scheduler = None
        if self.critic is not None:
            self.critic_optimizer = build_optimizer(self.critic.parameters(), opt_config,
                                                    lr=self.options.critic_lr)
            self.critic_scheduler = build_scheduler(self.critic_optimizer, opt_config, total)
        model_config = getattr(self.actor, "config", None)
        pad = getattr(model_config, "pad_token_id", None)
        self.pad_token_id: int = int(pad) if isinstance(pad, int) else 0
        self.vocab_size: int | None = getattr(model_config, "vocab_size", None)
        self._actor_dropout = has_dropout(self.actor)

    # ---- public interface ------------------------------------------------------------

    def train_step(self, experiences: Sequence[Experience]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        with timed(metrics, "step"):
            rows = self._ordered(list(experiences))
            self._check(rows)
            batch = pad_batch(rows, self.pad_token_id)
            tensors = self._tensor_batch(batch)
            if self.preset.experience_format == "rollout":
                self._prepare_rollout(batch, tensors, metrics)
                if self.critic is not None:
                    with timed(metrics, "update_critic"):
                        metrics.update(self._update_critic(tensors))
            elif self.ref is not None:
                with timed(metrics, "ref"):
                    tensors["ref_log_prob"] = self._infer_logprobs(self.ref, tensors)
            with timed(metrics, "update_actor"):
                metrics.update(self._update_actor(tensors))
            self.scheduler.step()
            metrics["actor/lr"] = float(self.scheduler.get_last_lr()[0])
            if self.critic_scheduler is not None:
                self.critic_scheduler.step()
                metrics["critic/lr"] = float(self.critic_scheduler.get_last_lr()[0])
        self.global_steps += 1
        return metrics

    def gathered_state(self) -> dict[str, Any] | None:
        """The state in the one-process format: with ranks, gathered on rank 0 (``None`` on
        the other ranks; every rank calls it), else :meth:`state_dict`."""
        if self.ranks is not None:
            from rft.trainer import sharded_checkpoint

            return sharded_checkpoint.full_state(self)
        return self.state_dict()

    def state_dict(self) -> dict[str, Any]:
        if self.ranks is not None:  # the one-process format, gathered on rank 0
            state = self.gathered_state()
            if state is None:
                raise RuntimeError("TorchTrainer.state_dict: only rank 0 holds the gathered "
                                   "state; the ranks call gathered_state()")
            return state
        state = {
            "global_steps": self.global_steps,
            "actor": lora_ops.actor_state(self.actor),  # LoRA: the adapter's tensors
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }
        if self.lora is not None:
            state["lora"] = self._lora_spec().to_plain()
        if self.critic is not None:
            assert self.critic_optimizer is not None and self.critic_scheduler is not None
            state["critic"] = self.critic.state_dict()
            state["critic_optimizer"] = self.critic_optimizer.state_dict()
            state["critic_scheduler"] = self.critic_scheduler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from rft.trainer import sharded_checkpoint

        if sharded_checkpoint.is_sharded_marker(state):  # written by N ranks: reshard to this
            sharded_checkpoint.load_sharded(self, sharded_checkpoint.marker_dir(state))
            return
        if self.ranks is not None:  # one process's full state into this rank's shards
            sharded_checkpoint.load_full_state(self, state)
            return
        missing = [k for k in ("global_steps", "actor", "optimizer", "scheduler") if k not in state]
        if self.critic is not None:
            missing += [k for k in ("critic", "critic_optimizer", "critic_scheduler")
                        if k not in state]
        if missing:
            raise RftError(f"trainer checkpoint: missing {', '.join(missing)}")
        lora_ops.load_actor_state(self.actor, state["actor"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.critic is not None:
            assert self.critic_optimizer is not None and self.critic_scheduler is not None
            self.critic.load_state_dict(state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
            self.critic_scheduler.load_state_dict(state["critic_scheduler"])
        self.global_steps = int(state["global_steps"])

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        weights = unique_tensors(self.actor) if self.ranks is None else self.gathered_weights()
        if self.lora is not None:  # Hugging Face names: the base with the adapter merged in
            return lora_ops.merged_weights(weights, self._lora_spec().scale)
        return weights

    def adapter_weights(self) -> AdapterWeights | None:
        """The trained adapter (LoRA), gathered whole when sharded (a collective); ``None``
        without LoRA."""
        if self.lora is None:
            return None
        return lora_ops.adapter_weights(self.actor, self._lora_spec(), keep=self.is_rank0)

    def _lora_spec(self) -> LoraSpec:
        assert self.lora is not None
        return lora_ops.lora_spec(self.actor, self.lora, self.plan.model.model_path)

    @overload
    def gathered_weights(self, keep: Literal[True] = True
                         ) -> Iterator[tuple[str, torch.Tensor]]: ...

    @overload
    def gathered_weights(self, keep: bool) -> Iterator[tuple[str, torch.Tensor | None]]: ...

    def gathered_weights(self, keep: bool = True
                         ) -> Iterator[tuple[str, torch.Tensor | None]]:
        """Sharded: the actor's whole tensors, gathered one at a time (a collective: every
        rank must iterate to the end). ``keep`` false: yields ``(name, None)`` on ranks
        other than 0 (they only take part)."""
        state = self.actor.state_dict()
        for name in unique_state_names(self.actor):
            tensor = full_tensor(state[name]).detach()
            if keep or self.is_rank0:
                yield name, tensor
            else:
                yield name, None

    def save_pretrained(self, path: str) -> None:
        if self.lora is not None:  # the adapter (peft's format); merged/ when asked
            stream = self.gathered_weights(keep=False) if self.ranks is not None else None
            lora_ops.export(self.actor, self._lora_spec(), path,
                            merged=self.plan.trainer.save_hf_merged,
                            tokenizer_path=self.plan.model.model_path,
                            is_rank0=self.is_rank0, stream=stream)
            return
        if self.ranks is None:
            save_pretrained(self.actor, path)
            return
        from rft.trainer import sharded_checkpoint

        sharded_checkpoint.save_pretrained_from_shards(self, path)

    def close(self) -> None:
        if self.ranks is not None:
            self.ranks.close()

    # ---- input checks ----------------------------------------------------------------

    def _ordered(self, experiences: list[Experience]) -> list[Experience]:
        """The batch as the algorithm's batch layout arranges it (units kept whole)."""
        if not experiences:
            raise RftError("trainer: train_step got no experiences")
        return self.preset.batch_layout.arrange(experiences)

    def _check(self, experiences: list[Experience]) -> None:
        """One-line :class:`RftError` naming a malformed experience (shapes, rewards,
        NaN / inf, token ids), batched: :func:`rft.trainer.input_checks.check_experiences`."""
        check_experiences(experiences, _CHECKED_FIELDS,
                          rollout=self.preset.experience_format == "rollout",
                          vocab_size=self.vocab_size)

    # ---- batch tensors ---------------------------------------------------------------

    def _tensor_batch(self, batch: Batch) -> TensorBatch:
        tensors = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
                   "position_ids": batch.position_ids, "response_mask": batch.response_mask}
        if any("is_expert" in e.info for e in batch.experiences):  # mixed expert data (mix)
            tensors["is_expert"] = torch.tensor([bool(e.info.get("is_expert"))
                                                 for e in batch.experiences])  # (B,)
        if batch.teacher_log_prob is not None:  # a distillation workflow's teacher
            tensors["teacher_log_prob"] = batch.teacher_log_prob  # (B, R)
        if batch.rollout_version is not None:  # per-token weights versions (partial rollouts)
            tensors["rollout_version"] = batch.rollout_version  # (B, R)
        multi_modal = batch.multi_modal_inputs
        return TensorBatch(batch.prompt_width, tensors,
                           tuple(multi_modal) if any(m is not None for m in multi_modal) else ())


def _enable_gradient_checkpointing(model: nn.Module, key: str) -> None:
    """Hugging Face gradient checkpointing, non-reentrant (works under FSDP2)."""
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise RftError(f"trainer.trainer_config: enable_gradient_checkpointing is set but the "
                       f"{key} ({type(model).__name__}) does not support it")
    enable(gradient_checkpointing_kwargs={"use_reentrant": False})
