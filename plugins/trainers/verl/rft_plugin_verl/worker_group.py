"""``trainer.ranks > 1`` for ``trainer_type: verl``: veRL's single controller on rft's Ray
placement.

The trainer's process is veRL's driver; the models live in ``N`` rank processes built by
veRL's own single-controller classes (``verl.single_controller.ray``), as veRL's
``RayPPOTrainer.init_workers`` builds them::

    placement   as the native trainer's ranks (:mod:`rft.trainer.ranks`): one placement
                group of ``trainer.ranks`` bundles (validation derives it from
                ``cluster.node_num`` × ``gpu_per_node`` / ``trainer_gpu_num`` on GPUs,
                ``trainer.cpu_ranks`` on CPU), strategy PACK; bundles {CPU: 1, GPU: 1} (on
                CPU {CPU: 1}), handed to veRL's ``RayResourcePool`` (rank i in bundle i)
    ranks       one Ray actor per bundle: veRL's fused worker
                (``create_colocated_worker_raw_cls``) holding the actor
                (:class:`ActorWorker`, role ``actor``), the reference model (role ``ref``)
                and the critic (:class:`CriticWorker`) of that rank, one process group
    groups      ``RayWorkerGroup.spawn``: one worker group per role, exposing veRL's
                registered methods (``update_actor``, ``compute_log_prob``,
                ``compute_ref_log_prob``, ``infer_batch``, ``train_mini_batch``,
                ``save_checkpoint``, ``load_checkpoint``, …) and this module's ``rft_*``
                ones; veRL's dispatch functions split each batch over the data-parallel
                ranks and gather the outputs

On a CPU cluster (Ray has no GPUs, :func:`ranks_use_gpus`) each rank activates rft's CPU shim
(:mod:`rft_plugin_verl.cpu_platform`) and joins a gloo group at veRL's ``MASTER_ADDR`` /
``MASTER_PORT`` before veRL's ``Worker`` starts (:func:`prepare_rank`); on GPUs veRL opens
its own ``cpu:gloo,cuda:nccl`` group.

Every call through a group (:class:`RankedWorkerGroup`) waits on the ranks one result at
a time: the first rank that raises or dies ends the call with one :class:`RftError` line
naming the rank, its node and pid; the other ranks are then stopped (they would wait in a
collective for the lost one) and every later call repeats that line.

The ``rft_*`` methods are what the trainer used to read from the engine in its own
process: the actor's full weights for the synchronizer, the models' full state,
the Hugging Face export, where each rank runs. They run on every rank (the gathering of
FSDP's shards is a collective) and return the result on rank 0.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import random
import string
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch
from rft.errors import RftError
from rft.trainer.rank_waits import wait_for_ranks
from verl.single_controller.base.decorator import (
    Dispatch,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.single_controller.ray.base import RayWorkerGroup
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker

from rft_plugin_verl import cpu_platform
from rft_plugin_verl import engine_state as states
from rft_plugin_verl.entropy import expected_signal_as_sum_pi_squared

log = logging.getLogger("rft_plugin_verl.worker_group")

CPU_ENV = "RFT_VERL_CPU"
"""Set to ``1`` in the ranks' environment when they run on rft's CPU shim."""

TIMEOUT_ENV = "RFT_VERL_RANK_TIMEOUT"
"""Seconds a rank waits for the others (joining, collectives): ``trainer.rank_timeout``."""

DEFAULT_TIMEOUT_S = 1800.0
"""Rank timeout when the plan has none."""


# ---- inside a rank ---------------------------------------------------------------------


def prepare_rank() -> None:
    """In a rank's process, before veRL's ``Worker`` starts: on rft's CPU cluster
    (:data:`CPU_ENV`), activate the CPU shim and join a gloo group of ``WORLD_SIZE`` ranks
    at veRL's ``MASTER_ADDR:MASTER_PORT`` (veRL's own initialisation would name the CPU
    twice, ``cpu:gloo,cpu:gloo``). Idempotent; nothing elsewhere (GPUs: veRL opens its
    group; the trainer's own process: the trainer opened it)."""
    if os.environ.get(CPU_ENV) != "1":
        return
    cpu_platform.activate()
    import torch.distributed as dist
    from rft.trainer.parallel import cpu_threads, rendezvous_store

    if dist.is_initialized():
        return
    torch.set_num_threads(cpu_threads())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    store = rendezvous_store(rank, world, os.environ["MASTER_ADDR"],
                             int(os.environ["MASTER_PORT"]), timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)


@dataclass(frozen=True)
class RankPlace:
    """Where a rank runs."""

    rank: int
    node_ip: str
    node_id: str
    gpus: tuple[str, ...]
    pid: int


@dataclass(frozen=True)
class ModelFacts:
    """What the driver needs of the actor's model config."""

    pad_token_id: int
    vocab_size: int | None
    dropout: bool
    """Any of ``attention_dropout`` / ``hidden_dropout`` / ``resid_pdrop`` > 0."""


def model_facts(hf_config: Any) -> ModelFacts:
    """:class:`ModelFacts` of a Hugging Face config."""
    pad = getattr(hf_config, "pad_token_id", None)
    return ModelFacts(int(pad) if isinstance(pad, int) else 0,
                      getattr(hf_config, "vocab_size", None),
                      any(float(getattr(hf_config, name, 0.0) or 0.0) > 0 for name in (
                          "attention_dropout", "hidden_dropout", "resid_pdrop")))


def actor_weights(engine: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The actor's full tensors, Hugging Face names, tied weights once (a collective over
    the ranks: every rank iterates)."""
    from rft.trainer.fsdp import unique_state_names

    keep = set(unique_state_names(engine.module))
    params, _ = engine.get_per_tensor_param()
    for name, tensor in params:
        if name in keep:
            yield name, tensor.detach()


def _where(rank: int) -> RankPlace:
    import ray

    return RankPlace(rank, ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id(),
                     tuple(str(g) for g in ray.get_gpu_ids()), os.getpid())


class ActorWorker(ActorRolloutRefWorker):
    """veRL's ``ActorRolloutRefWorker`` (role ``actor`` or ``ref``), started on rft's CPU
    shim where needed (:func:`prepare_rank`), with the ``rft_*`` methods the trainer calls
    (each runs on every rank, the result is rank 0's)."""

    def __init__(self, config: Any, role: str, **kwargs: Any) -> None:
        prepare_rank()
        super().__init__(config, role, **kwargs)

    def _engine(self) -> Any:
        return (self.actor if self.actor is not None else self.ref).engine

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_where(self) -> RankPlace:
        return _where(self.rank)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def rft_compute_log_prob_with_signal(self, data: Any) -> Any:
        """veRL's ``compute_log_prob`` on this rank's share of ``data`` with the expected
        entropy signals under ``sum_pi_squared`` (:mod:`rft_plugin_verl.entropy`)."""
        with expected_signal_as_sum_pi_squared():
            return self.compute_log_prob(data)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_model_facts(self) -> ModelFacts:
        return model_facts(self._engine().model_config.hf_config)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_weights(self, lora: Any = None) -> list[tuple[str, torch.Tensor]] | None:
        """Rank 0: the actor's full weights on the CPU (with ``lora``, a
        ``engine_state.LoraActor``: the adapter merged in); other ranks ``None``."""
        weights = (actor_weights(self._engine()) if lora is None
                   else states.lora_named_weights(self._engine(), lora))
        named = [(name, tensor.to("cpu", copy=True)) for name, tensor in weights]
        return named if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_adapter_weights(self, lora: Any) -> Any:
        """Rank 0: a LoRA actor's adapter (:class:`rft.adapter.AdapterWeights`)."""
        from rft_plugin_verl import lora as verl_lora

        engine = self._engine()
        weights = verl_lora.adapter_weights(engine, lora.spec(engine))  # a collective
        return weights if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_state(self, model_key: str, prefix: str, lora: Any = None
                  ) -> dict[str, Any] | None:
        state = (states.engine_state(self._engine(), model_key, prefix) if lora is None
                 else states.lora_state(self._engine(), lora))
        return state if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_load_state(self, state: dict[str, Any], model_key: str, prefix: str,
                       lora: bool = False) -> None:
        if lora:
            states.load_lora_state(self._engine(), state)
        else:
            states.load_engine_state(self._engine(), state, model_key, prefix)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_save_pretrained(self, path: str, lora: Any = None, merged: bool = False) -> None:
        module = self._engine().module
        if lora is not None:  # the adapter in peft's format, written by rank 0
            states.lora_export(self._engine(), lora, path, merged=merged,
                                            write=self.rank == 0)
            return
        full = dict(states.full_model_state(module))  # a collective
        if self.rank == 0:
            module.save_pretrained(path, state_dict=full)


class CriticWorker(TrainingWorker):
    """veRL's ``TrainingWorker`` (the critic's value-model engine) with the ``rft_*``
    methods of :class:`ActorWorker`."""

    def __init__(self, config: Any) -> None:
        prepare_rank()
        super().__init__(config)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_state(self, model_key: str, prefix: str) -> dict[str, Any] | None:
        state = states.engine_state(self.engine, model_key, prefix)
        return state if self.rank == 0 else None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_load_state(self, state: dict[str, Any], model_key: str, prefix: str) -> None:
        states.load_engine_state(self.engine, state, model_key, prefix)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rft_model_state(self) -> dict[str, torch.Tensor] | None:
        """Rank 0: the critic's full model state (tests compare it)."""
        state = dict(states.full_model_state(self.engine.module))
        return state if self.rank == 0 else None


# ---- the driver's side -----------------------------------------------------------------


@dataclass
class GroupStatus:
    """Shared by the worker groups spawned from one fused group."""

    workers: list[Any]
    places: list[RankPlace] = field(default_factory=list)
    failure: str | None = None
    """The first failure's line; every later call repeats it."""


class RankedWorkerGroup(RayWorkerGroup):
    """veRL's ``RayWorkerGroup`` whose registered methods wait on the ranks one result at
    a time (see the module docstring): veRL's own dispatch and collect functions, every
    method blocking (the critic's ``infer_batch`` / ``train_mini_batch`` return their
    result, not a future), failures one line naming the rank."""

    status: GroupStatus

    def _bind_worker_method(self, user_defined_cls: Any, func_generator: Any) -> list[str]:
        return super()._bind_worker_method(user_defined_cls, _checked_method)

    def spawn_fused(self, prefix_set: Any) -> dict[str, Any]:
        groups = super().spawn_fused(prefix_set)
        for group in groups.values():  # deep copies: share the one status
            group.status = self.status
        return groups

    def wait(self, refs: list[Any], what: str) -> list[Any]:
        """Results of one call per rank (``refs[i]`` on rank ``i``); the first failure
        stops the ranks and raises one line naming the rank (a rank that died, not the
        live one whose collective failed because of it:
        :func:`rft.trainer.rank_waits.wait_for_ranks`)."""
        status = self.status
        if status.failure is not None:
            raise RftError(f"trainer: its veRL ranks were stopped after: {status.failure}")
        return wait_for_ranks(refs, what, self._on, self._fail)

    def _on(self, rank: int) -> str:
        places = self.status.places
        if rank < len(places):
            return f" (node {places[rank].node_ip}, pid {places[rank].pid})"
        return ""

    def _fail(self, message: str) -> NoReturn:
        import ray

        self.status.failure = message
        for worker in self.status.workers:  # the others wait in a collective for it
            with contextlib.suppress(Exception):  # already gone
                ray.kill(worker)
        raise RftError(message)


def _checked_method(group: RankedWorkerGroup, method_name: str, dispatch_fn: Any,
                    collect_fn: Any, execute_fn: Any, blocking: bool) -> Any:
    """A registered method of ``group``: veRL's ``dispatch_fn`` → one call per rank →
    :meth:`RankedWorkerGroup.wait` → veRL's ``collect_fn`` (veRL's ``func_generator``
    with the wait replaced)."""
    from verl.protocol import _padding_size_key

    def call(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = dispatch_fn(group, *args, **kwargs)
        if kwargs.pop(_padding_size_key, 0):
            raise RftError(f"trainer: veRL padded the batch of {method_name} to split it over "
                           "the ranks; the verl trainer sends batches the ranks divide")
        refs = execute_fn(method_name, *args, **kwargs)
        single = not isinstance(refs, list)
        results = group.wait([refs] if single else refs, method_name)
        return collect_fn(group, results[0] if single else results)

    return type(method_name, (), {"__call__": staticmethod(call)})()


# ---- building the groups ---------------------------------------------------------------


def ranks_use_gpus() -> bool:
    """Whether the ranks take GPUs: the Ray cluster has some (Ray not started yet: this
    machine has a CUDA device, as the private cluster will run here)."""
    import ray

    if ray.is_initialized():
        return float(ray.cluster_resources().get("GPU", 0)) > 0
    return not cpu_platform.needed()


@dataclass
class VerlGroups:
    """The worker groups of a trainer with several ranks, and what to release."""

    actor: Any
    ref: Any | None
    critic: Any | None
    status: GroupStatus
    placement_groups: list[Any]
    line: str
    """The placement line (printed at start-up)."""
    started_ray: bool = False

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for worker in self.status.workers:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(worker)
        self.status.workers = []
        for pg in self.placement_groups:
            with contextlib.suppress(Exception):  # already removed
                remove_placement_group(pg)
        self.placement_groups = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False


def _fused_init(raw: type) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        prepare_rank()  # before veRL's Worker asks for the platform
        raw_init: Callable[..., None] = getattr(raw, "__init__")  # the fused class's own
        raw_init(self, *args, **kwargs)

    return __init__


def build(*, name: str, ranks: int, cpu: bool, timeout_s: float,
          roles: dict[str, tuple[type, tuple[Any, ...], dict[str, Any]]]) -> VerlGroups:
    """Place ``ranks`` ranks as the native trainer does (:mod:`rft.trainer.ranks`: one
    placement group of a bundle per rank, PACK, ranks in bundle order; ``cpu``: bundles of
    one CPU, else one GPU and one CPU), start one fused veRL worker per rank holding ``roles`` (role →
    ``(class, args, kwargs)``: ``actor`` / ``ref`` :class:`ActorWorker`, ``critic``
    :class:`CriticWorker`), and return one worker group per role.

    :raises RftError: the cluster cannot hold the ranks, or a rank fails to start.
    """
    import ray
    from ray.util.placement_group import placement_group
    from verl.single_controller.ray.base import (
        RayClassWithInitArgs,
        RayResourcePool,
        create_colocated_worker_raw_cls,
    )

    started_ray = False
    if not ray.is_initialized():  # a process without Ray (mode train): a private one
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1")
        started_ray = True
    placement_groups: list[Any] = []
    status = GroupStatus(workers=[])
    try:
        bundle = {"CPU": 1.0} if cpu else {"CPU": 1.0, "GPU": 1.0}
        kind = "CPU" if cpu else "GPU"
        total = float(ray.cluster_resources().get(kind, 0))
        if total < ranks:
            raise RftError(f"trainer {name!r}: {ranks} veRL ranks need {ranks} {kind}s (one "
                           f"each) but the Ray cluster has {total:g} in all")
        placement_groups = [placement_group([dict(bundle) for _ in range(ranks)],
                                            strategy="PACK")]
        try:
            ray.get(placement_groups[0].ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            have = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            raise RftError(f"trainer {name!r}: cannot place {ranks} veRL ranks of {bundle} "
                           f"each within {timeout_s:g} s; the cluster has {have} free") from None
        # veRL's resource pool over that placement group: rank i in bundle i
        pool = RayResourcePool(process_on_nodes=[ranks], use_gpu=not cpu, max_colocate_count=1,
                               name_prefix=f"{name}_verl_")
        pool.pgs = placement_groups
        class_dict = {role: RayClassWithInitArgs(ray.remote(cls), *args, **kwargs)
                      for role, (cls, args, kwargs) in roles.items()}
        raw = create_colocated_worker_raw_cls(class_dict)
        fused = type(raw.__name__, (raw,), {"__init__": _fused_init(raw)})
        cia = RayClassWithInitArgs(cls=ray.remote(fused))
        cia.fused_worker_used = True
        cia.update_options({"num_cpus": 1})
        env = {TIMEOUT_ENV: str(timeout_s), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS",
                                                                             "1")}
        if cpu:
            env[CPU_ENV] = "1"
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=6))
        # the group's methods need .status before they run; RayWorkerGroup binds them in
        # __init__, and its Ray calls happen only when they are called
        group = RankedWorkerGroup.__new__(RankedWorkerGroup)
        group.status = status
        group_init: Callable[..., None] = RankedWorkerGroup.__init__  # veRL's, untyped here
        group_init(group, resource_pool=pool, ray_cls_with_init=cia,
                   name_prefix=f"{name}_{suffix}_", worker_env=env,
                   device_name="cpu" if cpu else "cuda")
        status.workers = list(group.workers)
        spawned = group.spawn(prefix_set=set(roles))
        places = spawned["actor"].rft_where()
        status.places = list(places)
        groups = VerlGroups(actor=spawned["actor"], ref=spawned.get("ref"),
                            critic=spawned.get("critic"), status=status,
                            placement_groups=placement_groups, line="",
                            started_ray=started_ray)
        groups.line = placement_line(name, status.places, cpu, list(roles))
        return groups
    except BaseException:
        VerlGroups(actor=None, ref=None, critic=None, status=status,
                   placement_groups=placement_groups, line="", started_ray=started_ray).close()
        raise


def placement_line(name: str, places: list[RankPlace], cpu: bool, roles: list[str]) -> str:
    """One line: ranks per node, the devices of each rank, the roles each rank holds."""
    by_node: dict[str, list[RankPlace]] = {}
    for place in places:
        by_node.setdefault(place.node_id, []).append(place)
    parts = []
    for node_id, node_places in by_node.items():
        ranks = ", ".join(str(p.rank) for p in node_places)
        devices = ("1 CPU each" if cpu
                   else "GPU " + ", ".join(g for p in node_places for g in p.gpus))
        parts.append(f"node {node_places[0].node_ip} ({node_id[:8]}): ranks {ranks} "
                     f"({devices})")
    backend = "gloo" if cpu else "nccl"
    return (f"trainer {name!r}: {len(places)} veRL ranks ({'+'.join(roles)} in each) over "
            f"{len(by_node)} node(s), {backend}; " + "; ".join(parts))


def announce(line: str) -> None:
    """Print the placement line as the native trainer does, on stderr (from the trainer's
    Ray actor in mode ``both``, which Ray forwards to the run's console)."""
    log.info("%s", line)
    print(f"rft: {line}", file=sys.stderr, flush=True)


__all__ = ["ActorWorker", "CriticWorker", "ModelFacts", "RankPlace", "RankedWorkerGroup",
           "VerlGroups", "build", "model_facts", "prepare_rank", "ranks_use_gpus"]
