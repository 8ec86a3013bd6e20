"""``sync_method: nccl``'s weight broadcast, over gloo on this CPU machine: byte buckets
with mixed dtypes arrive bit for bit; a rank that never comes is a one-line error."""

from __future__ import annotations

import os
import threading

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from rft.distributed.weight_broadcast import (  # noqa: E402
    ALIGN, BroadcastGroup, GroupAddress, TensorSpec, buckets, host_rendezvous, layout, spec_of)
from rft.errors import RftError  # noqa: E402


def _tensors() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [("a.weight", torch.randn(3, 5, generator=g)),  # 60 bytes: the next one is padded
            ("b.half", torch.randn(7, generator=g).to(torch.bfloat16)),  # 14 bytes
            ("c.ids", torch.randint(-5, 5, (4, 2), generator=g)),  # int64
            ("d.big", torch.randn(300, generator=g, dtype=torch.float64)),  # alone in a bucket
            ("e.scalar", torch.tensor(2.5))]


def test_buckets_and_layout_align_every_tensor() -> None:
    spec = spec_of(_tensors())
    assert spec[1] == TensorSpec("b.half", (7,), torch.bfloat16) and spec[1].nbytes == 14
    groups = buckets(spec, limit=512)
    assert groups == [[0, 1, 2], [3], [4]]  # d (2400 bytes) exceeds the limit: alone
    offsets, size = layout(spec, groups[0])
    assert offsets == [0, 64, 80] and size == 80 + 64
    assert all(o % ALIGN == 0 for o in offsets)


@pytest.mark.parametrize("ranks", [2, 3])
def test_broadcast_delivers_every_tensor_bit_for_bit(ranks: int) -> None:
    named = _tensors()
    store, address = host_rendezvous(ranks, torch.device("cpu"), timeout_s=30)
    assert address.backend == "gloo" and address.port > 0
    received: dict[int, list[tuple[str, torch.Tensor]]] = {}
    errors: list[BaseException] = []

    def receiver(rank: int) -> None:
        try:
            group = BroadcastGroup(address, rank)
            received[rank] = group.receive(spec_of(named), limit=512)
            received[rank] += group.receive(spec_of(named[:1]), limit=512)  # a second sync
        except BaseException as exc:  # noqa: BLE001 (re-raised in the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=receiver, args=(r,)) for r in range(1, ranks)]
    for thread in threads:
        thread.start()
    sender = BroadcastGroup(address, 0, store=store)
    sender.send([t for _, t in named], limit=512)
    sender.send([named[0][1] * 2], limit=512)
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    for rank in range(1, ranks):
        got = received[rank]
        assert [name for name, _ in got] == [name for name, _ in named] + ["a.weight"]
        for (_, expected), (_, tensor) in zip(named, got[:-1], strict=True):
            assert tensor.dtype == expected.dtype and torch.equal(tensor, expected)
        assert torch.equal(got[-1][1], named[0][1] * 2)
    sender.close()


def test_a_rank_that_never_joins_is_a_one_line_error() -> None:
    store, address = host_rendezvous(2, torch.device("cpu"), timeout_s=2)
    with pytest.raises(RftError, match=r"^synchronizer \(nccl\): rank 0 of 2 could not join "
                                       r"the weight-broadcast group at .*:\d+ \(gloo\) within 2 s"):
        BroadcastGroup(address, 0, store=store)
    nowhere = GroupAddress("127.0.0.1", 1, 2, "gloo", 2)  # nobody listens on port 1
    with pytest.raises(RftError, match=r"rank 1 of 2 could not join .* at 127\.0\.0\.1:1"):
        BroadcastGroup(nowhere, 1)
