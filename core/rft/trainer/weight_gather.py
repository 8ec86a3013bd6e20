"""Whole weights out of a sharded trainer, one tensor at a time, into caller-given bytes.

A weight sync must not hold the model twice. :func:`take_snapshot` keeps, on every rank,
a host copy of *its shards* of the actor's tensors (``1/N`` of the model per rank) as the
version handed out, so training goes on meanwhile. :func:`gather_into` then assembles
one whole tensor on rank 0 straight into a byte range of the caller's buffer (a bucket of
the weight broadcast): rank 0 copies its own rows in and receives every other rank's
rows into their place (point-to-point over the ranks' gloo ``sync_group``, which no
training collective uses), so the sending rank holds nothing beyond its buffer. Every rank
calls it for the same tensors in the same order.

FSDP2 shards each tensor by rows (dim 0) the way ``torch.chunk`` splits it: rank ``r``
holds rows ``[r·c, min((r+1)·c, d₀))`` with ``c = ⌈d₀ / N⌉`` (possibly none). Tensors that
are not sharded (buffers) are copied by rank 0 alone.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from rft.errors import RftError
from rft.trainer.fsdp import unique_state_names


@dataclass(frozen=True)
class TensorMeta:
    """One tensor of the snapshot, as every rank knows it."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    sharded: bool

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def rows(self, rank: int, world_size: int) -> tuple[int, int]:
        """``(first row, row count)`` of rank ``rank``'s shard."""
        total = self.shape[0] if self.shape else 1
        per = -(-total // world_size)
        first = min(rank * per, total)
        return first, max(0, min(first + per, total) - first)


@dataclass
class ShardSnapshot:
    """A rank's host copy of its shards of the actor (see the module docstring)."""

    rank: int
    world_size: int
    meta: list[TensorMeta]
    pieces: list[torch.Tensor | None]
    """This rank's rows of each tensor (``None``: none; unsharded tensors on rank 0 only)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def take_snapshot(actor: torch.nn.Module, rank: int, world_size: int,
                  dtype: torch.dtype | None = None) -> ShardSnapshot:
    """Copy this rank's shards of ``actor``'s tensors (each shared tensor once) to host
    memory, floating-point ones in ``dtype`` (the rollout engine's; ``None``: their own).
    No collective."""
    from torch.distributed.tensor import DTensor

    state = actor.state_dict()
    meta: list[TensorMeta] = []
    pieces: list[torch.Tensor | None] = []
    for name in unique_state_names(actor):
        value = state[name]
        sharded = isinstance(value, DTensor)
        cast = dtype if dtype is not None and value.is_floating_point() else value.dtype
        item = TensorMeta(name, tuple(value.shape), cast, sharded)
        if sharded:
            local = value.to_local().detach()
            _, count = item.rows(rank, world_size)
            local_rows = local.shape[0] if local.dim() else 1
            if local_rows != count:
                raise RftError(f"trainer: shard of {name} on rank {rank} has {local_rows} "
                               f"rows, expected {count} (not FSDP2's row sharding)")
            pieces.append(local.to("cpu", cast, copy=True).contiguous() if count else None)
        else:
            pieces.append(value.detach().to("cpu", cast, copy=True).contiguous() if rank == 0
                          else None)
        meta.append(item)
    return ShardSnapshot(rank, world_size, meta, pieces)


def gather_into(snapshot: ShardSnapshot, index: int, out: torch.Tensor | None,
                group: dist.ProcessGroup | None) -> None:
    """Assemble tensor ``index`` of the snapshot on rank 0 into ``out`` (a contiguous
    ``uint8`` tensor of exactly its bytes; ``None`` on the other ranks). A collective over
    ``group`` (every rank calls it for the same ``index``)."""
    item = snapshot.meta[index]
    rank, world = snapshot.rank, snapshot.world_size
    piece = snapshot.pieces[index]
    if rank == 0:
        assert out is not None and out.numel() == item.nbytes, (item.name, out)
    if not item.sharded:
        if rank == 0:
            assert piece is not None and out is not None
            out.copy_(piece.reshape(-1).view(torch.uint8))
        return
    row_bytes = item.nbytes // item.shape[0] if item.shape and item.shape[0] else item.nbytes
    try:
        if rank == 0:
            assert out is not None  # checked above
            for source in range(world):
                first, count = item.rows(source, world)
                if not count:
                    continue
                target = out[first * row_bytes: (first + count) * row_bytes]
                if source == 0:
                    assert piece is not None
                    target.copy_(piece.reshape(-1).view(torch.uint8))
                else:
                    dist.recv(target, src=source, group=group)
        elif piece is not None:
            dist.send(piece.reshape(-1).view(torch.uint8), dst=0, group=group)
    except (RuntimeError, dist.DistError) as exc:
        raise RftError(f"trainer rank {rank} of {world}: gathering {item.name} for a weight "
                       f"sync failed (a rank died or timed out): "
                       f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}"
                       ) from exc


__all__ = ["ShardSnapshot", "TensorMeta", "gather_into", "take_snapshot"]
