"""Joining a Ray cluster that does not answer ends in one line, in bounded time.

Ray's ``ray.init(address=…)`` retries such an address for many minutes; ``rft run`` asks
the GCS first (``rft.distributed.ray_join``) and names the address and its source. The
bounds on elapsed time are generous (the check itself takes well under a second here;
10 s is its deadline for a silent server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from rft.errors import RftError
from rft.testing.runs import tiny_run_config, write_taskset

RFT = Path(sys.executable).parent / "rft"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rft_run_both(tmp_path: Path, model: Path, address: str) -> tuple[subprocess.CompletedProcess,
                                                                     float]:
    """``rft run`` of a tiny ``both``-mode config with ``cluster.ray_address`` = ``address``
    in a fresh process; the result and the seconds it took."""
    config = tiny_run_config(model, write_taskset(tmp_path / "tasks.jsonl"), tmp_path)
    config["mode"] = "both"
    config["cluster"]["ray_address"] = address
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    start = time.monotonic()
    done = subprocess.run([str(RFT), "run", str(path)], capture_output=True, text=True,
                          env=env, timeout=170, check=False)
    return done, time.monotonic() - start


def test_rft_run_with_nothing_listening_at_the_address_fails_in_one_line(tmp_path,
                                                                        tiny_model_dir):
    """``cluster.ray_address: 127.0.0.1:<free port>``: exit 2, one stderr line naming the
    key and the address, long before Ray's own retries would give up."""
    port = free_port()
    done, elapsed = rft_run_both(tmp_path, tiny_model_dir, f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(f"rft: cluster.ray_address: 127.0.0.1:{port}: no Ray cluster "
                               f"answers at "), lines[0]
    assert f":{port} within 10 s (Connection refused)" in lines[0]
    assert elapsed < 60


def test_a_server_that_never_answers_fails_after_the_deadline():
    """A TCP server that accepts and then says nothing (a hung head node, a firewall that
    swallows the call): the one gRPC call times out and the line says so."""
    from rft.distributed.ray_join import join_address

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # the kernel completes the handshake; nobody ever reads
        address = f"127.0.0.1:{server.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(RftError) as caught:
            join_address(address, "cluster.ray_address", timeout_s=2)
        elapsed = time.monotonic() - start
    message = str(caught.value)
    assert message == (f"cluster.ray_address: {address}: cannot join the Ray cluster at "
                       f"{address}: it accepted the connection but sent no answer within 2 s")
    assert 1.5 < elapsed < 60


def test_not_a_ray_gcs_is_named(tmp_path):
    """An HTTP server at the address (something else on Ray's port): one line saying that
    what answers is not Ray, at once."""
    import http.server
    import threading

    from rft.distributed.ray_join import join_address

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        with pytest.raises(RftError, match=r"^RAY_ADDRESS: 127\.0\.0\.1:\d+: cannot join the "
                                           r"Ray cluster at 127\.0\.0\.1:\d+: what listens "
                                           r"there is not a Ray GCS \(UNAVAILABLE: Failed "
                                           r"parsing HTTP/2"):
            join_address(address, "RAY_ADDRESS", timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()


def test_a_stale_address_file_is_named(tmp_path, monkeypatch):
    """``auto`` with Ray's address file left by a ``ray start`` that is gone: the line names
    the file. The file lives under a private ``RAY_TMPDIR``; the other Ray clusters running
    on this machine (which Ray finds by listing processes, and prefers to the file when
    there is exactly one) are hidden from the lookup — the one fake here."""
    from ray._private import services
    from rft.distributed.ray_join import join_address

    port = free_port()
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # else Ray's token would be enabled here
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset())
    with pytest.raises(RftError) as caught:
        join_address("auto", "cluster.ray_address")
    message = str(caught.value)
    assert message.startswith("cluster.ray_address: auto: no Ray cluster answers at ")
    assert f"named by {tmp_path / 'ray' / 'ray_current_cluster'}" in message
    assert "(Connection refused); run 'ray stop'" in message
    # no file and no cluster: nothing to join (the caller starts a private cluster)
    (tmp_path / "ray" / "ray_current_cluster").unlink()
    assert join_address("auto", "cluster.ray_address") is None


def test_a_bad_address_is_named():
    from rft.distributed.ray_join import join_address

    with pytest.raises(RftError, match=r"^cluster\.ray_address: 'head-node' is not a Ray "
                                       r"address \(host:port, auto or local\)"):
        join_address("head-node", "cluster.ray_address")


@pytest.mark.slow
def test_a_running_cluster_answers(monkeypatch):
    """The check lets a real cluster through: a private loopback cluster started here (with
    Ray's token authentication, its default for a new cluster) answers at its address."""
    import ray
    from rft.distributed.cluster import loopback_only
    from rft.distributed.ray_join import join_address

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)  # ray.init sets it: undone after
    restore = loopback_only()
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        address = ray.get_runtime_context().gcs_address
        assert join_address(address, "cluster.ray_address") == address
    finally:
        ray.shutdown()
        restore()
