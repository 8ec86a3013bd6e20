"""What the explorer and trainer actors run.

Each actor gets the stage's :class:`~rft.config.plan.RunPlan` (it pickles: plugin
implementations travel by reference and are imported in the actor's process); nothing is
validated again there.

A sharded trainer (``trainer.ranks > 1``): the trainer actor holds a
:class:`~rft.trainer.ranks.RankedTrainer` (no model; its ranks are Ray actors of their
own) and

- ``sync_method: nccl``: trainer *rank 0* is rank 0 of the weight-broadcast group (its
  node's address hosts the rendezvous). A hand-out keeps each rank's shards in host
  memory (:mod:`rft.trainer.weight_gather`); the broadcast then assembles one bucket at a
  time on rank 0 — each tensor's rows received straight into the bucket — and sends it,
  so rank 0 holds one bucket beyond its shards;
- ``memory``: the whole weights gathered tensor by tensor on rank 0;
- ``checkpoint`` and every save: sharded checkpoints (``torch.distributed.checkpoint``,
  :mod:`rft.trainer.sharded_checkpoint`) inside the usual atomic checkpoint folder, the
  ``hf/`` export gathered on rank 0.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Any

import torch

from rft.adapter import AdapterWeights
from rft.buffer.storage import explore_step_key
from rft.chat_template import load_tokenizer
from rft.checkpoint import Checkpoint, load_sync_weights, rng_state, set_rng_state
from rft.config.plan import RunPlan
from rft.device_check import check_actor_device
from rft.distributed.actor_env import set_explorer_env
from rft.distributed.buffer_actor import RemoteStorage
from rft.distributed.engine_pool import EnginePool, auxiliary_pools
from rft.distributed.placement import actor_gpus
from rft.distributed.weight_broadcast import (
    BUCKET_BYTES,
    Broadcast,
    BroadcastGroup,
    EngineEnd,
    GroupAddress,
    TensorSpec,
    buckets,
    engine_dtype,
    host_rendezvous,
    in_dtype,
    layout,
    pack,
    spec_of,
)
from rft.errors import RftError
from rft.host_memory import retain_freed_memory
from rft.engines.engine import InferenceEngine, load_weights
from rft.engines.engine_factory import build_engine, default_sampling
from rft.engines.partial_rollout import PartialRollouts, enable_partial_rollouts
from rft.rollout.explorer import Explorer
from rft.rollout.model_wrapper import ModelWrapper
from rft.modes.builders import (
    build_trainer,
    held_state,
    quiet_libraries,
    restore_held,
    resume_checkpoint,
    resumed_state,
    save_stage_checkpoint,
)
from rft.modes.run_state import RunState
from rft.monitor.preview import Previewer
from rft.monitor.rollout_record import recorder_of
from rft.tensor_wire import NamedTensors
from rft.trainer.ranks import RankedTrainer, TrainerRank

log = logging.getLogger("rft.distributed")

Weights = list[tuple[str, torch.Tensor]] | AdapterWeights | str | Broadcast
"""What the trainer hands to the explorer: its weights (HF names, CPU; ``sync_method:
memory``, through the object store) or, with LoRA, its adapter alone, the path of the
checkpoint holding them (``sync_method: checkpoint``), or what to receive from the
trainer's broadcast (``sync_method: nccl``, :mod:`rft.distributed.weight_broadcast`)."""


@dataclass
class ResumePoint:
    """The checkpoint a trainer actor resumed from."""

    step: int
    path: str
    state: RunState
    """Its ``state.json``."""
    buffer: Any
    """The experience buffer's state it kept (``buffer.pt``; ``None``: none)."""
    skipped: list[str]
    """Newer checkpoints that could not be read (moved aside), one line each."""


