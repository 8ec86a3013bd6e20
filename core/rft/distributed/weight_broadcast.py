"""``sync_method: nccl`` — the trainer broadcasts its weights to the rollout engines.

A process group of its own (not torch's default group, which vLLM and the trainer may use
for themselves): rank 0 is the trainer actor, ranks 1 … N the processes holding a rollout
model (the explorer actor, or each engine replica when ``engine_num > 1``). The trainer
hosts the rendezvous (a ``TCPStore`` listening on its node's address only — loopback on
rft's private local cluster — at a free port). The backend is NCCL when the trainer's
model is on CUDA and gloo otherwise, so the same code runs on a CPU machine (where the
tests run it) and on GPUs.

An engine whose model lives in processes of its own (vLLM's workers: one per
tensor-parallel rank, in the engine-core process or further ones) implements
:class:`JoinsWeightGroup`: each of its workers joins as a rank of its own and receives the
weights where they are loaded, so no copy passes through the process holding the engine.
Other engines (``hf``) are joined by :class:`EngineEnd` in their holding process.

One sync: every rank walks the same :class:`TensorSpec` list (names, shapes, dtypes, in
the trainer's order), packs it into byte buckets of at most ``bucket_bytes`` and
broadcasts each bucket from rank 0; receivers unpack views into their own tensors and load
them into the engine in place (``update_weights``, vLLM's ``reload_weights`` iterator) as
each bucket arrives (:meth:`BroadcastGroup.stream`): a receiver holds one or two buckets
(:data:`BUCKET_BYTES`), never the whole model. The trainer sends floating-point tensors in
the rollout engine's dtype (:func:`engine_dtype`: ``bfloat16`` by default — half the bytes
of the trainer's fp32 master copy). Bytes, not typed tensors, go over the wire, so every
dtype travels the same way::

    offset_i = ⌈(offset_{i−1} + nbytes_{i−1}) / 16⌉ · 16  (aligned, so any dtype can view it)
    bucket_k[offset_i : offset_i + nbytes_i] = bytes(t_i)   (rank 0)
    broadcast(bucket_k, root = 0)                           (all ranks)
    t_i = bucket_k[offset_i : offset_i + nbytes_i].view(dtype_i).reshape(shape_i)
"""

from __future__ import annotations

import datetime
import json
import math
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist

from rft.errors import RftError

if TYPE_CHECKING:
    from rft.engines.engine import InferenceEngine

BUCKET_BYTES = 256 * 1024 * 1024
"""Largest byte bucket of one broadcast (a trade between calls and peak memory)."""

ALIGN = 16
"""Byte alignment of each tensor inside a bucket."""


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the broadcast, as every rank must know it beforehand."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def to_plain(self) -> list:
        """``[name, shape, dtype name]``: survives any serializer (vLLM's msgpack RPC)."""
        return [self.name, list(self.shape), str(self.dtype).removeprefix("torch.")]

    @classmethod
    def from_plain(cls, plain: Sequence) -> TensorSpec:
        name, shape, dtype = plain
        return cls(str(name), tuple(int(n) for n in shape), getattr(torch, dtype))


@dataclass(frozen=True)
class Broadcast:
    """What the explorer is handed instead of weights: receive ``spec`` from the group."""

    spec: tuple[TensorSpec, ...]


_ENGINE_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                  "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
                  "float32": torch.float32, "fp32": torch.float32}


def engine_dtype(name: str, model_path: str | None = None) -> torch.dtype | None:
    """The dtype weights are sent in for an engine of ``explorer.rollout_model.dtype``
    ``name``; for ``auto`` the half-precision dtype of the checkpoint's ``config.json`` at
    ``model_path`` (``torch_dtype`` / ``dtype``), as vLLM picks it; ``None`` otherwise (the
    trainer's own dtype)."""
    if name != "auto":
        return _ENGINE_DTYPES.get(name)
    if not model_path:
        return None
    try:
        with open(os.path.join(os.path.expanduser(model_path), "config.json"),
                  encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):  # a hub id or no config: the trainer's dtype
        return None
    dtype = _ENGINE_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    return dtype if dtype in (torch.bfloat16, torch.float16) else None


