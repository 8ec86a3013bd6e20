"""Which GPUs each Ray actor of a run gets, and the refusal to run on CPU what Ray put on a GPU.

With ``cluster.gpu_per_node`` unset, :func:`detect_cluster_gpus` reads it (and
``cluster.node_num``) from the joined Ray cluster's resources once Ray is up, and derives the
split as validation does for a set value (explorer = engines × TP, auxiliary models, trainer =
the rest). :func:`actor_gpus` then says what each actor asks Ray for: Ray gives an actor that
many GPUs of its own and sets its ``CUDA_VISIBLE_DEVICES`` to them, so no two actors share a
device (an actor asking for none would see every GPU and use ``cuda:0``).

::

    explorer actor     engine_num == 1: engines × TP GPUs (its in-process engine); else 0
    rollout replica    tensor_parallel_size each (engine_num > 1)
    auxiliary replica  the model's tensor_parallel_size each, also for engine_num == 1
                       (mode both: never inside the explorer actor, whose GPUs are the
                       rollout engine's)
    trainer actor      1 (one process), or 0 when its ranks (Ray actors) hold the GPUs

Each actor also checks, when it starts, that a GPU Ray assigned it is usable
(:mod:`rft.device_check`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

from rft.config.schema import RftConfig
from rft.errors import RftError


@dataclass(frozen=True)
class ActorGpus:
    """GPUs each actor of a run asks Ray for (``0`` on CPU)."""

    explorer: int
    """The explorer actor (its in-process rollout engine when ``engine_num == 1``)."""
    rollout_replica: int
    """Each rollout engine actor (``engine_num > 1``)."""
    trainer: int
    """The trainer actor (``0`` when its ranks, Ray actors of their own, hold the GPUs)."""


def on_gpus(config: RftConfig) -> bool:
    """Whether the run's actors take GPUs (``cluster.gpu_per_node`` set, or detected, > 0)."""
    return bool(config.cluster.gpu_per_node)


def actor_gpus(config: RftConfig) -> ActorGpus:
    """What the explorer, rollout replicas and trainer ask Ray for (module docstring)."""
    if not on_gpus(config):
        return ActorGpus(0, 0, 0)
    cl, rm = config.cluster, config.explorer.rollout_model
    sharded = (config.trainer.ranks or 1) > 1
    return ActorGpus(explorer=(cl.explorer_gpu_num or 0) if rm.engine_num == 1 else 0,
                     rollout_replica=rm.tensor_parallel_size,
                     trainer=0 if sharded else min(cl.trainer_gpu_num or 0, 1))


def auxiliary_placement(engine_num: int, tensor_parallel_size: int, *, remote: bool,
                        gpus: bool, own_actors: bool) -> tuple[int, int]:
    """``(replicas, GPUs each)`` of an auxiliary model's engine actors; ``(0, 0)``: one
    engine in the calling process.

    :param remote: an external model (one client, on its own server).
    :param gpus: the run's actors take GPUs (:func:`on_gpus`).
    :param own_actors: the caller's GPUs are another engine's (the explorer actor of mode
        ``both``): on GPUs even one engine gets an actor, and GPUs, of its own.
    """
    if remote or (engine_num <= 1 and not (own_actors and gpus)):
        return 0, 0
    return max(engine_num, 1), tensor_parallel_size if gpus else 0


def gpus_of_nodes(nodes: list[dict[str, Any]]) -> list[int]:
    """GPUs of each alive node of ``ray.nodes()``."""
    return [int(node.get("Resources", {}).get("GPU", 0)) for node in nodes if node.get("Alive")]


def detect_cluster_gpus(config: RftConfig,
                        node_gpus: list[int]) -> tuple[RftConfig, str | None]:
    """With ``cluster.gpu_per_node`` unset: a new config (the schema is frozen) with it,
    ``cluster.node_num`` (when unset) and the derived split from ``node_gpus`` (GPUs of each
    node of the Ray cluster, see :func:`gpus_of_nodes`), the split checked again; and the
    line that says what was found (``None``: nothing to detect, or no GPU — the run stays on
    CPU). A config with ``gpu_per_node`` set comes back as it is.

    :raises RftError: one line naming ``cluster.gpu_per_node`` when the nodes' GPU counts
        differ, or the split fails (the explorer takes every GPU).
    """
    cl = config.cluster
    if cl.gpu_per_node is not None:
        return config, None
    with_gpus = sorted({n for n in node_gpus if n > 0})
    if not with_gpus:
        return replace(config, cluster=replace(cl, gpu_per_node=0)), None
    if len(with_gpus) > 1:
        raise RftError(f"cluster.gpu_per_node: unset, and the Ray cluster's nodes have "
                       f"{', '.join(map(str, with_gpus))} GPUs: set cluster.gpu_per_node and "
                       f"cluster.node_num")
    nodes = sum(1 for n in node_gpus if n > 0)
    counted = replace(cl, gpu_per_node=with_gpus[0],
                      node_num=nodes if cl.node_num is None else cl.node_num)
    config = _split(replace(config, cluster=counted))
    cl = config.cluster
    one = (config.trainer.ranks or 1) <= 1 and (cl.trainer_gpu_num or 0) > 1
    tail = (f" (one trainer process on 1 of them: set cluster.gpu_per_node: {cl.gpu_per_node} "
            f"to train on all)") if one else ""
    return config, (f"cluster.gpu_per_node detected from Ray: {cl.gpu_per_node} GPUs on each "
                    f"of {cl.node_num} node(s); explorer {cl.explorer_gpu_num}, auxiliary "
                    f"models {cl.auxiliary_gpu_num}, trainer {cl.trainer_gpu_num}{tail}")


def _split(config: RftConfig) -> RftConfig:
    """``config`` with the GPU split of validation (``rft.config.derive.derive_cluster``),
    now that the counts are known, checked again (``rft.config.check_models.check_cluster``);
    its first problem as one line."""
    from rft.config.check_models import check_cluster
    from rft.config.derive import derive_cluster
    from rft.config.findings import Findings
    from rft.plugins import PluginRegistry

    found = Findings(PluginRegistry.create())
    config = replace(config, cluster=derive_cluster(config, found.registry))
    check_cluster(config, found)
    if found.problems:
        raise RftError(f"{found.problems[0]} (detected from the Ray cluster)")
    return config


def detect_from_ray(config: RftConfig) -> RftConfig:
    """:func:`detect_cluster_gpus` on the connected Ray cluster: the new config (``config``
    itself when ``cluster.gpu_per_node`` is set); the line goes to stderr."""
    import ray

    if config.cluster.gpu_per_node is not None:
        return config
    config, line = detect_cluster_gpus(config, gpus_of_nodes(ray.nodes()))
    if line is not None:
        print(f"rft: {line}", file=sys.stderr, flush=True)
    return config
