"""Joining or starting the Ray cluster of a run.

``rft run`` joins the cluster at ``RAY_ADDRESS`` or ``cluster.ray_address``; with the
default ``auto`` it joins the one that ``ray start --head`` started on this machine (named
in Ray's address file), and with none — or with ``local`` — it starts a private local
cluster bound to 127.0.0.1 and stops it when the run ends. A private cluster (another run's,
a notebook's ``ray.init()``) is never joined unless its address is given: it ends with the
process that started it, and so would the run that joined it. Which cluster a run is on is
one stderr line (``rft: started a local …`` / ``rft: joined the …``).

Stopping: SIGTERM ends a run on Ray as one without (``ray.init`` replaces the process's
handler: :func:`own_sigterm_handler` puts it back), and a run killed outright takes its
private cluster along within about a second (:mod:`rft.ray_reaper`). The run's actors
live in ``ray_namespace``. The cluster to join is checked first, in bounded time
(:mod:`rft.distributed.ray_join`): one that does not answer is one line, not minutes of
Ray's retries.

Loopback only: Ray replaces a node address of ``127.0.0.1`` by the machine's network
address when it runs in cluster mode (the default on Linux), and its gRPC servers (GCS,
raylet, object manager, every worker) then listen on all interfaces (``0.0.0.0`` /
``::``). A private cluster is therefore started with cluster mode off
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, Ray's own default on macOS and Windows), for
this process and the processes Ray starts: node address ``127.0.0.1``, every port it opens
bound to loopback, no dashboard (``tests/test_distributed.py`` lists the listening
sockets of its processes).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rft.config.schema import RftConfig
from rft.distributed.ray_join import configured_address, is_loopback, join_address
from rft.distributed.timeline import write_timeline
from rft.errors import RftError
from rft.ray_reaper import watch
from rft.sigterm import own_sigterm_handler

LOOPBACK = "127.0.0.1"

CLUSTER_MODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch of cluster mode (``0``: the node address stays loopback)."""


@contextmanager
def ray_cluster(config: RftConfig, timeline: str | None = None) -> Iterator[None]:
    """Ray connected in the run's namespace for the duration of the block; ``timeline``
    (``monitor.enable_ray_timeline``, :mod:`rft.distributed.timeline`): where Ray's
    timeline is written when the block ends."""
    import ray

    if ray.is_initialized():  # a caller (a notebook, a test) already connected
        try:
            yield
        finally:
            if timeline is not None:
                write_timeline(timeline)
        return
    address, key = configured_address(config.cluster.ray_address)
    started_here = False
    restore: Callable[[], None] = lambda: None
    try:
        # bounded: a cluster that does not answer is one line, not minutes of Ray's retries
        target = None if address == "local" else join_address(address, key)
        if target is None or is_loopback(target):  # a private or loopback-only cluster
            restore = loopback_only()
        try:
            with own_sigterm_handler():
                if target is not None:
                    ray.init(address=target, namespace=config.ray_namespace)
                else:  # no cluster to join: a private one
                    ray.init(namespace=config.ray_namespace, include_dashboard=False,
                             _node_ip_address=LOOPBACK)
                    started_here = True
        except BaseException:
            restore()
            raise
    except RftError:
        raise
    except Exception as exc:  # noqa: BLE001 (Ray raises many kinds; one line for all)
        where = "a local cluster" if address == "auto" else f"address {address!r}"
        raise RftError(f"cannot connect to Ray ({where}): {str(exc).splitlines()[0]}") from exc
    # a killed run takes its private cluster along (rft.ray_reaper)
    watcher = watch() if started_here else None
    where = ray.get_runtime_context().gcs_address
    print(f"rft: {'started a local' if started_here else 'joined the'} Ray cluster at {where} "
          f"(namespace {config.ray_namespace!r})", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        if timeline is not None:
            write_timeline(timeline)
        if started_here:
            ray.shutdown()
        if watcher is not None:
            watcher.done()
        restore()


def loopback_only() -> Callable[[], None]:
    """Turn Ray's cluster mode off (see the module docstring) for a private cluster started
    now; returns what restores the previous setting once it has stopped."""
    from ray._private import ray_constants

    previous_env = os.environ.get(CLUSTER_MODE_ENV)
    previous_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ[CLUSTER_MODE_ENV] = "0"  # the processes Ray starts read it
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at each use; Ray read the env already

    def restore() -> None:
        ray_constants.ENABLE_RAY_CLUSTER = previous_flag
        if previous_env is None:
            os.environ.pop(CLUSTER_MODE_ENV, None)
        else:
            os.environ[CLUSTER_MODE_ENV] = previous_env

    return restore