class ExplorerService:
    """The explorer actor: rollout engine, workflows, selectors; writes to the buffer."""

    def __init__(self, plan: RunPlan, buffer: Any) -> None:
        quiet_libraries()
        retain_freed_memory()
        config = plan.config
        set_explorer_env(config)  # not Ray's runtime_env: its agent logs the values
        check_actor_device(f"explorer actor {config.explorer.name!r}")
        engine_cls = plan.rollout_model.engine.implementation
        rm = config.explorer.rollout_model
        if rm.engine_num > 1:  # replicas as actors of their own, used as one engine
            self.engine: InferenceEngine = EnginePool(config, engine_cls, rm.engine_num,
                                                      actor_gpus(config).rollout_replica)
        else:
            self.engine = build_engine(config, engine_cls)
        self.storage = RemoteStorage(plan.experience_buffer.name, buffer)
        # synchronizer.partial_rollout: syncs (sync_partial, a thread of their own) interrupt
        # the engine's calls in flight, which resume with the new weights
        self.partial: PartialRollouts | None = (
            enable_partial_rollouts(self.engine, sync_timeout=config.synchronizer.sync_timeout)
            if config.synchronizer.partial_rollout else None)
        self._sync_metrics: dict[str, float] = {}
        """Metrics of the partial syncs since the last explore step (its metrics get them)."""
        # auxiliary models: actors with GPUs of their own (this actor's are the engine's)
        self.explorer = Explorer(plan, ModelWrapper(self.engine, default_sampling(config)),
                                 self.storage, auxiliary_pools(config, own_actors=True))
        # sync_method nccl: this process receives as rank 1, or each replica of a pool
        self.broadcast_end: EngineEnd | None = None
        self.weight_receiver: EngineEnd | EnginePool
        if isinstance(self.engine, EnginePool):
            self.weight_receiver = self.engine
        else:
            self.broadcast_end = self.weight_receiver = EngineEnd(self.engine)
        self.job_dir = plan.job_dir  # the run its writes belong to (their keys)
        # the rollout record, written here where each explore step's samples are complete
        # (the trainer actor computes their advantages later: "computed by the trainer")
        self.recorder = recorder_of(config.monitor, plan.job_dir,
                                    lambda ids: self.engine.tokenizer.decode(ids))

    def weight_group_ranks(self) -> int:
        """Ranks this explorer's engines take in the broadcast group."""
        return self.weight_receiver.weight_group_ranks()

    def join_weight_group(self, address: GroupAddress) -> None:
        """``sync_method: nccl``: join the trainer's broadcast group as ranks 1 … N — this
        process, the engine's workers, or each replica's."""
        self.weight_receiver.join_weight_group(address, 1)

    def train_size(self) -> int:
        return self.explorer.train_size

    def sync(self, weights: Weights, version: int) -> float:
        """Load the trainer's weights as ``version``; return the seconds it took."""
        import time

        started = time.monotonic()
        if isinstance(weights, Broadcast):
            self.weight_receiver.receive_broadcast(weights, version)
            return time.monotonic() - started
        if isinstance(weights, str):  # a checkpoint: its adapter (LoRA) or weights
            loaded = load_sync_weights(Checkpoint(version, weights))
            weights = loaded if isinstance(loaded, AdapterWeights) else list(loaded.items())
        load_weights(self.engine, weights if isinstance(weights, AdapterWeights)
                     else iter(weights), version)
        return time.monotonic() - started

    def sync_partial(self, weights: Weights, version: int) -> float:
        """``synchronizer.partial_rollout``: load ``version`` now, beside a running explore
        step (this actor's sync thread): the engine's calls in flight are interrupted and
        resume with the new weights (:mod:`rft.engines.partial_rollout`); returns the
        seconds the calls were held. One line when the calls do not stop within
        ``synchronizer.sync_timeout`` (nothing loaded) or the engine fails to load."""
        assert self.partial is not None, "sync_partial needs synchronizer.partial_rollout"
        held = self.partial.sync(lambda: self._timed_sync(weights, version), version)
        self._sync_metrics["timing_s/partial_sync_hold"] = (
            self._sync_metrics.get("timing_s/partial_sync_hold", 0.0) + held)
        self._sync_metrics["sync/partial_syncs"] = (
            self._sync_metrics.get("sync/partial_syncs", 0.0) + 1)
        return held

    def _timed_sync(self, weights: Weights, version: int) -> None:
        self._sync_metrics["timing_s/update_weights"] = (
            self._sync_metrics.get("timing_s/update_weights", 0.0) + self.sync(weights, version))

    def explore_step(self, step: int, weights: Weights | None = None,
                     version: int | None = None) -> tuple[dict[str, float], RunState]:
        """Optionally sync first, then one explore step; its metrics and the explorer's state
        after it (what a checkpoint of this step records). Its writes are keyed ``explore
        step <step> of <job dir>``: a step redone after a crash does not write twice to a durable
        buffer."""
        metrics: dict[str, float] = {}
        if weights is not None and version is not None:
            metrics["timing_s/update_weights"] = self.sync(weights, version)
            if isinstance(weights, (AdapterWeights, list)):  # what crossed the object store
                metrics["sync/bytes"] = float(weights.nbytes if isinstance(weights, AdapterWeights)
                                              else sum(t.numel() * t.element_size()
                                                       for _, t in weights))
        with self.storage.idempotent_writes(explore_step_key(self.job_dir, step)):
            metrics.update(self.explorer.explore_step(step))
        if self.recorder is not None:
            self.recorder.record(step, self.explorer.last_step)
        if self.partial is not None:  # the syncs that landed during the step
            metrics.update(self.partial.metrics())
            for key, value in self._sync_metrics.items():
                metrics[key] = metrics.get(key, 0.0) + value
            self._sync_metrics = {}
        return metrics, RunState(step=step,
                                 selectors=[s.state_dict() for s in self.explorer.selectors],
                                 engine_seed=self.engine.seed_state(), explorer_rng=rng_state(),
                                 experiences_written=self.storage.written,
                                 carried_tasks=self.explorer.carried_state())

    def evaluate(self, weights: Weights | None = None, version: int | None = None
                 ) -> dict[str, float]:
        """Optionally sync first, then evaluate every eval taskset. The engine's seed
        sequence and the random generators are left as they were: the explore steps draw
        the same numbers whether or not an evaluation ran between them (a resumed run,
        restored from the state after a step, does not redo the evaluation after it).
        With partial rollouts the weights load as a mid-step sync does (calls in flight —
        a fully async run's carried-over tasks — are interrupted and resume): vLLM cannot
        reset its prefix cache under running requests."""
        if weights is not None and version is not None:
            if self.partial is not None:
                def load() -> None:
                    self.sync(weights, version)

                self.partial.sync(load, version)
            else:
                self.sync(weights, version)
        seed, generators = self.engine.seed_state(), rng_state()
        try:
            return self.explorer.evaluate()
        finally:
            self.engine.restore_seed(seed)
            set_rng_state(generators)

    def restore(self, state: RunState) -> None:
        """Go on after a checkpoint's explore step (``state``: its run state): task
        selectors, the count of experiences written, the engine's seed sequence and the
        random generators (last, so that nothing done here draws from them)."""
        for selector, selector_state in zip(self.explorer.selectors, state.selectors,
                                            strict=False):
            selector.load_state_dict(selector_state)
        self.storage.written = state.experiences_written
        self.explorer.restore_carried(state.carried_tasks)
        if state.engine_seed is not None:
            self.engine.restore_seed(state.engine_seed)
        if state.explorer_rng:
            set_rng_state(state.explorer_rng)

    def rewind_record(self, step: int) -> None:
        """The rollout record forgets the explore steps after ``step`` (the checkpoint the
        run goes on from; ``0``: a fresh start): they are redone."""
        if self.recorder is not None:
            self.recorder.rewind(step)

    def failed_tasks(self) -> list[str]:
        return list(self.explorer.failed_tasks)

    def close(self) -> None:
        self.explorer.close()
        if self.broadcast_end is not None:
            self.broadcast_end.close()
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()


