"""Tensors crossing Ray's object store as raw buffers (``rft.tensor_wire``): every dtype
comes back bit for bit, read-only buffers are handled, and the weights a trainer hands out
survive a real ``ray.put`` / ``ray.get``."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from rft.tensor_wire import Bits, NamedTensors, from_wire, to_wire

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.uint8, torch.bool, torch.float8_e4m3fn]


def _tensor(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    values = torch.randn(4, 5, generator=g) * 3
    return values.to(dtype) if dtype != torch.bool else values > 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_for_bit(dtype: torch.dtype) -> None:
    tensor = _tensor(dtype)
    wire = to_wire(tensor)
    assert isinstance(wire, (np.ndarray, Bits))
    back = from_wire(pickle.loads(pickle.dumps(wire, protocol=5)))
    assert back.dtype == dtype and back.shape == tensor.shape
    assert torch.equal(back.view(torch.uint8), tensor.view(torch.uint8))  # same bits


def test_what_is_not_a_plain_cpu_tensor_passes_through() -> None:
    grad = torch.ones(3, requires_grad=True)
    assert to_wire(grad) is grad and to_wire(None) is None and to_wire("x") == "x"
    assert from_wire([1, 2]) == [1, 2]


def test_named_tensors_read_only_buffers() -> None:
    """Out-of-band, read-only buffers (how Ray hands them back): names, order and values
    kept; the tensors read the buffers in place."""
    named = NamedTensors((f"w{i}", _tensor(d)) for i, d in enumerate(DTYPES))
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(named, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == len(DTYPES)
    got = pickle.loads(data, buffers=[memoryview(bytes(b.raw())) for b in buffers])
    assert isinstance(got, NamedTensors) and [n for n, _ in got] == [n for n, _ in named]
    for (_, want), (_, tensor) in zip(named, got, strict=True):
        assert tensor.dtype == want.dtype and torch.equal(tensor.view(torch.uint8),
                                                          want.view(torch.uint8))


def test_named_tensors_through_ray() -> None:
    import ray

    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-wire-test")
    try:
        big = torch.randn(512, 1024)  # 2 MiB: Ray keeps it in shared memory, not inline
        named = NamedTensors([("big", big), ("half", _tensor(torch.bfloat16))])
        got = ray.get(ray.put(named))
        assert torch.equal(got[0][1], big) and torch.equal(got[1][1], named[1][1])
    finally:
        ray.shutdown()
