"""Which Ray cluster a run joins, and whether it answers, checked in bounded time.

Ray's own ``ray.init(address=…)`` retries an address where no cluster answers for many
minutes (20 attempts of about 40 s each in Ray 2.60): a stale
``/tmp/ray/ray_current_cluster`` left by a ``ray start`` that is gone, a typo in
``cluster.ray_address``, a head node that is down. Before joining, :func:`join_address`
resolves the address as Ray does and asks its GCS for the cluster id — one gRPC call with a
deadline of :data:`JOIN_TIMEOUT_S` — and turns a failure into one
:class:`~rft.errors.RftError` line naming the address, where it came from (the config key,
``RAY_ADDRESS`` or Ray's address file) and what to do.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from rft.errors import RftError
from rft.ray_address_file import recorded_ray_address

JOIN_TIMEOUT_S = 10.0
"""How long the GCS of the cluster to join has to answer its first call."""

ENV_KEY = "RAY_ADDRESS"


def configured_address(config_address: str) -> tuple[str, str]:
    """``(address, key)``: ``RAY_ADDRESS`` when set (it wins), else ``cluster.ray_address``,
    with the name an error message gives it."""
    from_env = os.environ.get(ENV_KEY)
    if from_env:
        return from_env, ENV_KEY
    return config_address, "cluster.ray_address"


def join_address(address: str, key: str, timeout_s: float = JOIN_TIMEOUT_S) -> str | None:
    """The GCS address (``host:port``) of the cluster to join for ``address`` (``auto`` or
    an address; not ``local``), once its GCS has answered; ``None`` when ``auto`` finds no
    cluster that ``ray start`` recorded on this machine (the caller starts a private one;
    private clusters of other processes are joined only by their address). A Ray Client address
    (``ray://…``) is returned as it is, unchecked.

    Ray swaps a loopback host for the machine's network address; a cluster that listens on
    loopback only (another process's private cluster) answers at the loopback address as
    given, which is then returned (:func:`is_loopback`: join it with Ray's cluster mode off).

    :raises RftError: one line naming ``key``, the address and why it cannot be joined.
    """
    if "://" in address:
        return address
    from ray._common.network_utils import is_localhost, parse_address
    from ray._private import services
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available,
    )

    source = ""
    given = address
    if address == "auto":
        # the cluster 'ray start' recorded, not any GCS process of this machine (Ray's own
        # "auto" takes those too): another run's private cluster ends with that run
        given = services.find_bootstrap_address(None)
        if given is None:
            return None
        # what ray.init does for a cluster it finds: use the token of ~/.ray if there is one
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        recorded = recorded_ray_address()
        source = f", named by {recorded[0] if recorded else 'Ray'} (written by 'ray start')"
    try:
        resolved = services.canonicalize_bootstrap_address(given)
    except Exception as exc:
        raise RftError(f"{key}: {address!r} is not a Ray address (host:port, auto or "
                       f"local): {exc}") from exc
    if resolved is None:
        return None
    candidates = [resolved]
    parsed = parse_address(given)
    if parsed is not None and is_localhost(parsed[0]) and given != resolved:
        candidates.append(given)
    problems = []
    for candidate in candidates:
        problem = gcs_problem(candidate, timeout_s)
        if problem is None:
            return candidate
        problems.append((candidate, problem))
    # a server that answered (wrong token, not Ray) says more than a refused connection
    where, problem = next(((c, p) for c, p in problems if p.reached), problems[0])
    if problem.reached:
        raise RftError(f"{key}: {address}: cannot join the Ray cluster at {where}{source}: "
                       f"{problem.reason}")
    instead = (f"unset {ENV_KEY}" if key == ENV_KEY else
               "set cluster.ray_address: local for a private cluster" if address == "auto"
               else "set cluster.ray_address: auto or local")
    advice = (f"run 'ray stop' if that cluster is gone, or {instead}" if address == "auto"
              else f"start it (ray start --head) or {instead}")
    raise RftError(f"{key}: {address}: no Ray cluster answers at {where}{source} within "
                   f"{timeout_s:g} s ({problem.reason}); {advice}")


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``host:port``) is on the loopback interface."""
    from ray._common.network_utils import is_localhost, parse_address

    parsed = parse_address(address) if "://" not in address else None
    return parsed is not None and is_localhost(parsed[0])


@dataclass(frozen=True)
class GcsProblem:
    """Why the GCS at an address did not answer a call."""

    reason: str
    """A few words: ``Connection refused``, ``no answer``, …"""
    reached: bool
    """Whether a server answered (refusing the call) rather than nothing."""


def gcs_problem(address: str, timeout_s: float) -> GcsProblem | None:
    """Connect to ``address`` and ask the GCS there for its cluster id, each step waiting at
    most ``timeout_s``, over a gRPC channel made as Ray makes its own (TLS, token
    authentication); why it did not answer, or ``None`` when it did."""
    import grpc
    from ray._common.network_utils import parse_address
    from ray._private.authentication.authentication_utils import is_token_auth_enabled
    from ray._private.gcs_utils import create_gcs_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    host, port = parse_address(address) or (address, "0")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except TimeoutError:
        return GcsProblem("no answer", reached=False)
    except OSError as exc:
        return GcsProblem(exc.strerror or str(exc), reached=False)
    channel = create_gcs_channel(address)
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
            gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return GcsProblem(f"it accepted the connection but sent no answer within "
                              f"{timeout_s:g} s", reached=True)
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return GcsProblem(
                "it refused this machine's Ray auth token" if is_token_auth_enabled() else
                "it requires token authentication: set RAY_AUTH_MODE=token and its token in "
                "RAY_AUTH_TOKEN or ~/.ray/auth_token", reached=True)
        reason = details.rsplit(": ", 1)[-1].strip()  # "failed to connect …: <reason>"
        return GcsProblem(f"what listens there is not a Ray GCS "
                          f"({code.name if code else 'error'}: {reason})", reached=True)
    finally:
        channel.close()
    return None