class TrainerService:
    """The trainer actor: reads the buffer through the sample strategy, trains, hands out
    its weights and writes checkpoints."""

    def __init__(self, plan: RunPlan, buffer: Any, total_steps: int) -> None:
        quiet_libraries()
        retain_freed_memory()
        check_actor_device(f"trainer actor {plan.config.trainer.name!r}")
        self.plan = plan
        self.storage = RemoteStorage(plan.experience_buffer.name, buffer)
        self.trainer, self.strategy = build_trainer(plan, self.storage, total_steps)
        self.group: BroadcastGroup | None = None
        self._rendezvous: tuple[Any, GroupAddress] | None = None
        self._snapshots: dict[int, list[torch.Tensor]] = {}  # version → byte buckets
        self._snapshot_ready = threading.Condition()
        self.ranked: RankedTrainer | None = (self.trainer if isinstance(self.trainer,
                                                                        RankedTrainer) else None)
        self.previewer = (Previewer(lambda: load_tokenizer(plan.config))
                          if plan.config.trainer.enable_preview else None)
        self._previews: dict[int, list[dict[str, Any]]] = {}  # step → preview rows
        self._shard_specs: dict[int, tuple[Any, ...]] = {}  # ranked: version → spec

    def placement(self) -> str | None:
        """Where a sharded trainer's ranks run (one line); ``None``: this actor trains."""
        return self.ranked.placement() if self.ranked is not None else None

    def rank_pids(self) -> list[int]:
        """Process ids of the trainer's ranks (this actor's when it trains itself)."""
        import os

        return self.ranked.rank_pids() if self.ranked is not None else [os.getpid()]

    def train_step(self, step: int) -> dict[str, float]:
        """Sample one batch (waiting for the explorer) and learn from it. The batch is read
        as leases of ``step``, final once a checkpoint covers it."""
        self.storage.lease_reads(step)
        experiences, metrics = self.strategy.sample(step, self.trainer.global_steps)
        metrics.update(self.trainer.train_step(experiences))
        if self.previewer is not None:
            self._previews[step] = self.previewer.rows(experiences, step)
        return metrics

    def rollout_examples(self, step: int) -> list[dict[str, Any]]:
        """The rollout preview rows of train step ``step`` (``trainer.enable_preview``;
        taken once)."""
        return self._previews.pop(step, [])

    def weights(self) -> NamedTensors | AdapterWeights:
        """A CPU copy of the actor's weights (it goes to the object store as raw buffers);
        with LoRA, of its adapter alone."""
        adapter = self.trainer.adapter_weights()
        if adapter is not None:
            return adapter
        return NamedTensors((name, tensor.detach().to("cpu", copy=True))
                            for name, tensor in self.trainer.named_weights())

    # ---- sync_method nccl (rft.distributed.weight_broadcast) ----------------------------

    def host_weight_group(self, world_size: int, timeout_s: float) -> GroupAddress:
        """Open the rendezvous of the broadcast group (this actor is rank 0; for a sharded
        trainer, its rank 0 on that rank's node)."""
        if self.ranked is not None:
            return self.ranked.call_rank0(_host_group, world_size, timeout_s,
                                          what="weight-group set-up")
        device = next(iter(self.trainer.named_weights()))[1].device
        store, address = host_rendezvous(world_size, device, timeout_s)
        self._rendezvous = (store, address)
        return address

    def join_weight_group(self) -> None:
        """Join as rank 0 (returns once every rank has joined)."""
        if self.ranked is not None:
            self.ranked.call_rank0(_join_group, what="weight-group set-up")
            return
        assert self._rendezvous is not None, "host_weight_group first"
        store, address = self._rendezvous
        self.group = BroadcastGroup(address, rank=0, store=store)

    def _engine_dtype(self) -> torch.dtype | None:
        """The rollout engine's weight dtype (what the broadcast sends)."""
        config = self.plan.config
        rm = config.explorer.rollout_model
        return engine_dtype(rm.dtype, rm.model_path or config.model.model_path)

    def snapshot_weights(self, version: int) -> Broadcast:
        """Keep a CPU copy of the weights as ``version`` (training goes on meanwhile);
        return what the explorer is handed."""
        if self.ranked is not None:  # each rank keeps its shards
            spec = self.ranked.call_all(
                _snapshot, version, self._engine_dtype(),
                what="weight snapshot")[0]
            with self._snapshot_ready:
                self._shard_specs[version] = spec
                self._snapshot_ready.notify_all()
            return Broadcast(spec)
        dtype = self._engine_dtype()
        named = [(name, in_dtype(tensor, dtype)) for name, tensor in self.trainer.named_weights()]
        packed = pack([tensor for _, tensor in named])  # CPU byte buckets, ready to send
        with self._snapshot_ready:
            self._snapshots[version] = packed
            self._snapshot_ready.notify_all()
        return Broadcast(spec_of(named))

    def broadcast_weights(self, version: int, timeout_s: float) -> None:
        """Send snapshot ``version`` to the group (the explorer receives it at once). Runs
        in a thread of its own; the snapshot may still be queued behind a train step."""
        if self.ranked is not None:
            with self._snapshot_ready:
                if not self._snapshot_ready.wait_for(lambda: version in self._shard_specs,
                                                     timeout_s):
                    raise RftError(f"synchronizer (nccl): the trainer has no snapshot of "
                                   f"weights version {version} after {timeout_s:g} s")
            self.ranked.call_all(_send_snapshot, version, beside=True,
                                 what=f"weight broadcast {version}")
            return
        assert self.group is not None, "join_weight_group first"
        with self._snapshot_ready:
            if not self._snapshot_ready.wait_for(lambda: version in self._snapshots, timeout_s):
                raise RftError(f"synchronizer (nccl): the trainer has no snapshot of weights "
                               f"version {version} after {timeout_s:g} s")
            packed = self._snapshots[version]
        self.group.send_packed(packed)

    def drop_snapshots(self, below: int) -> None:
        with self._snapshot_ready:
            for version in [v for v in self._snapshots if v < below]:
                del self._snapshots[version]
            old = [v for v in self._shard_specs if v < below]
            for version in old:
                del self._shard_specs[version]
        if self.ranked is not None and old:
            self.ranked.call_all(_drop_snapshots, below, what="weight snapshot")

    def resume(self) -> ResumePoint | None:
        """Load the newest readable checkpoint of the job when ``continue_from_checkpoint``
        (newer unreadable ones are moved aside with a warning; ``None``: none), restore
        this process's random generators (last) and the count of experiences read. A
        sharded trainer's ranks read the folder themselves (sharded, or the one-process
        ``trainer.pt`` on rank 0) in any number of ranks."""
        loaded = resume_checkpoint(self.plan, extra=("buffer",))
        if loaded is None:
            return None
        if self.ranked is not None:
            self.ranked.load_checkpoint(loaded.checkpoint.path)
        else:
            self.trainer.read_checkpoint(loaded.checkpoint.path, loaded.trainer_state)
        state = resumed_state(loaded)
        self.storage.read_count = state.experiences_read
        restore_held(self.strategy, state)
        if state.rng is not None:
            set_rng_state(state.rng)
        return ResumePoint(loaded.step, loaded.checkpoint.path, state,
                           loaded.extra.get("buffer"), loaded.skipped)

    def save(self, step: int, state: RunState, export_hf: bool,
             buffer: dict[str, Any] | None = None) -> str:
        """Checkpoint ``global_step_<step>`` (with the HF model when ``export_hf``, the
        experience buffer's state ``buffer`` as ``buffer.pt`` when given, the count of
        experiences read); a sharded trainer writes ``trainer_sharded/`` (every rank its
        shards). Then the buffer's leases of steps ``<= step`` become final."""
        state = dataclasses.replace(state, experiences_read=self.storage.read_count,
                                    held_experiences=held_state(self.strategy))
        extra = {"buffer": buffer} if buffer is not None else None
        trainer = self.ranked if self.ranked is not None else self.trainer
        path = save_stage_checkpoint(self.plan, trainer, step, state, export_hf=export_hf,
                                     extra=extra)
        try:
            self.storage.commit_leases(step)
        except Exception as exc:  # noqa: BLE001 (a dead buffer: a resumed run settles them)
            log.warning("experience buffer: leases of step %d not settled: %s", step, exc)
        return path

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
        if self.ranked is not None:
            try:
                self.ranked.call_rank0(_close_group, what="close")
            except RftError:
                pass  # the ranks are gone already
        self.trainer.close()


