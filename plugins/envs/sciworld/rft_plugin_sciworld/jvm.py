"""The ScienceWorld JVM as a process rft starts, watches and stops.

``scienceworld.ScienceWorldEnv`` launches ``java -cp scienceworld.jar`` through py4j and
talks to it over a local socket. :class:`ScienceWorldProcess` owns that process:

- every call into the JVM runs on one worker thread under a time-out; a call that takes
  longer stops the JVM (which unblocks the socket) and raises one line;
- a JVM that died (killed, crashed, out of memory) is reported in one line naming it, its
  pid and exit code, instead of py4j's network traceback;
- :meth:`close` stops the JVM and waits for it: no java process is left behind. py4j's
  ``die_on_exit`` also ends the JVM when this Python process dies (its stdin closes);
- with ``stable_order`` the JVM runs with constant identity hash codes
  (:data:`STABLE_ORDER_OPTIONS`). ScienceWorld keeps a room's objects in hash sets keyed by
  identity, so by default it lists them (``look around``, container contents) in an order
  that changes between resets of one JVM and, now and then, between JVMs; with constant
  hashes the order is the order of creation, the same on every reset.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import shutil
import subprocess
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, TypeVar

from rft.environment import EnvironmentFailure

T = TypeVar("T")

NAME = "sciworld"
"""Name of the environment in every message."""

DEATH_WAIT_S = 2.0
"""Seconds a failed call waits for the JVM to exit before the failure is taken for the
simulator's own error rather than a dead JVM."""

STOP_WAIT_S = 10.0
"""Seconds :meth:`ScienceWorldProcess.close` waits for the JVM to exit before killing it."""

STABLE_ORDER_OPTIONS = ("-XX:+IgnoreUnrecognizedVMOptions", "-XX:+UnlockExperimentalVMOptions",
                        "-XX:hashCode=2")
"""JVM options of ``stable_order``: HotSpot's ``hashCode=2`` gives every object the identity
hash 1 (measured here: steps ~14 % slower, 50 steps of ``find-living-thing`` 2.9 → 3.4 s).
A JVM without the option ignores it rather than failing to start."""

_LAUNCH_LOCK = threading.Lock()
"""Held while ``scienceworld``'s module-level ``launch_gateway`` is swapped for one that
passes :data:`STABLE_ORDER_OPTIONS` (``ScienceWorldEnv`` has no parameter for JVM options)."""

# py4j logs every broken connection with a traceback at ERROR level; rft reports a dead JVM
# in one line of its own (ScienceWorldProcess.call), so py4j's logs are kept to CRITICAL.
logging.getLogger("py4j").setLevel(logging.CRITICAL)


def java_missing() -> str | None:
    """The one-line reason ScienceWorld cannot start here (no ``scienceworld`` package, no
    ``java`` on ``PATH``), or ``None``."""
    if importlib.util.find_spec("scienceworld") is None:
        return (f"environment '{NAME}': the scienceworld package is not installed "
                "(pip install scienceworld==1.2.3, a dependency of rft-plugin-sciworld)")
    if shutil.which("java") is None:
        return (f"environment '{NAME}': no 'java' on PATH; ScienceWorld runs on a JVM "
                "(install Java 17+, e.g. Debian's default-jre-headless: scripts/setup.sh "
                "does it where java is missing)")
    return None


