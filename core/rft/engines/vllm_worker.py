"""Functions run inside a vLLM worker (``collective_rpc`` of the ``vllm`` engine): reload
weights in place, re-tie the output head, join / receive from / leave the trainer's
weight-broadcast group (``sync_method: nccl``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rft.errors import RftError


def _packed_modules_mapping(worker: Any) -> dict[str, list[str]]:
    model = worker.model_runner.get_model()
    return {k: list(v) for k, v in getattr(model, "packed_modules_mapping", {}).items()}


def _reload_weights_on_worker(worker: Any, weights: list[tuple[str, torch.Tensor]],
                              tied: bool) -> None:
    worker.reload_weights(weights_iterator=iter(weights))
    if tied:
        _retie_output_embedding(worker.model_runner.get_model())


_WORKER_GROUP = "_rft_weight_group"
"""Attribute of a vLLM worker holding its rank of the weight-broadcast group."""


def _join_weight_group_on_worker(worker: Any, address: dict[str, Any], first_rank: int) -> None:
    from rft.distributed.weight_broadcast import BroadcastGroup, GroupAddress

    rank = first_rank + int(getattr(worker, "rank", 0))
    setattr(worker, _WORKER_GROUP, BroadcastGroup(GroupAddress(**address), rank))


def _receive_weights_on_worker(worker: Any, spec: Sequence[Sequence[Any]],
                               plan: Sequence[Sequence[Any]], tied: bool) -> None:
    from rft.distributed.weight_broadcast import TensorSpec

    group = getattr(worker, _WORKER_GROUP, None)
    if group is None:
        raise RftError("synchronizer (nccl): this vLLM worker has not joined the "
                       "weight-broadcast group")
    keys = {int(index): str(key) for key, index in plan}
    # each bucket straight into the loader as it arrives: one bucket held, not the model
    streamed = ((keys[index], tensor) for index, _, tensor
                in group.stream([TensorSpec.from_plain(item) for item in spec])
                if index in keys)
    worker.reload_weights(weights_iterator=streamed)
    if tied:
        _retie_output_embedding(worker.model_runner.get_model())


def _leave_weight_group_on_worker(worker: Any) -> None:
    group = getattr(worker, _WORKER_GROUP, None)
    if group is not None:
        group.close()
        delattr(worker, _WORKER_GROUP)


def _retie_output_embedding(model: Any) -> None:
    """Point the output head at the (reloaded) embedding and rebuild what vLLM derived
    from it (on CPU, a prepacked GEMM of the old weights)."""
    head = getattr(model, "lm_head", None)
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    if head is None or embed is None or not hasattr(head, "weight"):
        return
    if head.weight is not embed.weight:
        head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None and type(method).__name__ == "UnquantizedEmbeddingMethod":
        method.process_weights_after_loading(head)
