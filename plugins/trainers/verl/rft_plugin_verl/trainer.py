"""``trainer_type: verl``: veRL 0.9.1's engine workers driving rft's training step.

:class:`VerlTrainer` is an rft :class:`~rft.trainer.base.Trainer` whose models live in
veRL's workers — with ``trainer.ranks`` 1 built in the trainer's own process as one
data-parallel rank, with more as veRL worker groups (see "Several ranks" below):

- the actor: ``verl.workers.engine_workers.ActorRolloutRefWorker(role="actor")`` (veRL's
  FSDP / FSDP2 engine, optimizer and LR scheduler), its loss function replaced through
  veRL's ``set_loss_fn`` hook by :class:`~rft_plugin_verl.losses.ActorLoss` (rft's loss
  plugins);
- the reference model, when the preset or a loss needs one: the same worker class with
  ``role="ref"``;
- the critic, when the preset uses one: ``verl.workers.engine_workers.TrainingWorker`` on
  veRL's value-model engine, with :class:`~rft_plugin_verl.losses.CriticLoss`.

One :meth:`VerlTrainer.train_step` follows veRL's ``RayPPOTrainer.fit`` step and the
native trainer's choices (what is computed when):

1. the experiences are padded and packed into veRL's no-padding batch
   (:mod:`rft_plugin_verl.batch`);
2. old log-probs (``compute_log_prob``) when more than one optimizer step uses them, with
   a KL penalty, with dropout or with an off-policy correction — otherwise the first
   update's ``log_prob.detach()`` is the same value (``algorithm.rollout_correction.
   bypass_mode``: the engine's log-probs instead), and at the run's first step to compare
   the engine's log-probs with them (the torch trainer's check and line,
   :func:`rft.trainer.rollout_prep.report_first_step`); the policy's entropies (and
   expected entropy signals) from the same ``compute_log_prob`` for an advantage fn that
   declares it (:mod:`rft_plugin_verl.entropy`); reference log-probs
   (``compute_ref_log_prob``); critic values (``infer_batch``);
3. KL penalty, off-policy correction (``algorithm.rollout_correction``:
   :func:`rft.trainer.rollout_correction.correct`, the torch trainer's; its importance
   weights go to the loss hook as veRL's ``rollout_is_weights``, its rejection mask
   replaces the response mask) and advantages with rft's functions
   (:mod:`rft.trainer.loss`), on this process, as veRL's driver does; a fn that drops
   tokens from the update (``clipb``, ``clipv``) hands veRL's loss its reduced mask;
4. ``update_critic`` then ``update_actor`` (veRL's ``train_mini_batch``: mini-batches of
   ``ppo_mini_batch_size × repeat_times`` rows, ``ppo_epochs`` passes, micro-batches,
   gradient clipping, optimizer and scheduler steps), the actor skipped during
   ``trainer.critic_warmup`` steps;
5. metrics under veRL's / the native trainer's names.

State, weights and checkpoints: :meth:`named_weights` gathers the actor's full tensors
(Hugging Face names, tied weights once) for the synchronizer; :meth:`write_checkpoint` /
:meth:`read_checkpoint` have veRL's workers write and read their checkpoints in veRL's
layout (``actor/``, ``critic/``) inside rft's checkpoint folder
(:mod:`rft_plugin_verl.checkpoint`); :meth:`state_dict` / :meth:`load_state_dict` hold
the models, optimizers and schedulers in one process's full (unsharded) form;
:meth:`save_pretrained` writes the actor in Hugging Face format.

LoRA (``model.lora_configs``): veRL's peft actor, its reference the actor with the adapter
disabled, syncs / checkpoints / exports of the adapter only (:mod:`rft_plugin_verl.lora`).

Several ranks (``trainer.ranks > 1``, :mod:`rft_plugin_verl.worker_group`): this process
is veRL's driver; veRL's single controller (``RayWorkerGroup`` on a ``RayResourcePool``
over one placement group of a bundle per rank, placed as the native trainer's ranks) starts
one fused worker per rank holding its actor / reference / critic, with rft's CPU shim and
a gloo group in each rank on a CPU. :attr:`actor_worker`, :attr:`ref_worker` and
:attr:`critic_worker` are then worker groups with the same registered methods: veRL splits
each batch over the data-parallel ranks and gathers the outputs; weights, state and the
export are gathered by the ranks and handed over by rank 0 (``rft_*`` methods); a rank that
fails or dies is one :class:`RftError` line naming it. Tested on CPU (2 ranks equal 1 rank
within 1e-5); the GPU path (NCCL, GPU bundles) is untested.

``trainer_strategy: megatron`` (:mod:`rft_plugin_verl.megatron`): veRL's Megatron tree and
engines, weights and export from the bridge's ``get_per_tensor_param``, checkpoints in
veRL's layout only — written with care, untested (GPU only: it cannot run on a CPU).

LoRA with several ranks: every rank reads the initial adapter while it builds (the
folder must be visible to every rank: one node, or a shared file system), the reference is
the actor group with its adapter disabled, and the adapter, the merged weights, the state
and the export are gathered by the ranks (``rft_*`` methods given
:class:`rft_plugin_verl.engine_state.LoraActor`).

Not implemented: LoRA with Megatron; :meth:`VerlTrainer.check_config`
refuses what it cannot run.
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from rft.adapter import AdapterWeights
from rft.config.plan import TrainerPlan
from rft.config.schema import RftConfig
from rft.contracts import needs_entropy, needs_expected_entropy_signal
from rft.errors import RftError
from rft.experience import Batch, Experience, pad_batch
from rft.multimodal.processor import is_multimodal_model
from rft.trainer import lora as lora_ops
from rft.trainer.base import Trainer
from rft.trainer.fsdp import unique_state_names
from rft.trainer.loss import apply_kl_penalty, batch_advantages
from rft.trainer.metrics import data_metrics, rollout_probs_diff, timed
from rft.trainer.rollout_correction import CorrectionSpec, correct, engine_log_prob, spec_of
from rft.trainer.rollout_prep import report_first_step

from rft_plugin_verl import checkpoint, cpu_platform, environment, megatron
from rft_plugin_verl import lora as verl_lora
from rft_plugin_verl.batch import check_experiences, response_tensor, to_tensordict
from rft_plugin_verl.config import VerlConfig, build_verl_config
from rft_plugin_verl.engine_state import (
    LoraActor,
    engine_state,
    full_model_state,
    load_engine_state,
    load_lora_state,
    lora_export,
    lora_named_weights,
    lora_state,
)
from rft_plugin_verl.entropy import SIGNAL_KEY, expected_signal_as_sum_pi_squared
from rft_plugin_verl.losses import ActorLoss, CriticLoss
from rft_plugin_verl.packed_engine import prefix_sharing_flag
from rft_plugin_verl.vision import VisionRows

STATE_FORMAT = "rft-verl"
"""``state_dict()["format"]``: a state written by this trainer."""

ENGINE_METRICS = ("grad_norm", "lr", "loss")
"""veRL engine metrics reported under ``actor/`` / ``critic/``."""


class VerlTrainer(Trainer):
    """rft's trainer interface over veRL's workers (see the module docstring)."""

    supports_lora = True
    """``model.lora_configs``: veRL's peft actor (:mod:`rft_plugin_verl.lora`)."""

    @classmethod
    def check_config(cls, config: RftConfig) -> tuple[list[str], list[str]]:
        """veRL installed and compatible (:mod:`rft_plugin_verl.environment`), the veRL
        config buildable from ``config`` (:mod:`rft_plugin_verl.config`: unknown or
        rft-owned ``trainer_config`` keys, strategies this machine cannot run, batch sizes the
        ranks do not divide)."""
        missing = environment.problems()
        if missing:
            return [f"trainer.trainer_type: {line}" for line in missing], []
        c = config
        if not c.buffer.train_batch_size or not c.model.model_path:
            return [], []  # reported by the core's checks
        settings = build_verl_config(model=c.model, algorithm=c.algorithm, trainer=c.trainer,
                                     train_batch_size=int(c.buffer.train_batch_size),
                                     total_steps=c.trainer.total_steps, cpu=_cpu_cluster(c))
        return list(settings.problems), settings.warnings

    def __init__(self, plan: TrainerPlan) -> None:
        super().__init__(plan)
        missing = environment.problems()
        if missing:
            raise RftError(f"trainer.trainer_type: {missing[0]}")
        self.cpu = cpu_platform.needed()
        if self._ranks() > 1:  # the ranks' devices, not this driver's
            from rft_plugin_verl.worker_group import ranks_use_gpus

            self.cpu = not ranks_use_gpus()
        settings = build_verl_config(model=plan.model, algorithm=plan.algorithm,
                                     trainer=plan.trainer,
                                     train_batch_size=plan.train_batch_size,
                                     total_steps=plan.total_steps, cpu=self.cpu)
        if settings.problems:
            raise RftError(settings.problems[0])
        self.settings: VerlConfig = settings
        advantage = plan.loss.advantage
        if (settings.strategy == megatron.STRATEGY and advantage is not None
                and needs_expected_entropy_signal(advantage.implementation)):
            raise RftError(f"algorithm.advantage_fn: {plan.algorithm.advantage_fn!r} needs the "
                           "policy's expected entropy signals, which veRL's Megatron engine "
                           "does not compute (use trainer_strategy: fsdp / fsdp2)")
        self.preset = plan.preset
        self.fns = plan.loss
        self.correction: CorrectionSpec = spec_of(plan.algorithm.rollout_correction)
        """``algorithm.rollout_correction`` parsed (:mod:`rft.trainer.rollout_correction`)."""
        if self.cpu:
            cpu_platform.activate()
        self.groups: Any = None
        """With ``trainer.ranks > 1``: the ranks' worker groups
        (:class:`rft_plugin_verl.worker_group.VerlGroups`); ``None``: one rank here."""
        self._own_group = _open_process_group(self.cpu) if self._ranks() == 1 else False
        scale = float(plan.model.max_response_tokens) if plan.model.max_response_tokens else None
        self.loss_scale_factor = scale
        self.temperature = plan.model.temperature if plan.model.temperature > 0 else 1.0
        self.prefix_sharing: str = plan.trainer.prefix_sharing
        """``trainer.prefix_sharing``: ``auto`` packs shared prefixes in veRL's forward on rft's
        CPU engines (:mod:`rft_plugin_verl.packed_engine`)."""
        self.critic_warmup = int(settings.get("trainer.critic_warmup", 0) or 0)
        self.vision = (VisionRows(str(plan.model.model_path))
                       if is_multimodal_model(str(plan.model.model_path)) else None)
        """A vision-language actor: each batch carries its rows' vision tensors and 3-D
        positions (:mod:`rft_plugin_verl.vision`)."""
        self.lora = lora_ops.lora_of(plan.model)
        """``model.lora_configs[0]``: veRL's actor trains that adapter (its reference is the
        actor with the adapter disabled, syncs and checkpoints hold the adapter only)."""

        if self._ranks() > 1:
            self._start_ranks(scale)
        else:
            self._start_in_process(scale)
        facts = (self._rank0(self.actor_worker.rft_model_facts()) if self.groups is not None
                 else _model_facts(self.actor_engine.model_config.hf_config))
        self.pad_token_id: int = facts.pad_token_id
        self.vocab_size: int | None = facts.vocab_size
        self._dropout = facts.dropout
        self._checked_first_step = False
        """Whether the first step's engine / trainer log-prob check has been reported."""

    def _start_ranks(self, scale: float | None) -> None:
        """``trainer.ranks`` veRL ranks on rft's Ray placement
        (:mod:`rft_plugin_verl.worker_group`): the worker groups become
        :attr:`actor_worker` / :attr:`ref_worker` / :attr:`critic_worker`."""
        from rft_plugin_verl import worker_group as wg

        plan, settings = self.plan, self.settings
        tree = settings.tree
        actor_tree = copy.deepcopy(tree).actor_rollout_ref
        roles: dict[str, tuple[type, tuple[Any, ...], dict[str, Any]]] = {
            "actor": (wg.ActorWorker, (actor_tree,), {"role": "actor"})}
        needs_ref = self.preset.use_reference or self.fns.needs_ref
        if needs_ref and self.lora is None:  # LoRA: the actor with its adapter disabled
            roles["ref"] = (wg.ActorWorker, (copy.deepcopy(tree).actor_rollout_ref,),
                            {"role": "ref"})
        if self.preset.use_critic:
            roles["critic"] = (wg.CriticWorker, (_critic_config(tree),), {})
        timeout = float(plan.trainer.rank_timeout or wg.DEFAULT_TIMEOUT_S)
        with quiet_verl(), verl_lora.initial_adapter(plan.model, self.lora, actor_tree):
            self.groups = wg.build(name=plan.trainer.name, ranks=self._ranks(), cpu=self.cpu,
                                   timeout_s=timeout, roles=roles)
            try:
                self.actor_worker = self.groups.actor
                self.actor_worker.init_model()  # the ranks read the initial adapter here
                self.actor_worker.set_loss_fn(ActorLoss(self.fns, scale))
                self.ref_worker = self.groups.ref
                if self.ref_worker is not None:
                    self.ref_worker.init_model()
                elif self.lora is not None and needs_ref:  # ref_in_actor, as with one rank
                    self.ref_worker = verl_lora.AdapterDisabledRef(self.actor_worker)
                self.critic_worker = self.groups.critic
                if self.critic_worker is not None:
                    self.critic_worker.reset()
                    self.critic_worker.set_loss_fn(CriticLoss(
                        self.fns.loss_agg_mode,
                        float(settings.get("critic.cliprange_value", 0.5)), scale))
            except BaseException:
                self.groups.close()
                raise
        wg.announce(self.groups.line)

    def _rank0(self, results: Any) -> Any:
        """Rank 0's result of a registered ``rft_*`` method called on a worker group."""
        return results[0]

    def _start_in_process(self, scale: float | None) -> None:
        """veRL's workers in this process, one rank."""
        plan, settings = self.plan, self.settings
        with quiet_verl():
            from verl.workers.engine_workers import ActorRolloutRefWorker

            tree = settings.tree
            actor_tree = copy.deepcopy(tree).actor_rollout_ref
            with verl_lora.initial_adapter(plan.model, self.lora, actor_tree):
                self.actor_worker = ActorRolloutRefWorker(actor_tree, role="actor")
                self.actor_worker.init_model()
            self.actor_worker.set_loss_fn(ActorLoss(self.fns, scale))
            self.ref_worker = None
            if self.lora is not None and (self.preset.use_reference or self.fns.needs_ref):
                self.ref_worker = verl_lora.AdapterDisabledRef(self.actor_worker)  # ref_in_actor
            elif self.preset.use_reference or self.fns.needs_ref:
                self.ref_worker = ActorRolloutRefWorker(copy.deepcopy(tree).actor_rollout_ref,
                                                        role="ref")
                self.ref_worker.init_model()
            self.critic_worker = None
            if self.preset.use_critic:
                self.critic_worker = _critic_worker(tree)
                self.critic_worker.set_loss_fn(CriticLoss(
                    self.fns.loss_agg_mode, float(settings.get("critic.cliprange_value", 0.5)),
                    scale))

    # ---- what the workers hold ---------------------------------------------------------

    @property
    def actor_engine(self) -> Any:
        """veRL's training engine of the actor (``FSDPEngineWithLMHead`` …), in this
        process (one rank only)."""
        if self.groups is not None:
            raise RftError("trainer: with trainer.ranks > 1 the engines live in the veRL rank "
                           "processes (use the worker groups' registered methods)")
        return self.actor_worker.actor.engine

    @property
    def critic_engine(self) -> Any:
        """veRL's training engine of the critic (``None`` without a critic), in this
        process (one rank only)."""
        if self.critic_worker is None:
            return None
        if self.groups is not None:
            raise RftError("trainer: with trainer.ranks > 1 the engines live in the veRL rank "
                           "processes (use the worker groups' registered methods)")
        return self.critic_worker.engine

    # ---- Trainer interface ---------------------------------------------------------------

    def train_step(self, experiences: Sequence[Experience]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        with timed(metrics, "step"):
            if not experiences:
                raise RftError("trainer: train_step got no experiences")
            rows = self.preset.batch_layout.arrange(list(experiences))
            if len(rows) % self._ranks():
                raise RftError(f"trainer.ranks: veRL splits each batch evenly over its "
                               f"{self._ranks()} ranks; this step has {len(rows)} experiences")
            check_experiences(rows, self.vocab_size)
            batch = pad_batch(rows, self.pad_token_id)
            extra: dict[str, torch.Tensor] = {}
            if any("is_expert" in e.info for e in batch.experiences):  # mix: expert rows
                extra["is_expert"] = torch.tensor([bool(e.info.get("is_expert"))
                                                   for e in batch.experiences])  # (B,)
            if batch.teacher_log_prob is not None:  # a distillation workflow's teacher
                extra["teacher_log_prob"] = batch.teacher_log_prob  # (B, T)
            if self.preset.experience_format == "rollout":
                self._prepare_rollout(batch, extra, metrics)
                if self.critic_worker is not None:
                    with timed(metrics, "update_critic"):
                        metrics.update(self._update_critic(batch, extra))
            elif self.ref_worker is not None:
                with timed(metrics, "ref"):
                    extra["ref_log_prob"] = self._log_probs(self.ref_worker, batch, ref=True)
            if self.global_steps >= self.critic_warmup:
                with timed(metrics, "update_actor"):
                    metrics.update(self._update_actor(batch, extra))
        self.global_steps += 1
        return metrics

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self.groups is not None:  # gathered by the ranks, handed over by rank 0
            yield from self._rank0(self.actor_worker.rft_weights(self._lora_actor))
            return
        if self.settings.strategy == megatron.STRATEGY:  # the bridge's HF export (untested)
            params, _ = self.actor_engine.get_per_tensor_param()
            yield from ((name, tensor.detach()) for name, tensor in params)
            return
        keep = set(unique_state_names(self.actor_engine.module))  # tied weights once
        if self._lora_actor is not None:  # Hugging Face names: the adapter merged in
            yield from lora_named_weights(self.actor_engine, self._lora_actor)
            return
        params, _ = self.actor_engine.get_per_tensor_param()
        for name, tensor in params:
            if name in keep:
                yield name, tensor.detach()

    def adapter_weights(self) -> AdapterWeights | None:
        """With LoRA: the adapter (veRL's adapter-only ``get_per_tensor_param``) for the
        synchronizer; ``None`` without."""
        if self._lora_actor is None:
            return None
        if self.groups is not None:  # gathered by the ranks, handed over by rank 0
            return self._rank0(self.actor_worker.rft_adapter_weights(self._lora_actor))
        return verl_lora.adapter_weights(self.actor_engine,
                                         self._lora_actor.spec(self.actor_engine))

    @property
    def _lora_actor(self) -> LoraActor | None:
        """The LoRA actor's facts (``None`` without LoRA)."""
        if self.lora is None:
            return None
        return LoraActor(self.lora, self.plan.model.model_path)

    def state_dict(self) -> dict[str, Any]:
        if self.settings.strategy == megatron.STRATEGY:
            raise RftError("trainer.trainer_strategy: with 'megatron' the trainer's state is "
                           "veRL's checkpoint layout (write_checkpoint); no in-memory state_dict")
        state: dict[str, Any] = {"format": STATE_FORMAT, "global_steps": self.global_steps}
        if self.groups is not None:  # gathered by the ranks, handed over by rank 0
            state.update(self._rank0(self.actor_worker.rft_state("actor", "",
                                                                 self._lora_actor)))
            if self.critic_worker is not None:
                state.update(self._rank0(self.critic_worker.rft_state("critic", "critic_")))
            return state
        if self._lora_actor is not None:  # the adapter only, and its spec
            state.update(lora_state(self.actor_engine, self._lora_actor))
        else:
            state.update(engine_state(self.actor_engine, "actor", ""))
        if self.critic_engine is not None:
            state.update(engine_state(self.critic_engine, "critic", "critic_"))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("format") != STATE_FORMAT:
            raise RftError("trainer checkpoint: not written by trainer_type 'verl' (resume with "
                           "the trainer that wrote it)")
        if self.groups is not None:  # every rank loads the full state, keeps its shards
            import ray

            shared = ray.put(state)
            self.actor_worker.rft_load_state(shared, "actor", "", self.lora is not None)
            if self.critic_worker is not None:
                self.critic_worker.rft_load_state(shared, "critic", "critic_")
            self.global_steps = int(state["global_steps"])
            return
        if self.lora is not None:
            load_lora_state(self.actor_engine, state)
        else:
            load_engine_state(self.actor_engine, state, "actor", "")
        if self.critic_engine is not None:
            load_engine_state(self.critic_engine, state, "critic", "critic_")
        self.global_steps = int(state["global_steps"])

    def write_checkpoint(self, directory: str) -> dict[str, Any]:
        """veRL's layout: the actor's (and the critic's) workers write ``actor/``
        (``critic/``) under ``directory`` with their own ``save_checkpoint``; ``trainer.pt``
        gets the marker listing those files (:func:`rft_plugin_verl.checkpoint.save`). The
        reference model is not saved."""
        return checkpoint.save(directory, self._checkpointed_workers(),
                               global_steps=self.global_steps, ranks=self._ranks())

    def read_checkpoint(self, directory: str, trainer_state: dict[str, Any]) -> None:
        """The workers read ``actor/`` (``critic/``) back with veRL's ``load_checkpoint``
        after the marker's file list is checked (:func:`rft_plugin_verl.checkpoint.load`);
        a ``trainer.pt`` holding a whole :meth:`state_dict` (this trainer's checkpoints
        before veRL's layout) is loaded as such."""
        if isinstance(trainer_state, dict) and trainer_state.get("format") == STATE_FORMAT:
            self.load_state_dict(trainer_state)
            return
        self.global_steps = checkpoint.load(directory, trainer_state,
                                            self._checkpointed_workers(), ranks=self._ranks())

    def _checkpointed_workers(self) -> dict[str, Any]:
        """Role (veRL's sub-folder name) → the worker (group) that saves it."""
        workers = {"actor": self.actor_worker}
        if self.critic_worker is not None:
            workers["critic"] = self.critic_worker
        return workers

    def _ranks(self) -> int:
        """Data-parallel ranks of the workers (veRL's file names hold the world size)."""
        return int(self.plan.trainer.ranks or 1)

    def save_pretrained(self, path: str) -> None:
        if self.groups is not None:  # gathered by the ranks, written by rank 0
            self.actor_worker.rft_save_pretrained(path, self._lora_actor,
                                                  self.plan.trainer.save_hf_merged)
            return
        if self.settings.strategy == megatron.STRATEGY:  # the bridge's HF export (untested)
            params, _ = self.actor_engine.get_per_tensor_param()
            megatron.save_hf_folder(self.actor_engine.model_config.hf_config, params, path)
            return
        module = self.actor_engine.module
        if self._lora_actor is not None:  # the adapter (peft's format); merged/ when asked
            lora_export(self.actor_engine, self._lora_actor, path,
                         merged=self.plan.trainer.save_hf_merged)
            return
        full = dict(full_model_state(module))
        module.save_pretrained(path, state_dict=full)

    def close(self) -> None:
        self.actor_worker = self.ref_worker = self.critic_worker = None
        if self.groups is not None:
            self.groups.close()
            self.groups = None
        if self._own_group:
            _release_process_group()
            self._own_group = False

    # ---- one step ------------------------------------------------------------------------

    def _mini_batch_rows(self, rows: int) -> int:
        n = int(self.plan.algorithm.repeat_times or 1)
        mini = int(self.settings.get("actor_rollout_ref.actor.ppo_mini_batch_size"))
        return min(mini * n, rows)

    def _updates(self, rows: int) -> int:
        epochs = int(self.settings.get("actor_rollout_ref.actor.ppo_epochs", 1))
        return (rows // self._mini_batch_rows(rows)) * epochs

    def _data(self, batch: Batch, extra: dict[str, torch.Tensor], **meta: Any) -> Any:
        from verl.utils import tensordict_utils as tu

        data = to_tensordict(batch, extra, self.vision)
        tu.assign_non_tensor(data, temperature=self.temperature,
                             **prefix_sharing_flag(self.prefix_sharing), **meta)
        return data

    def _log_probs(self, worker: Any, batch: Batch, *, ref: bool = False) -> torch.Tensor:
        """``(B, T)`` log-probs of the actor (or the reference model) over the batch."""
        from verl.utils import tensordict_utils as tu

        data = self._data(batch, {}, calculate_entropy=False, compute_loss=False)
        output = worker.compute_ref_log_prob(data) if ref else worker.compute_log_prob(data)
        return response_tensor(tu.get(output, "log_probs"), data)  # (B, T)

    def _values(self, batch: Batch) -> torch.Tensor:
        from verl.utils import tensordict_utils as tu

        assert self.critic_worker is not None
        data = self._data(batch, {}, compute_loss=False)
        output = self.critic_worker.infer_batch(data)
        values = response_tensor(tu.get(output, "values"), data)  # (B, T)
        return values * batch.response_mask

    def _policy_pass(self, batch: Batch, *, entropy: bool, signal: bool
                     ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """veRL's ``compute_log_prob`` of the actor: ``(B, T)`` log-probs, with ``entropy``
        also the ``(B, T)`` entropies, with ``signal`` also the ``(B, T)`` expected entropy
        signals (both from the same pass, :mod:`rft_plugin_verl.entropy`)."""
        from verl.utils import tensordict_utils as tu

        data = self._data(batch, {}, calculate_entropy=entropy or signal,
                          calculate_sum_pi_squared=signal, compute_loss=False)
        if not signal:
            output = self.actor_worker.compute_log_prob(data)
        elif self.groups is not None:  # the ranks run the engine: the swap happens there
            output = self.actor_worker.rft_compute_log_prob_with_signal(data)
        else:
            with expected_signal_as_sum_pi_squared():
                output = self.actor_worker.compute_log_prob(data)
        log_probs = response_tensor(tu.get(output, "log_probs"), data)  # (B, T)
        entropies = (response_tensor(tu.get(output, "entropy"), data)
                     if entropy or signal else None)  # (B, T)
        signals = (response_tensor(tu.get(output, SIGNAL_KEY), data)
                   if signal else None)  # (B, T)
        return log_probs, entropies, signals

    def _first_step_check(self, metrics: dict[str, float]) -> None:
        """Once per trainer, at the first step with the engine's log-probs compared to the
        trainer's: the torch trainer's line (:func:`rft.trainer.rollout_prep.
        report_first_step`)."""
        if self._checked_first_step:
            return
        self._checked_first_step = True
        report_first_step(metrics)

    def _prepare_rollout(self, batch: Batch, extra: dict[str, torch.Tensor],
                         metrics: dict[str, float]) -> None:
        """Old / reference log-probs, values, KL penalty, off-policy correction, the
        policy's entropies for an advantage fn that declares it, advantages and data
        metrics (the native trainer's order and rules, :mod:`rft.trainer.rollout_prep`)."""
        mask = batch.response_mask  # (B, T)
        rows = batch.input_ids.shape[0]
        bypass = self.plan.algorithm.rollout_correction.bypass_mode
        behaviour = engine_log_prob(self.correction, bypass, batch.rollout_log_prob)  # (B, T)
        selected = self.plan.loss.advantage
        signal = selected is not None and needs_expected_entropy_signal(
            selected.implementation)
        with_entropy = signal or (selected is not None
                                  and needs_entropy(selected.implementation))
        policy_log_prob = entropy = expected_signal = None
        needs_old = (self.correction.active or self._updates(rows) > 1
                     or self.fns.uses_kl_penalty or self._dropout)
        # one update per step needs no old log-probs: the run's first step computes them for
        # the engine check alone (as the torch trainer; nothing else uses them unless the
        # advantage fn wants this pass's entropies)
        check_only = batch.rollout_log_prob is not None and self.global_steps == 0
        if bypass and behaviour is not None:  # old_log_prob := μ, no proximal forward pass
            extra["old_log_probs"] = behaviour
        elif needs_old or check_only:
            with timed(metrics, "old_log_prob"):  # one pass, with the entropies if asked
                old, entropy, expected_signal = self._policy_pass(
                    batch, entropy=with_entropy, signal=signal)
            if needs_old:
                extra["old_log_probs"] = old
            if with_entropy:
                policy_log_prob = old
            if batch.rollout_log_prob is not None:  # the engine's: do they match ours?
                metrics.update(rollout_probs_diff(batch.rollout_log_prob, old, mask))
                self._first_step_check(metrics)
        if with_entropy and entropy is None:
            with timed(metrics, "entropy"):
                policy_log_prob, entropy, expected_signal = self._policy_pass(
                    batch, entropy=True, signal=signal)
        if self.ref_worker is not None:
            with timed(metrics, "ref"):
                extra["ref_log_prob"] = self._log_probs(self.ref_worker, batch, ref=True)
        values = None
        if self.critic_worker is not None:
            with timed(metrics, "values"):
                values = extra["values"] = self._values(batch)
        scores = batch.token_level_rewards  # (B, T)
        rewards = scores
        if self.fns.uses_kl_penalty:
            assert self.fns.kl_penalty is not None
            rewards, kl_metrics = apply_kl_penalty(scores, extra["old_log_probs"],
                                                   extra["ref_log_prob"], mask,
                                                   self.fns.kl_penalty)
            metrics.update(kl_metrics)
        corrected = mask  # (B, T) the response mask without rejected tokens
        if self.correction.active:  # veRL's order: after the KL penalty, before the advantages
            assert behaviour is not None
            with timed(metrics, "rollout_corr"):
                result = correct(extra["old_log_probs"], behaviour.to(mask.dtype), mask,
                                 self.correction)
            if result.weights is not None:  # the actor loss hook: pg_loss · w per token
                extra["rollout_is_weights"] = result.weights.to(torch.float32)  # (B, T)
            metrics.update(result.metrics)
            corrected = result.response_mask
        with timed(metrics, "adv"):
            advantages, returns, kept = batch_advantages(
                self.plan, batch, rewards, corrected, values, entropy,
                old_log_prob=policy_log_prob, expected_entropy_signal=expected_signal)
        if kept is not mask:  # rejected / dropped tokens leave the loss and veRL's counts
            extra["response_mask"] = kept
        extra["advantages"], extra["returns"] = advantages, returns
        response_lengths = batch.attention_mask[:, batch.prompt_width:].sum(-1)  # (B,)
        metrics.update(data_metrics(
            token_level_scores=scores, token_level_rewards=rewards, advantages=advantages,
            returns=returns, response_mask=mask, response_lengths=response_lengths,
            prompt_lengths=batch.attention_mask[:, : batch.prompt_width].sum(-1),
            max_response_length=self.plan.model.max_response_tokens or mask.shape[1],
            max_prompt_length=self.plan.model.max_prompt_tokens or batch.prompt_width,
            values=values))

    def _train_meta(self, section: str, rows: int) -> dict[str, Any]:
        """veRL's ``train_mini_batch`` settings (``RayPPOTrainer._update_actor``)."""
        mini = self._mini_batch_rows(rows)
        return {"global_batch_size": mini, "mini_batch_size": mini,
                "epochs": int(self.settings.get(f"{section}.ppo_epochs", 1)),
                "seed": int(self.settings.get(f"{section}.data_loader_seed", 42)),
                "dataloader_kwargs": {"shuffle": bool(self.settings.get(f"{section}.shuffle",
                                                                        False))}}

    def _update_actor(self, batch: Batch, extra: dict[str, torch.Tensor]) -> dict[str, float]:
        from verl.utils import tensordict_utils as tu

        rows = batch.input_ids.shape[0]
        data = self._data(batch, extra, calculate_entropy=True, compute_loss=True,
                          global_step=self.global_steps + 1,  # the step being taken
                          **self._train_meta("actor_rollout_ref.actor", rows))
        output = self.actor_worker.update_actor(data)
        return _reduce(tu.get(output, "metrics"), "actor")

    def _update_critic(self, batch: Batch, extra: dict[str, torch.Tensor]) -> dict[str, float]:
        from verl.utils import tensordict_utils as tu

        assert self.critic_worker is not None
        rows = batch.input_ids.shape[0]
        data = self._data(batch, extra, **self._train_meta("critic", rows))
        output = self.critic_worker.train_mini_batch(data)
        return _reduce(tu.get(output, "metrics"), "critic")


# ---- helpers ---------------------------------------------------------------------------


def _cpu_cluster(config: RftConfig) -> bool:
    """Whether the run's trainer has no CUDA device: ``cluster.gpu_per_node: 0``, or unset
    on a machine without one."""
    gpus = config.cluster.gpu_per_node
    return cpu_platform.needed() if gpus is None else gpus == 0


QUIET = (r"hydra\.utils\.instantiate\(\) resolved _target_",  # once per veRL config object
         r"\w+ engine is not available")  # veRL's optional engines (torchtitan, megatron, …)
"""Warnings veRL's worker start-up repeats at every build; silenced there."""


@contextlib.contextmanager
def quiet_verl() -> Iterator[None]:
    """Building veRL's workers without the :data:`QUIET` warnings."""
    with warnings.catch_warnings():
        for message in QUIET:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


_GROUP_USERS: list[object] = []
"""Trainers of this process using the process group :func:`_open_process_group` opened
(it is destroyed when the last one closes)."""


def _open_process_group(cpu: bool) -> bool:
    """A one-rank process group for veRL's workers (gloo on CPU, veRL's
    ``cpu:gloo,cuda:nccl`` on GPUs) and the environment veRL's ``Worker`` reads, unless a
    group is open already. Returns whether the trainer uses a group opened here (it then
    releases it on :meth:`VerlTrainer.close`)."""
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise RftError("trainer.trainer_type: the verl trainer runs one rank, but this "
                           f"process is in a group of {dist.get_world_size()}")
        if not _GROUP_USERS:
            return False  # opened by someone else: theirs to close
    else:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                           ("LOCAL_WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                           ("MASTER_PORT", str(port))):
            os.environ.setdefault(key, value)
        backend = "gloo" if cpu else "cpu:gloo,cuda:nccl"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    _GROUP_USERS.append(object())
    return True


def _release_process_group() -> None:
    import torch.distributed as dist

    _GROUP_USERS.pop()
    if not _GROUP_USERS and dist.is_initialized():
        dist.destroy_process_group()


def _critic_config(tree: Any) -> Any:
    """veRL's ``TrainingWorkerConfig`` of the critic (the value-model engine), as
    ``RayPPOTrainer.init_workers`` builds it."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine_workers import TrainingWorkerConfig

    critic = omega_conf_to_dataclass(copy.deepcopy(tree).critic)
    engine = critic.engine
    engine.infer_max_token_len_per_gpu = critic.ppo_infer_max_token_len_per_gpu
    engine.max_token_len_per_gpu = critic.ppo_max_token_len_per_gpu
    return TrainingWorkerConfig(
        model_type="value_model", model_config=critic.model, engine_config=engine,
        optimizer_config=critic.optim, checkpoint_config=critic.checkpoint)


def _critic_worker(tree: Any) -> Any:
    """veRL's critic in this process: a ``TrainingWorker`` on :func:`_critic_config`."""
    from verl.workers.engine_workers import TrainingWorker

    worker = TrainingWorker(config=_critic_config(tree))
    worker.reset()
    return worker


def _model_facts(hf_config: Any) -> Any:
    """Pad token, vocabulary size, dropout of the actor's model config
    (:func:`rft_plugin_verl.worker_group.model_facts`)."""
    from rft_plugin_verl.worker_group import model_facts

    return model_facts(hf_config)



def _reduce(metrics: dict[str, Any], role: str) -> dict[str, float]:
    """veRL's per-mini-batch metric lists → one value each (their mean, veRL's
    ``reduce_metrics``); the engine's ``grad_norm`` / ``lr`` / ``loss`` named
    ``<role>/…``, ``mfu`` ``perf/mfu/<role>``."""
    out: dict[str, float] = {}
    for name, values in metrics.items():
        items = values if isinstance(values, list) else [values]
        numbers = [float(v) for v in items if v is not None]
        if not numbers:
            continue
        value = sum(numbers) / len(numbers)
        if name in ENGINE_METRICS:
            out[f"{role}/{name}"] = value
        elif name == "mfu":
            out[f"perf/mfu/{role}"] = value
        else:
            out[name] = value
    return out