class ScienceWorldProcess:
    """One ScienceWorld simulator in its own JVM (module docstring).

    :param jar_path: the simulator's jar (``None``: the one the ``scienceworld`` wheel ships).
    :param env_step_limit: ScienceWorld's own step limit (``envStepLimit``).
    :param timeout: seconds one call into the JVM may take.
    :param start_timeout: seconds the JVM's start (and :meth:`call` given it) may take.
    :param stable_order: start the JVM with :data:`STABLE_ORDER_OPTIONS` (module docstring).
    """

    def __init__(self, jar_path: str | None, env_step_limit: int, timeout: float,
                 start_timeout: float, stable_order: bool = True) -> None:
        reason = java_missing()
        if reason is not None:
            raise EnvironmentFailure(reason)
        self.timeout = timeout
        self.start_timeout = start_timeout
        self._closed = False
        self._process: subprocess.Popen[bytes] | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sciworld-jvm")
        self.env: Any = self.call("start", self._start, jar_path, env_step_limit, stable_order,
                                  timeout=start_timeout)

    def _start(self, jar_path: str | None, env_step_limit: int, stable_order: bool) -> Any:
        import scienceworld.scienceworld as simulator_module
        from scienceworld import ScienceWorldEnv

        with _LAUNCH_LOCK:
            launch = simulator_module.launch_gateway
            if stable_order:
                simulator_module.launch_gateway = functools.partial(
                    launch, javaopts=list(STABLE_ORDER_OPTIONS))
            try:
                env = ScienceWorldEnv("", jar_path, envStepLimit=env_step_limit)
            finally:
                simulator_module.launch_gateway = launch
        self._process = env._gateway.java_process
        if self._closed:  # the start timed out meanwhile: nobody will close this JVM
            self.env = env
            self._stop(graceful=False)
        return env

    @property
    def pid(self) -> int | None:
        """Process id of the JVM (``None`` before it started)."""
        return None if self._process is None else self._process.pid

    def alive(self) -> bool:
        """The JVM is running."""
        return self._process is not None and self._process.poll() is None

    def _who(self) -> str:
        return f"its ScienceWorld JVM (pid {self.pid})" if self.pid else "its ScienceWorld JVM"

    def call(self, what: str, fn: Callable[..., T], *args: Any,
             timeout: float | None = None) -> T:
        """Run ``fn(*args)`` (a call into the JVM) under ``timeout`` (default
        :attr:`timeout`).

        :raises EnvironmentFailure: the JVM is closed or dead, the call timed out (the JVM
            is then stopped), or the simulator raised; one line naming ``what``.
        """
        if self._closed:
            raise EnvironmentFailure(f"environment '{NAME}': {what} after close()")
        if self._process is not None and not self.alive():
            raise self._died(what)
        future: Future[T] = self._worker.submit(fn, *args)
        limit = self.timeout if timeout is None else timeout
        try:
            return future.result(timeout=limit)
        except FutureTimeout:
            started = self._process is not None
            self._stop(graceful=False)
            if not started:
                self._closed = True  # _start stops the JVM should it come up later
            raise EnvironmentFailure(
                f"environment '{NAME}': {what} took longer than {limit:g} s; "
                + (f"{self._who()} was stopped" if started else "the JVM did not start")
            ) from None
        except EnvironmentFailure:
            raise
        except Exception as exc:
            if self._exited(within=DEATH_WAIT_S):
                raise self._died(what) from None
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise EnvironmentFailure(
                f"environment '{NAME}': {what} failed in the simulator: {first}") from None

    def _exited(self, within: float) -> bool:
        """The JVM exited, or exits within ``within`` seconds (a broken socket may be seen
        a moment before the process is reaped)."""
        if self._process is None:
            return False
        try:
            self._process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _died(self, what: str) -> EnvironmentFailure:
        code = None if self._process is None else self._process.poll()
        return EnvironmentFailure(
            f"environment '{NAME}': {self._who()} died (exit code {code}) during {what}")

    def _stop(self, graceful: bool) -> None:
        process = self._process
        if graceful and self.env_started():
            try:  # shuts the gateway down and asks the JVM to exit (a newline on its stdin)
                self.env.close()
            except Exception:  # noqa: BLE001 - a dead JVM is stopped below all the same
                pass
        if process is None:
            return
        if process.poll() is None:
            if not graceful:
                process.kill()
            try:
                process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()

    def env_started(self) -> bool:
        return getattr(self, "env", None) is not None

    def close(self) -> None:
        """Stop the JVM and wait until it exited; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop(graceful=True)
        if self.env_started():
            # ScienceWorldEnv.__del__ closes again: make that a no-op on the closed gateway
            self.env.close = lambda: None
        self._worker.shutdown(wait=False, cancel_futures=True)