def in_dtype(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``tensor`` cast to ``dtype`` when both are floating point (integer buffers keep
    theirs)."""
    if dtype is None or not tensor.is_floating_point() or tensor.dtype == dtype:
        return tensor
    return tensor.to(dtype)


def spec_of(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> tuple[TensorSpec, ...]:
    """The spec of ``named_tensors``, in their order."""
    return tuple(TensorSpec(name, tuple(t.shape), t.dtype) for name, t in named_tensors)


def buckets(spec: Sequence[TensorSpec], limit: int = BUCKET_BYTES) -> list[list[int]]:
    """Consecutive indices of ``spec`` grouped so each group has at most ``limit`` bytes (a
    larger tensor goes alone)."""
    groups: list[list[int]] = []
    size = 0
    for index, item in enumerate(spec):
        padded = -(-item.nbytes // ALIGN) * ALIGN
        if not groups or size + padded > limit:
            groups.append([])
            size = 0
        groups[-1].append(index)
        size += padded
    return groups


def layout(spec: Sequence[TensorSpec], group: Sequence[int]) -> tuple[list[int], int]:
    """Byte offsets of the tensors ``group`` of ``spec`` inside their bucket (each aligned
    to :data:`ALIGN`), and the bucket's size."""
    offsets: list[int] = []
    end = 0
    for i in group:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + spec[i].nbytes
    return offsets, end


def pack(tensors: Sequence[torch.Tensor], limit: int = BUCKET_BYTES,
         device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """The byte buckets of ``tensors`` on ``device``, as rank 0 broadcasts them (a snapshot
    can be packed once, ahead of its broadcast)."""
    spec = spec_of((str(i), t) for i, t in enumerate(tensors))
    packed: list[torch.Tensor] = []
    for group in buckets(spec, limit):
        offsets, size = layout(spec, group)
        buffer = torch.zeros(size, dtype=torch.uint8, device=device)  # (bytes,)
        for i, offset in zip(group, offsets, strict=True):
            raw = tensors[i].detach().contiguous().reshape(-1).view(torch.uint8)
            buffer[offset: offset + raw.numel()].copy_(raw)
        packed.append(buffer)
    return packed


@dataclass(frozen=True)
class GroupAddress:
    """Where and how the ranks ≥ 1 join: the trainer's rendezvous, and what it decided."""

    host: str
    port: int
    world_size: int
    backend: str
    """``nccl`` (trainer on CUDA) or ``gloo``; every rank must use the same."""
    timeout_s: float


def host_rendezvous(world_size: int, device: torch.device, timeout_s: float
                    ) -> tuple[dist.TCPStore, GroupAddress]:
    """Rank 0's store on this node's address and a free port, and the address to hand out.

    The store listens on that address only — ``127.0.0.1`` on rft's private local Ray
    cluster (:mod:`rft.distributed.cluster`), the node's network address on any other —
    not on every interface, where torch's ``TCPStore`` binds its own socket (``::``): it is
    handed a socket bound here (``master_listen_fd``)."""
    import ray

    host = ray.util.get_node_ip_address()
    listener = listen_on(host)
    try:
        store = dist.TCPStore(host, listener.getsockname()[1], world_size, is_master=True,
                              wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=timeout_s),
                              master_listen_fd=listener.fileno(), use_libuv=True)
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns the socket now (and closes it)
    backend = "nccl" if device.type == "cuda" else "gloo"
    return store, GroupAddress(host, store.port, world_size, backend, timeout_s)


def listen_on(host: str) -> socket.socket:
    """A TCP socket listening on ``host`` (an IPv4 or IPv6 address) at a free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.bind((host, 0))
        listener.listen(socket.SOMAXCONN)
    except OSError as exc:
        listener.close()
        raise RftError(f"synchronizer (nccl): cannot listen on {host} for the "
                       f"weight-broadcast group: {exc.strerror or exc}") from exc
    return listener


class BroadcastGroup:
    """One rank of the weight-broadcast group (see the module docstring)."""

    def __init__(self, address: GroupAddress, rank: int,
                 store: dist.TCPStore | None = None) -> None:
        timeout = datetime.timedelta(seconds=address.timeout_s)
        self.rank, self.world_size, self.backend = rank, address.world_size, address.backend
        self.device = torch.device("cuda" if address.backend == "nccl" else "cpu")
        where = f"{address.host}:{address.port}"
        try:
            if store is None:
                store = dist.TCPStore(address.host, address.port, address.world_size,
                                      is_master=False, timeout=timeout)
            self.store = store
            if self.backend == "nccl":
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                # torch's stubs give its c10d backends no collectives (they have them)
                self.group: Any = dist.ProcessGroupNCCL(
                    store, rank, address.world_size, options)
            else:
                self.group = dist.ProcessGroupGloo(store, rank, address.world_size, timeout)
        except (RuntimeError, dist.DistError) as exc:
            raise RftError(f"synchronizer (nccl): rank {rank} of {address.world_size} could not "
                           f"join the weight-broadcast group at {where} ({self.backend}) within "
                           f"{address.timeout_s:.0f} s: {str(exc).splitlines()[0]}") from exc

    def _broadcast(self, buffer: torch.Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        try:
            self.group.broadcast([buffer], options).wait()
        except (RuntimeError, dist.DistError) as exc:
            raise RftError(f"synchronizer (nccl): weight broadcast failed on rank {self.rank} "
                           f"of {self.world_size} ({self.backend}): "
                           f"{str(exc).splitlines()[0]}") from exc

    def send(self, tensors: Sequence[torch.Tensor], limit: int = BUCKET_BYTES) -> None:
        """Rank 0: broadcast ``tensors`` (in the spec's order)."""
        self.send_packed(pack(tensors, limit, self.device))

    def send_packed(self, packed: Sequence[torch.Tensor]) -> None:
        """Rank 0: broadcast buckets made by :func:`pack` (moved to this group's device)."""
        for bucket in packed:
            self._broadcast(bucket.to(self.device))

    def stream(self, spec: Sequence[TensorSpec], limit: int = BUCKET_BYTES,
               empty: Callable[..., torch.Tensor] = torch.empty
               ) -> Iterator[tuple[int, str, torch.Tensor]]:
        """Ranks ≥ 1: ``(index, name, tensor)`` of each tensor of ``spec`` in order, on this
        rank's device, received bucket by bucket: a bucket is received when the consumer
        asks for its first tensor, and this generator drops it before the next one, so
        the bytes held are one bucket plus what the consumer keeps. The consumer must read
        to the end (every rank takes part in every bucket's broadcast). ``empty``
        allocates each bucket (``torch.empty``)."""
        for group in buckets(spec, limit):
            offsets, size = layout(spec, group)
            buffer = empty(size, dtype=torch.uint8, device=self.device)  # (bytes,)
            self._broadcast(buffer)
            for i, offset in zip(group, offsets, strict=True):
                item = spec[i]
                chunk = buffer[offset: offset + item.nbytes]
                yield i, item.name, chunk.view(item.dtype).reshape(item.shape)
            del buffer, chunk  # the next bucket is allocated without this one

    def receive(self, spec: Sequence[TensorSpec], limit: int = BUCKET_BYTES
                ) -> list[tuple[str, torch.Tensor]]:
        """Ranks ≥ 1: all the tensors of ``spec`` at once (the whole model: prefer
        :meth:`stream`)."""
        return [(name, tensor) for _, name, tensor in self.stream(spec, limit)]

    def close(self) -> None:
        shutdown = getattr(self.group, "shutdown", None)
        if callable(shutdown):
            try:
                shutdown()
            except RuntimeError:  # already torn down
                pass


@runtime_checkable
class JoinsWeightGroup(Protocol):
    """An engine whose workers join the broadcast group themselves (one rank each)."""

    def weight_group_ranks(self) -> int:
        """How many ranks the engine's workers take in the group."""
        ...

    def join_weight_group(self, address: GroupAddress, first_rank: int) -> None:
        """Worker ``i`` joins as rank ``first_rank + i`` (returns once all ranks joined)."""
        ...

    def receive_broadcast(self, broadcast: Broadcast, version: int) -> None:
        """Every worker receives ``broadcast`` and loads it in place as ``version``."""
        ...

    def leave_weight_group(self) -> None:
        ...


class EngineEnd:
    """The engine side of the group, in the process holding a rollout ``engine`` (the
    explorer actor, or an engine replica). An engine implementing :class:`JoinsWeightGroup`
    joins through its workers; any other is joined here as one rank, and the received
    tensors go to its ``update_weights``. Its calls are those of
    :class:`~rft.distributed.engine_pool.EnginePool`, which stands in for it when the
    explorer holds several engines."""

    def __init__(self, engine: InferenceEngine) -> None:
        self.engine = engine
        self.workers = engine if isinstance(engine, JoinsWeightGroup) else None
        self.group: BroadcastGroup | None = None
        self.joined = False

    def weight_group_ranks(self) -> int:
        return self.workers.weight_group_ranks() if self.workers is not None else 1

    def join_weight_group(self, address: GroupAddress, first_rank: int = 1) -> None:
        if self.workers is not None:
            self.workers.join_weight_group(address, first_rank)
        else:
            self.group = BroadcastGroup(address, first_rank)
        self.joined = True

    def receive_broadcast(self, broadcast: Broadcast, version: int) -> None:
        """Receive the weights of ``broadcast`` and load them into the engine as ``version``."""
        if not self.joined:
            raise RftError("synchronizer (nccl): this engine has not joined the weight-broadcast "
                           "group")
        if self.workers is not None:
            self.workers.receive_broadcast(broadcast, version)
            return
        assert self.group is not None
        tensors = ((name, tensor) for _, name, tensor in self.group.stream(broadcast.spec))
        self.engine.update_weights(tensors, version=version)

    def close(self) -> None:
        if self.joined and self.workers is not None:
            self.workers.leave_weight_group()
        if self.group is not None:
            self.group.close()
            self.group = None
        self.joined = False
