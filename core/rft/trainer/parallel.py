"""The process group of a sharded trainer, seen from one rank, and how a batch is split
over the ranks.

Every rank of a sharded :class:`~rft.trainer.torch_trainer.TorchTrainer` receives the
whole batch (token ids are small next to the model). What is per row — forward passes
for old / reference log-probs and values, and the forward / backward passes of the
update — is split over the ranks; what needs every row — advantages (group statistics),
data metrics — every rank computes identically from the whole batch.

Splitting a mini-batch over ranks (:func:`balance_units`) balances their *token* counts
(veRL's ``balance_batch`` balances the same quantity): units (one row, or a preference
pair) in decreasing size go to the rank with the fewest tokens so far (ties to the lower
rank); each rank keeps its units in batch order. Ranks may get different numbers of rows
(an odd batch over two ranks) or none (fewer units than ranks): every rank then runs the
same number of micro-batches — the largest count over the ranks, agreed with one
all-reduce — padding with *dummy* micro-batches whose loss is multiplied by zero, since
every FSDP forward / backward is a collective all ranks take part in.

Sharded gradients are *summed* over ranks (not averaged), and each rank's micro-batch
losses are normalised by the token / sequence counts of the whole mini-batch (the sum of
the ranks' counts, all-reduced), so the ranks' gradients add up to the one-process
gradient of the same mini-batch (``agg_loss(dp_size=1)`` in :mod:`rft.ops`).
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from rft.errors import RftError


def balance_units(units: Sequence[Sequence[int]], lengths: torch.Tensor,
                  parts: int) -> list[list[int]]:
    """``units`` (lists of row indices) over ``parts`` ranks with balanced token counts
    (``lengths[row]`` tokens per row); each part lists its rows in batch order."""
    if parts <= 1:
        return [[row for unit in units for row in unit]]
    sizes = [int(sum(int(lengths[row]) for row in unit)) for unit in units]
    order = sorted(range(len(units)), key=lambda i: (-sizes[i], i))
    load = [0] * parts
    count = [0] * parts
    chosen: list[list[int]] = [[] for _ in range(parts)]
    for i in order:
        rank = min(range(parts), key=lambda r: (load[r], count[r], r))
        chosen[rank].append(i)
        load[rank] += sizes[i]
        count[rank] += 1
    return [[row for i in sorted(picked) for row in units[i]] for picked in chosen]


def process_group_backend(device_type: str, cpu_offload: bool) -> str:
    """The backend string of the trainer's process group: ``gloo`` on CPU, ``nccl`` on
    CUDA — and ``cpu:gloo,cuda:nccl`` on CUDA with FSDP2's ``CPUOffloadPolicy``, whose
    gradient clipping and weight gathering run collectives on CPU DTensors (a plain
    ``nccl`` group fails them: "No backend type associated with device type cpu"), as
    veRL and TorchTitan initialise it."""
    if device_type != "cuda":
        return "gloo"
    return "cpu:gloo,cuda:nccl" if cpu_offload else "nccl"


@dataclass
class RankGroup:
    """One rank's view of the trainer's process group (``torch.distributed``)."""

    rank: int
    world_size: int
    device: torch.device
    """This rank's device (``cuda`` on GPUs: Ray shows each rank its own GPU as 0)."""
    backend: str
    """:func:`process_group_backend`: ``nccl`` or ``cpu:gloo,cuda:nccl`` (CUDA), ``gloo``."""
    timeout_s: float
    """Collective timeout (``synchronizer.sync_timeout``)."""
    mesh: Any
    """The 1-D ``DeviceMesh`` FSDP2 shards over."""
    cpu_group: Any
    """A gloo group over the same ranks for host-side exchanges (plans, metrics): the
    default group itself on CPU, a second one on GPUs."""
    sync_group: Any
    """A second gloo group for weight gathering beside a training step (weight syncs run
    in a thread of their own; collectives of one group must not interleave)."""

    @classmethod
    def initialize(cls, rank: int, world_size: int, master_addr: str, master_port: int,
                   device: torch.device, timeout_s: float, cpu_offload: bool = False
                   ) -> RankGroup:
        """Join the group at ``master_addr:master_port`` (rank 0's node address) as
        ``rank``; returns once all ranks have joined (or raises after ``timeout_s``).
        ``cpu_offload``: some model is sharded with ``CPUOffloadPolicy``
        (:func:`process_group_backend`)."""
        from torch.distributed.device_mesh import init_device_mesh

        backend = process_group_backend(device.type, cpu_offload)
        timeout = datetime.timedelta(seconds=timeout_s)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        try:
            store = rendezvous_store(rank, world_size, master_addr, master_port, timeout)
            dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                    timeout=timeout)
            mesh = init_device_mesh(device.type, (world_size,))
            cpu_group = (dist.group.WORLD if backend == "gloo"
                         else dist.new_group(backend="gloo", timeout=timeout))
            sync_group = dist.new_group(backend="gloo", timeout=timeout)
        except (RuntimeError, OSError, dist.DistError) as exc:
            raise RftError(f"trainer rank {rank} of {world_size}: could not join the trainer's "
                           f"process group at {master_addr}:{master_port} ({backend}) within "
                           f"{timeout_s:g} s: {_first_line(exc)}") from exc
        return cls(rank, world_size, device, backend, timeout_s, mesh, cpu_group, sync_group)

    # ---- host-side collectives (every rank calls them in the same order) -------------

    def max_int(self, value: int) -> int:
        """The largest ``value`` over the ranks."""
        tensor = torch.tensor([value], dtype=torch.long)
        self._all_reduce(tensor, dist.ReduceOp.MAX, "agree on micro-batch counts")
        return int(tensor.item())

    def sum_tensor(self, tensor: torch.Tensor, what: str) -> torch.Tensor:
        """Element-wise sum over the ranks of a CPU tensor (in place; returned)."""
        self._all_reduce(tensor, dist.ReduceOp.SUM, what)
        return tensor

    def gather_objects(self, value: Any, what: str) -> list[Any]:
        """Every rank's ``value``, in rank order."""
        out: list[Any] = [None] * self.world_size
        try:
            dist.all_gather_object(out, value, group=self.cpu_group)
        except (RuntimeError, dist.DistError) as exc:
            raise self._failed(what, exc) from exc
        return out

    def barrier(self, what: str) -> None:
        """Wait until every rank has called it (on the host-side group)."""
        try:
            dist.barrier(group=self.cpu_group)
        except (RuntimeError, dist.DistError) as exc:
            raise self._failed(what, exc) from exc

    def _all_reduce(self, tensor: torch.Tensor, op: Any, what: str) -> None:
        try:
            dist.all_reduce(tensor, op=op, group=self.cpu_group)
        except (RuntimeError, dist.DistError) as exc:
            raise self._failed(what, exc) from exc

    def _failed(self, what: str, exc: BaseException) -> RftError:
        return RftError(f"trainer rank {self.rank} of {self.world_size}: collective '{what}' "
                        f"failed (a rank died or waited more than {self.timeout_s:g} s): "
                        f"{_first_line(exc)}")

    def close(self) -> None:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except (RuntimeError, AssertionError, ValueError):  # already torn down
                pass


def rendezvous_store(rank: int, world_size: int, master_addr: str, master_port: int,
                     timeout: datetime.timedelta) -> dist.TCPStore:
    """The group's ``TCPStore``: rank 0 hosts it on ``master_addr`` only (loopback on rft's
    private local cluster, the node's address otherwise) — torch's own ``tcp://`` store
    would listen on every interface (``::``) — and the other ranks connect to it."""
    if rank != 0:
        return dist.TCPStore(master_addr, master_port, world_size, is_master=False,
                             timeout=timeout)
    family = socket.AF_INET6 if ":" in master_addr else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.bind((master_addr, master_port))
        listener.listen(socket.SOMAXCONN)
        store = dist.TCPStore(master_addr, master_port, world_size, is_master=True,
                              wait_for_workers=False, timeout=timeout,
                              master_listen_fd=listener.fileno(), use_libuv=True)
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns the socket now (and closes it)
    return store


def free_port() -> int:
    """A free TCP port on this node (rank 0's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def cpu_threads(default: int = 1) -> int:
    """Threads a CPU rank may use: ``OMP_NUM_THREADS`` when set, else ``default``."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", default)))
    except ValueError:
        return default


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["RankGroup", "balance_units", "cpu_threads", "free_port"]