# ---- run on the sharded trainer's ranks (RankedTrainer.call_all / call_rank0) ----------


def _host_group(rank: TrainerRank, world_size: int, timeout_s: float) -> GroupAddress:
    store, address = host_rendezvous(world_size, rank.trainer.options.device, timeout_s)
    rank.scratch["rendezvous"] = (store, address)
    return address


def _join_group(rank: TrainerRank) -> None:
    store, address = rank.scratch.pop("rendezvous")
    rank.scratch["broadcast_group"] = BroadcastGroup(address, rank=0, store=store)


def _close_group(rank: TrainerRank) -> None:
    group = rank.scratch.pop("broadcast_group", None)
    if group is not None:
        group.close()


def _snapshot(rank: TrainerRank, version: int, dtype: torch.dtype | None = None
              ) -> tuple[Any, ...]:
    """Keep this rank's shards as ``version`` (floating point in ``dtype``, the engine's);
    the broadcast spec (the same on all ranks)."""
    from rft.trainer.weight_gather import take_snapshot

    snapshot = take_snapshot(rank.trainer.actor, rank.rank, rank.world_size, dtype)
    with _scratch_lock(rank):
        rank.scratch.setdefault("snapshots", {})[version] = snapshot
    return tuple(TensorSpec(m.name, m.shape, m.dtype) for m in snapshot.meta)


