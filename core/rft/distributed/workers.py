"""What the explorer and trainer actors run.

Each actor gets the stage's :class:`~rft.config.plan.RunPlan` (it pickles: plugin
implementations travel by reference and are imported in the actor's process); nothing is
validated again there.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from rft.checkpoint import Checkpoint, load_actor_weights, load_checkpoint
from rft.config.plan import RunPlan
from rft.distributed.buffer_actor import RemoteStorage
from rft.distributed.engine_pool import EnginePool
from rft.distributed.weight_broadcast import (Broadcast, BroadcastGroup, EngineEnd, GroupAddress,
                                              host_rendezvous, pack, spec_of)
from rft.errors import RftError
from rft.explorer.engine import InferenceEngine
from rft.explorer.engine_factory import build_engine, default_sampling
from rft.explorer.explorer import Explorer
from rft.explorer.model_wrapper import ModelWrapper
from rft.modes.builders import build_trainer, quiet_libraries, save_stage_checkpoint
from rft.tensor_wire import NamedTensors

Weights = list[tuple[str, torch.Tensor]] | str | Broadcast
"""What the trainer hands to the explorer: its weights (HF names, CPU; ``sync_method:
memory``, through the object store), the path of the checkpoint holding them
(``sync_method: checkpoint``), or what to receive from the trainer's broadcast
(``sync_method: nccl``, :mod:`rft.distributed.weight_broadcast`)."""


class ExplorerService:
    """The explorer actor: rollout engine, workflows, selectors; writes to the buffer."""

    def __init__(self, plan: RunPlan, buffer: Any) -> None:
        quiet_libraries()
        config = plan.config
        engine_cls = plan.rollout_model.engine.implementation
        rm = config.explorer.rollout_model
        if rm.engine_num > 1:  # replicas as actors of their own, used as one engine
            gpus = rm.tensor_parallel_size if config.cluster.gpu_per_node else 0
            self.engine: InferenceEngine = EnginePool(config, engine_cls, rm.engine_num, gpus)
        else:
            self.engine = build_engine(config, engine_cls)
        storage = RemoteStorage(plan.experience_buffer.name, buffer)
        self.explorer = Explorer(plan, ModelWrapper(self.engine, default_sampling(config)),
                                 storage)
        # sync_method nccl: this process receives as rank 1, or each replica of a pool
        self.broadcast_end = None if isinstance(self.engine, EnginePool) else EngineEnd(self.engine)
        self.weight_receiver: EngineEnd | EnginePool = self.broadcast_end or self.engine

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
        tensors = (load_actor_weights(Checkpoint(version, weights)).items()
                   if isinstance(weights, str) else weights)
        self.engine.update_weights(iter(tensors), version=version)
        return time.monotonic() - started

    def explore_step(self, step: int, weights: Weights | None = None,
                     version: int | None = None) -> tuple[dict[str, float], list[Any]]:
        """Optionally sync first, then one explore step; its metrics and the selectors'
        states after it (what a checkpoint of this step records)."""
        metrics: dict[str, float] = {}
        if weights is not None and version is not None:
            metrics["timing_s/update_weights"] = self.sync(weights, version)
        metrics.update(self.explorer.explore_step(step))
        return metrics, [s.state_dict() for s in self.explorer.selectors]

    def evaluate(self, weights: Weights | None = None, version: int | None = None
                 ) -> dict[str, float]:
        """Optionally sync first, then evaluate every eval taskset."""
        if weights is not None and version is not None:
            self.sync(weights, version)
        return self.explorer.evaluate()

    def load_selectors(self, states: list[Any]) -> None:
        for selector, state in zip(self.explorer.selectors, states, strict=False):
            selector.load_state_dict(state)

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
        self.plan = plan
        self.trainer, self.strategy = build_trainer(
            plan, RemoteStorage(plan.experience_buffer.name, buffer), total_steps)
        self.group: BroadcastGroup | None = None
        self._rendezvous: tuple[Any, GroupAddress] | None = None
        self._snapshots: dict[int, list[torch.Tensor]] = {}  # version → byte buckets
        self._snapshot_ready = threading.Condition()

    def train_step(self, step: int) -> dict[str, float]:
        """Sample one batch (waiting for the explorer) and learn from it."""
        experiences, metrics = self.strategy.sample(step, self.trainer.global_steps)
        metrics.update(self.trainer.train_step(experiences))
        return metrics

    def weights(self) -> NamedTensors:
        """A CPU copy of the actor's weights (it goes to the object store as raw buffers)."""
        return NamedTensors((name, tensor.detach().to("cpu", copy=True))
                            for name, tensor in self.trainer.named_weights())

    # ---- sync_method nccl (rft.distributed.weight_broadcast) ----------------------------

    def host_weight_group(self, world_size: int, timeout_s: float) -> GroupAddress:
        """Open the rendezvous of the broadcast group (this actor is rank 0)."""
        device = next(iter(self.trainer.named_weights()))[1].device
        store, address = host_rendezvous(world_size, device, timeout_s)
        self._rendezvous = (store, address)
        return address

    def join_weight_group(self) -> None:
        """Join as rank 0 (returns once every rank has joined)."""
        assert self._rendezvous is not None, "host_weight_group first"
        store, address = self._rendezvous
        self.group = BroadcastGroup(address, rank=0, store=store)

    def snapshot_weights(self, version: int) -> Broadcast:
        """Keep a CPU copy of the weights as ``version`` (training goes on meanwhile);
        return what the explorer is handed."""
        named = list(self.trainer.named_weights())
        packed = pack([tensor for _, tensor in named])  # CPU byte buckets, ready to send
        with self._snapshot_ready:
            self._snapshots[version] = packed
            self._snapshot_ready.notify_all()
        return Broadcast(spec_of(named))

    def broadcast_weights(self, version: int, timeout_s: float) -> None:
        """Send snapshot ``version`` to the group (the explorer receives it at once). Runs
        in a thread of its own; the snapshot may still be queued behind a train step."""
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

    def resume(self, path: str) -> dict[str, Any]:
        """Load the checkpoint at ``path``; return its run state (step, selectors, …)."""
        trainer_state, state = load_checkpoint(Checkpoint(0, path))
        self.trainer.load_state_dict(trainer_state)
        return state

    def save(self, step: int, state: dict[str, Any], export_hf: bool) -> str:
        """Checkpoint ``global_step_<step>`` (with the HF model when ``export_hf``)."""
        return save_stage_checkpoint(self.plan, self.trainer, step, state, export_hf=export_hf)

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
        self.trainer.close()
