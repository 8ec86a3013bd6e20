"""Joining or starting the Ray cluster of a run.

``rft run`` joins the cluster at ``RAY_ADDRESS`` or ``cluster.ray_address``; with the
default ``auto`` it joins the one running on this machine (left by ``ray start --head``, or
started by another process's ``ray.init``), and with none — or with ``local`` — it starts a
private local cluster bound to 127.0.0.1 and stops it when the run ends. The run's actors
live in ``ray_namespace``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rft.config.schema import RftConfig
from rft.errors import RftError

LOOPBACK = "127.0.0.1"


@contextmanager
def ray_cluster(config: RftConfig) -> Iterator[None]:
    """Ray connected in the run's namespace for the duration of the block."""
    import ray

    if ray.is_initialized():  # a caller (a notebook, a test) already connected
        yield
        return
    address = os.environ.get("RAY_ADDRESS") or config.cluster.ray_address
    started_here = False
    try:
        if address not in ("auto", "local"):
            ray.init(address=address, namespace=config.ray_namespace)
        else:
            try:
                if address == "local":
                    raise ConnectionError("a private cluster was asked for")
                ray.init(address="auto", namespace=config.ray_namespace)
            except ConnectionError:
                ray.init(namespace=config.ray_namespace, include_dashboard=False,
                         _node_ip_address=LOOPBACK)
                started_here = True
    except Exception as exc:  # noqa: BLE001 (Ray raises many kinds; one line for all)
        where = "a local cluster" if address == "auto" else f"address {address!r}"
        raise RftError(f"cannot connect to Ray ({where}): {str(exc).splitlines()[0]}") from exc
    where = ray.get_runtime_context().gcs_address
    print(f"rft: {'started a local' if started_here else 'joined the'} Ray cluster at {where} "
          f"(namespace {config.ray_namespace!r})", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        if started_here:
            ray.shutdown()