def _drop_snapshots(rank: TrainerRank, below: int) -> None:
    with _scratch_lock(rank):
        snapshots = rank.scratch.get("snapshots", {})
        for version in [v for v in snapshots if v < below]:
            del snapshots[version]


def _scratch_lock(rank: TrainerRank) -> threading.Lock:
    return rank.scratch.setdefault("lock", threading.Lock())


def _send_snapshot(rank: TrainerRank, version: int, limit: int | None = None) -> int:
    """Broadcast snapshot ``version``: bucket by bucket (the broadcast group's layout),
    each tensor assembled on rank 0 inside the bucket (:func:`~rft.trainer.weight_gather.
    gather_into`), then sent to the engines. Every rank runs it (beside a train step);
    returns the largest bucket rank 0 held, in bytes."""
    from rft.trainer.weight_gather import gather_into

    with _scratch_lock(rank):
        snapshot = rank.scratch.get("snapshots", {}).get(version)
    if snapshot is None:
        raise RftError(f"synchronizer (nccl): trainer rank {rank.rank} has no snapshot of "
                       f"weights version {version}")
    spec = [TensorSpec(m.name, m.shape, m.dtype) for m in snapshot.meta]
    group = rank.scratch.get("broadcast_group")
    if rank.rank == 0 and group is None:
        raise RftError("synchronizer (nccl): trainer rank 0 has not joined the weight group")
    assert rank.group is not None
    largest = 0
    for indices in buckets(spec, limit or BUCKET_BYTES):
        offsets, size = layout(spec, indices)
        bucket = torch.zeros(size, dtype=torch.uint8) if rank.rank == 0 else None
        for index, offset in zip(indices, offsets, strict=True):
            target = (bucket[offset: offset + snapshot.meta[index].nbytes]
                      if bucket is not None else None)
            gather_into(snapshot, index, target, rank.group.sync_group)
        if bucket is not None and group is not None:  # rank 0 (it has joined: checked above)
            largest = max(largest, bucket.numel())
            group.send_packed([bucket])
            del bucket
    return largest

