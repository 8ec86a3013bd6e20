"""The Data-Juicer server process a run owns (:class:`ManagedServer`).

:class:`DataJuicerService` is the run service (:mod:`rft.services`) registered as
``data_juicer``. With ``auto_start: true`` it starts :mod:`rft_plugin_data_juicer.server`
on 127.0.0.1:``port`` (a free port when unset) as a child process leading a process group
of its own, waits until ``GET /health`` answers, and stops the group when the stage ends.
The server exits by itself within a second when the run's process disappears (SIGKILL
included), and servers still running when this interpreter exits are stopped then. With
``server_url`` it checks that the server answers and leaves it running afterwards.

The run service ``data_juicer`` (:mod:`rft_plugin_data_juicer.service`) starts it. The run
reaches the server through the environment variable :data:`URL_VARIABLE`. A
server this process started that dies is started again once, on the same port, by
:meth:`ManagedServer.ensure` (the client calls it when a request finds no server); a
second death is a one-line error.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from typing import IO

import httpx

from rft.errors import RftError

URL_VARIABLE = "RFT_DATA_JUICER_URL"
"""Environment variable holding the URL of the run's Data-Juicer server."""
START_TIMEOUT_S = 180.0
"""How long the server may take to import Data-Juicer and answer ``/health``."""
STOP_GRACE_S = 5.0
"""How long ``stop`` waits after SIGTERM before SIGKILL."""

_OWNED: dict[str, ManagedServer] = {}
"""Servers this process started, by URL (for the client's restart, and the exit hook)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def answers(url: str, timeout: float = 2.0) -> bool:
    """``GET url/health`` answers 200."""
    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


class ManagedServer:
    """One Data-Juicer server process owned by this process (module docstring).

    :param port: the port it listens on (kept across a restart).
    :param log_path: its stdout / stderr go there (appended).
    :param key: the config key named in messages.
    """

    def __init__(self, port: int, log_path: str, key: str = "service.data_juicer") -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.key = key
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start the server and wait until it answers; its URL.

        :raises RftError: it exited or did not answer in ``timeout`` (one line naming
            :attr:`key` and the log).
        """
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        command = [sys.executable, "-m", "rft_plugin_data_juicer.server",
                   "--port", str(self.port), "--parent", str(os.getpid())]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        _OWNED[self.url] = self
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.process.returncode
                self.stop()
                raise RftError(f"{self.key}: the Data-Juicer server exited with code {code} "
                               f"while starting on port {self.port} (log: {self.log_path})")
            if answers(self.url, timeout=1.0):
                return self.url
            time.sleep(0.2)
        self.stop()
        raise RftError(f"{self.key}: the Data-Juicer server did not answer on port "
                       f"{self.port} within {timeout:.0f} s (log: {self.log_path})")

    def ensure(self) -> bool:
        """Start the server again if it died and was not restarted yet; whether it runs
        (or answers) now."""
        if self.alive() and answers(self.url):
            return True
        if self.restarts >= 1:
            return False
        self.restarts += 1
        self.stop()
        self.start()
        return True

    def stop(self) -> None:
        """Stop the server's process group (SIGTERM, then SIGKILL) and reap it
        (idempotent)."""
        process = self.process
        if process is not None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        _OWNED.pop(self.url, None)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def owned(url: str) -> ManagedServer | None:
    """The server at ``url`` if this process started it."""
    return _OWNED.get(url)


@atexit.register
def _stop_all() -> None:
    for server in list(_OWNED.values()):
        server.stop()


__all__ = ["ManagedServer", "URL_VARIABLE", "answers", "free_port", "owned"]
