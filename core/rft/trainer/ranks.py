"""The native trainer as N ranks: Ray actors in a placement group, FSDP2 among them.

:class:`RankedTrainer` is what ``TorchTrainer(plan)`` returns when ``trainer.ranks > 1``.
It owns no model; it starts the ranks and drives them::

    placement group  N bundles of {GPU: 1} (on CPU {CPU: 1}), strategy PACK: as many ranks
                     per node as fit, over as many nodes as needed
    rank actors      TrainerRank, one per bundle, numbered node by node
    process group    torch.distributed among the ranks (NCCL on GPU, gloo on CPU),
                     rendezvous at rank 0's node address (from Ray) and a free port,
                     timeout trainer.rank_timeout (= synchronizer.sync_timeout)
    each step        the batch is put in Ray's object store once; every rank trains on
                     its share (rft.trainer.parallel); rank 0's metrics are returned

The chosen placement is printed at start-up (``rft: trainer 'trainer': 2 ranks …``).

Failures end the step at once with one line naming the rank: a rank that dies (killed,
out of memory, node lost) — Ray reports it while the others wait in a collective — or a
rank that raises (including a collective that timed out after ``rank_timeout`` waiting
for a rank that hangs). The other ranks are then stopped (they cannot go on without it)
and every later call fails with the same message; the run resumes from its last
checkpoint.

Functions of other layers (the weight-broadcast group of :mod:`rft.distributed`) run on
the ranks through :meth:`RankedTrainer.call_all`: ``fn(rank, *args)`` on every rank, with
``rank`` the :class:`TrainerRank` (its ``trainer``, ``group`` and a ``scratch`` dict).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from rft.adapter import AdapterWeights
from rft.config.plan import TrainerPlan
from rft.errors import RftError
from rft.experience import Experience
from rft.host_memory import retain_freed_memory
from rft.trainer.base import Trainer
from rft.trainer.options import param_offload
from rft.trainer.parallel import RankGroup, cpu_threads, free_port
from rft.trainer.rank_waits import wait_for_ranks
from rft.trainer.save_turns import SaveStrategy, SaveTurn, SaveWindow, save_turns

log = logging.getLogger("rft.trainer.ranks")

SIDE_GROUP = "side"
"""The rank actors' concurrency group for work beside a train step (weight broadcasts)."""

DEFAULT_TIMEOUT_S = 1800.0
"""Rank timeout when the plan has none (``trainer.rank_timeout`` unset: no validation)."""


@dataclass(frozen=True)
class RankPlace:
    """Where a rank runs."""

    rank: int
    node_ip: str
    node_id: str
    gpus: tuple[str, ...]
    pid: int


class TrainerRank:
    """What one rank's Ray actor runs: a :class:`~rft.trainer.torch_trainer.TorchTrainer`
    built with this rank's :class:`~rft.trainer.parallel.RankGroup`."""

    def __init__(self, plan: TrainerPlan, world_size: int, timeout_s: float,
                 trainer_cls: type) -> None:
        self.plan = plan
        self.trainer_cls = trainer_cls
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.rank = -1
        self.trainer: Any = None
        self.group: RankGroup | None = None
        self.scratch: dict[str, Any] = {}
        """State of functions run through :meth:`call` (e.g. a weight-broadcast group)."""
        self.activity = "starting"
        """``idle``, ``train step N``, … (see :meth:`status`)."""
        self.rss_at_start = _memory_status().get("VmRSS", 0)
        """Resident bytes of this process before the model was built (Linux; else 0):
        measured again in :meth:`start`, just before."""
        retain_freed_memory()
        if not _has_gpu():
            torch.set_num_threads(cpu_threads())

    def where(self) -> RankPlace:
        import os

        import ray

        return RankPlace(self.rank, ray.util.get_node_ip_address(),
                         ray.get_runtime_context().get_node_id(),
                         tuple(str(g) for g in ray.get_gpu_ids()), os.getpid())

    def rendezvous_port(self) -> int:
        return free_port()

    def start(self, rank: int, master_addr: str, master_port: int) -> str:
        """Join the process group as ``rank`` and build this rank's trainer; return the
        group's backend."""
        import ray

        from rft.device_check import check_actor_device

        self.rank = rank
        check_actor_device(f"trainer {self.plan.trainer.name!r} rank {rank}")  # no CPU fallback
        device = (torch.device("cuda", 0) if ray.get_gpu_ids() and _has_gpu()
                  else torch.device("cpu"))  # Ray shows the rank its own GPU as cuda:0
        self.group = RankGroup.initialize(rank, self.world_size, master_addr, master_port,
                                          device, self.timeout_s,
                                          cpu_offload=param_offload(
                                              self.plan.trainer.trainer_config))
        import transformers  # noqa: F401  (its import is not the model's memory)

        self.rss_at_start = _memory_status().get("VmRSS", 0)
        self.trainer = self.trainer_cls(self.plan, ranks=self.group)
        self.activity = "idle"
        return self.group.backend

    def train_step(self, experiences: Sequence[Experience]) -> dict[str, float]:
        self.activity = f"train step {self.trainer.global_steps + 1}"
        try:
            return self.trainer.train_step(experiences)
        finally:
            self.activity = "idle"

    def status(self) -> str:
        """What the rank is doing (call it with the ``side`` concurrency group to ask
        during a step)."""
        return self.activity

    def full_state(self) -> dict[str, Any] | None:
        """The one-process state, on rank 0 (``None`` on the others)."""
        return self.trainer.gathered_state()

    def load_state(self, boxed: list[Any]) -> None:
        """Load a one-process state; only rank 0 fetches it (``boxed``: its object ref)."""
        import ray

        state = ray.get(boxed[0]) if self.rank == 0 else None
        from rft.trainer import sharded_checkpoint

        if self.rank == 0 and sharded_checkpoint.is_sharded_marker(state):
            raise RftError("trainer: load_state got a sharded marker; use load_checkpoint")
        sharded_checkpoint.load_full_state(self.trainer, state)

    def load_sharded(self, directory: str) -> None:
        from rft.trainer import sharded_checkpoint

        sharded_checkpoint.load_sharded(self.trainer, directory)

    def load_checkpoint(self, path: str) -> None:
        from rft.trainer import sharded_checkpoint

        sharded_checkpoint.load_checkpoint_folder(self.trainer, path)

    def save_sharded(self, directory: str, turn: int = 0, turns: int = 1) -> SaveWindow:
        """Write this rank's shards in its ``turn`` of ``turns`` (``trainer.save_strategy``,
        :mod:`rft.trainer.save_turns`)."""
        from rft.trainer import sharded_checkpoint

        group = self.group
        barrier = None if group is None else (lambda: group.barrier("checkpoint turn"))
        return sharded_checkpoint.save_sharded(self.trainer, directory,
                                               SaveTurn(turn, turns, barrier))

    def save_pretrained(self, path: str) -> None:
        self.trainer.save_pretrained(path)

    def weights(self) -> Any:
        """Rank 0: the actor's whole weights on the CPU (``NamedTensors``); other ranks
        take part in the gathering and return ``None``."""
        from rft.tensor_wire import NamedTensors

        named = [(name, tensor.to("cpu", copy=True))
                 for name, tensor in self.trainer.gathered_weights(keep=False)
                 if tensor is not None]
        return NamedTensors(named) if self.rank == 0 else None

    def memory(self) -> dict[str, int]:
        """Bytes: resident now and at its peak (``VmRSS`` / ``VmHWM``, Linux), resident
        before the model was built, and, on a GPU, the peak allocated by torch."""
        status = _memory_status()
        out = {"rss": status.get("VmRSS", 0), "peak_rss": status.get("VmHWM", 0),
               "rss_at_start": self.rss_at_start}
        if self.trainer is not None and self.trainer.options.device.type == "cuda":
            out["peak_cuda"] = int(torch.cuda.max_memory_allocated(self.trainer.options.device))
        return out

    def global_steps(self) -> int:
        return int(self.trainer.global_steps)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(self, *args)`` (in the actor's main thread, between steps)."""
        return fn(self, *args)

    def call_beside(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(self, *args)`` in the side thread (called with the ``side`` concurrency
        group: it runs while a train step runs)."""
        return fn(self, *args)

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.close()
        elif self.group is not None:
            self.group.close()


def _memory_status() -> dict[str, int]:
    """``VmRSS`` / ``VmHWM`` of this process in bytes (empty off Linux)."""
    try:
        with open("/proc/self/status", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _has_gpu() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


class RankedTrainer(Trainer):
    """The trainer of ``plan.trainer.ranks`` FSDP2 ranks (see the module docstring).

    :param trainer_cls: what each rank builds, ``trainer_cls(plan, ranks=group)``
        (:class:`~rft.trainer.torch_trainer.TorchTrainer`).
    """

    def __init__(self, plan: TrainerPlan, trainer_cls: type) -> None:
        import ray

        super().__init__(plan)
        self.trainer_cls = trainer_cls
        self.world_size = int(plan.trainer.ranks or 1)
        self.timeout_s = float(plan.trainer.rank_timeout or DEFAULT_TIMEOUT_S)
        self.name = plan.trainer.name
        self._failure: str | None = None
        self._started_ray = False
        self._watcher: Any = None
        if not ray.is_initialized():  # a process without Ray (mode train): a private one
            from rft.ray_reaper import watch
            from rft.sigterm import own_sigterm_handler

            with own_sigterm_handler():  # SIGTERM stays the run's (one line, exit 143)
                ray.init(include_dashboard=False, _node_ip_address="127.0.0.1")
            self._started_ray = True
            self._watcher = watch()  # killed, the run takes its cluster along
        strategy = plan.trainer.trainer_strategy
        if strategy == "fsdp":
            log.info("trainer.trainer_strategy 'fsdp': runs as FSDP2 (fully_shard)")
        self.gpus = self._cluster_has_gpus()
        self.actors: list[Any] = []
        self.places: list[RankPlace] = []
        self.placement_group: Any = None
        self.backend = "nccl" if self.gpus else "gloo"
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # ---- start-up --------------------------------------------------------------------

    def _cluster_has_gpus(self) -> bool:
        """Ranks take GPUs when the cluster has some and the trainer is not pinned to the
        CPU (``trainer_config.torch.device: cpu``)."""
        import ray

        from rft.trainer.options import lookup

        if str(lookup(self.plan.trainer.trainer_config, "torch.device", "auto")) == "cpu":
            return False
        return float(ray.cluster_resources().get("GPU", 0)) > 0

    def _start(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        n = self.world_size
        bundle = {"GPU": 1.0} if self.gpus else {"CPU": 1.0}
        (kind,) = bundle
        total = float(ray.cluster_resources().get(kind, 0))
        if total < n:  # never placeable: say so now rather than after the timeout
            raise RftError(f"trainer {self.name!r}: {n} ranks need {n} {kind}s (one each) but "
                           f"the Ray cluster has {total:g} in all")
        self.placement_group = placement_group([dict(bundle) for _ in range(n)], strategy="PACK")
        try:
            ray.get(self.placement_group.ready(), timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            have = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            raise RftError(f"trainer {self.name!r}: cannot place {n} ranks of {bundle} each "
                           f"within {self.timeout_s:g} s; the cluster has {have} free") from None
        # concurrency_groups: a documented class option that Ray's overloads of remote() omit
        class_options: dict[str, Any] = {"concurrency_groups": {SIDE_GROUP: 1}}
        remote = ray.remote(**class_options)(TrainerRank)
        for index in range(n):
            strategy = PlacementGroupSchedulingStrategy(self.placement_group,
                                                        placement_group_bundle_index=index)
            options: dict[str, Any] = {"scheduling_strategy": strategy,
                                       "name": f"{self.name}.rank{index}"}
            options.update({"num_gpus": 1, "num_cpus": 0} if self.gpus else {"num_cpus": 1})
            self.actors.append(remote.options(**options).remote(self.plan, n, self.timeout_s,
                                                                self.trainer_cls))
        places = self._all([a.where.remote() for a in self.actors], "start-up")
        # ranks numbered node by node (bundles of a node are consecutive ranks)
        node_order: dict[str, int] = {}
        for place in places:
            node_order.setdefault(place.node_id, len(node_order))
        order = sorted(range(n), key=lambda i: (node_order[places[i].node_id], i))
        self.actors = [self.actors[i] for i in order]
        self.places = [RankPlace(rank, places[i].node_ip, places[i].node_id, places[i].gpus,
                                 places[i].pid) for rank, i in enumerate(order)]
        master = self.places[0].node_ip
        port = self._all([self.actors[0].rendezvous_port.remote()], "start-up")[0]
        self.backend = self._all([actor.start.remote(rank, master, port)
                                  for rank, actor in enumerate(self.actors)], "start-up")[0]
        log.info("%s", self.placement())
        if ray.get_runtime_context().get_actor_id() is None:  # else the run's driver prints it
            print(f"rft: {self.placement()}", file=sys.stderr, flush=True)

    def placement(self) -> str:
        """One line: ranks per node and the devices of each rank."""
        by_node: dict[str, list[RankPlace]] = {}
        for place in self.places:
            by_node.setdefault(place.node_id, []).append(place)
        backend = self.backend
        parts = []
        for node_id, places in by_node.items():
            ranks = ", ".join(str(p.rank) for p in places)
            devices = ("GPU " + ", ".join(g for p in places for g in p.gpus) if self.gpus
                       else "1 CPU each")
            parts.append(f"node {places[0].node_ip} ({node_id[:8]}): ranks {ranks} ({devices})")
        return (f"trainer {self.name!r}: {self.world_size} FSDP2 ranks over {len(by_node)} "
                f"node(s), {backend}; " + "; ".join(parts))

    # ---- running calls on every rank ---------------------------------------------------

    def _all(self, refs: list[Any], what: str) -> list[Any]:
        """Results of one call per rank (``refs[i]`` on rank ``i``); the first failure ends
        it with one line naming the rank, after stopping the others
        (:func:`rft.trainer.rank_waits.wait_for_ranks`)."""
        if self._failure is not None:
            raise RftError(f"trainer {self.name!r}: its ranks were stopped after: {self._failure}")
        return wait_for_ranks(refs, what, self._on, self._fail)

    def _on(self, rank: int) -> str:
        if rank < len(self.places):
            return f" (node {self.places[rank].node_ip}, pid {self.places[rank].pid})"
        return ""

    def _fail(self, message: str) -> NoReturn:
        import ray

        self._failure = message
        for actor in self.actors:  # the others wait in a collective for the lost rank
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 (already gone)
                pass
        raise RftError(message)

    def call_all(self, fn: Callable[..., Any], *args: Any, beside: bool = False,
                 what: str = "call") -> list[Any]:
        """``fn(rank, *args)`` on every rank (``beside``: in the ranks' side thread, while a
        train step may run); the results in rank order."""
        if beside:
            refs = [a.call_beside.options(concurrency_group=SIDE_GROUP).remote(fn, *args)
                    for a in self.actors]
        else:
            refs = [a.call.remote(fn, *args) for a in self.actors]
        return self._all(refs, what)

    def call_rank0(self, fn: Callable[..., Any], *args: Any, what: str = "call") -> Any:
        """``fn(rank 0, *args)`` on rank 0 only."""
        return self._all([self.actors[0].call.remote(fn, *args)], what)[0]

    # ---- the Trainer interface ---------------------------------------------------------

    def train_step(self, experiences: Sequence[Experience]) -> dict[str, float]:
        import ray

        started = time.perf_counter()
        batch = ray.put(list(experiences))
        step = self.global_steps + 1
        metrics = self._all([a.train_step.remote(batch) for a in self.actors],
                            f"train step {step}")[0]
        metrics = dict(metrics)
        metrics["timing_s/step_all_ranks"] = time.perf_counter() - started
        self.global_steps += 1
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The one-process format, gathered on rank 0 (modes that do not write sharded
        checkpoints; :meth:`save_sharded` is the sharded way)."""
        return self._all([a.full_state.remote() for a in self.actors], "state gathering")[0]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import ray

        from rft.trainer.sharded_checkpoint import is_sharded_marker, marker_dir

        if is_sharded_marker(state):
            directory = marker_dir(state)
            self._all([a.load_sharded.remote(directory) for a in self.actors], "resume")
        else:
            boxed = [ray.put(state)]
            self._all([a.load_state.remote(boxed) for a in self.actors], "resume")
        self.global_steps = int(self._all([self.actors[0].global_steps.remote()], "resume")[0])

    def load_checkpoint(self, path: str) -> None:
        """Resume from the checkpoint folder ``path`` (sharded or one-process format)."""
        self._all([a.load_checkpoint.remote(path) for a in self.actors], "resume")
        self.global_steps = int(self._all([self.actors[0].global_steps.remote()], "resume")[0])

    def save_sharded(self, directory: str, strategy: SaveStrategy | None = None
                     ) -> list[SaveWindow]:
        """Every rank writes its shards to ``directory`` (DCP), in the turns of ``strategy``
        (``None``: ``trainer.save_strategy``; :mod:`rft.trainer.save_turns`); returns when
        each rank wrote, in rank order."""
        strategy = strategy or self.plan.trainer.save_strategy
        turns = save_turns(strategy, [place.node_id for place in self.places])
        count = max(turns) + 1
        started = time.perf_counter()
        windows: list[SaveWindow] = self._all(
            [a.save_sharded.remote(directory, turn, count)
             for a, turn in zip(self.actors, turns, strict=True)], "checkpoint")
        if count > 1:
            log.info("trainer %r: %d ranks wrote %s in %d turns (save_strategy %s) in %.2f s",
                     self.name, self.world_size, directory, count, strategy,
                     time.perf_counter() - started)
        return windows

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        weights = self._all([a.weights.remote() for a in self.actors], "weight gathering")[0]
        return iter(list(weights))

    def adapter_weights(self) -> AdapterWeights | None:
        """With LoRA: the adapter, gathered on rank 0 (each tensor whole, one at a time)."""
        if not self.plan.model.lora_configs:
            return None
        return self.call_all(_adapter_weights, what="adapter gathering")[0]

    def save_pretrained(self, path: str) -> None:
        self._all([a.save_pretrained.remote(path) for a in self.actors], "Hugging Face export")

    def memory(self) -> list[dict[str, int]]:
        """Each rank's :meth:`TrainerRank.memory`, in rank order."""
        return self._all([a.memory.remote() for a in self.actors], "memory report")

    def rank_pids(self) -> list[int]:
        """Process ids of the ranks, in rank order (tests kill one)."""
        return [p.pid for p in self.places]

    def close(self) -> None:
        import ray

        if self.actors and self._failure is None:
            try:
                ray.get([a.close.remote() for a in self.actors], timeout=60)
            except Exception:  # noqa: BLE001 (dead ranks: nothing left to close)
                pass
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
        self.actors = []
        if self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.placement_group)
            except Exception:  # noqa: BLE001
                pass
            self.placement_group = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
            if self._watcher is not None:
                self._watcher.done()
                self._watcher = None


def _adapter_weights(rank: TrainerRank) -> AdapterWeights | None:
    """Run on every rank: the LoRA adapter on rank 0, ``None`` on the others."""
    return rank.trainer.adapter_weights()


__all__ = ["RankPlace", "RankedTrainer", "TrainerRank"]
