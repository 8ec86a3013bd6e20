"""Stops the Ray processes of a private cluster whose run was killed (``kill -9``, OOM killer).

Ray binds the GCS and the raylet it starts to the launching process (Linux ``PDEATHSIG``),
but not the processes the raylet starts: its dashboard and runtime-env agents notice the
raylet's death within a second and then spend 60 s trying to report it to the dead GCS
(Ray 2.60), and workers may linger too. A run that starts a private cluster therefore starts
this watcher (:func:`watch`), a small process of its own session that

- notes every Ray process descending from the run (``ray::…`` workers and agents, anything
  started from Ray's package: GCS, raylet, dashboard, monitors) once a second;
- reads its stdin, a pipe from the run: ``done`` means the run stopped its cluster itself
  (nothing to do); end of file without it means the run died: every noted process still
  alive (same pid, same start time) is killed at once.

It runs as a script (``python reaper.py <pid>``), importing nothing of rft or Ray, and reads
``/proc`` (Linux; elsewhere :func:`watch` starts nothing).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from typing import IO

POLL_S = 1.0
"""Seconds between two looks at the run's processes."""

DONE = b"done\n"
"""What the run writes when it has stopped its cluster itself."""


def _stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time in clock ticks)`` of ``pid``; ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[19])  # ppid, starttime (proc(5) fields 4 and 22)


def _is_ray(pid: int) -> bool:
    """A process of Ray's: a worker or agent (``ray::…``) or a program of Ray's package."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            args = handle.read().split(b"\0")
    except OSError:
        return False
    return args[0].startswith(b"ray::") or any(b"/ray/" in arg for arg in args[:3])


def descendants(root: int) -> dict[int, int]:
    """Ray processes descending from ``root``: pid → start time."""
    children: dict[int, list[int]] = {}
    started: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry))
                started[int(entry)] = stat[1]
    found: dict[int, int] = {}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if pid in started and _is_ray(pid):
            found[pid] = started[pid]
    return found


def reap(noted: dict[int, int]) -> None:
    """SIGKILL each noted process still alive as the same process (pid and start time)."""
    for pid, start in noted.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == start and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main(run_pid: int, commands: IO[bytes]) -> None:
    """Watch run ``run_pid`` until ``commands`` says ``done`` or ends (see the module)."""
    noted: dict[int, int] = {}
    received = b""
    while True:
        ready, _, _ = select.select([commands], [], [], POLL_S)
        if ready:
            chunk = os.read(commands.fileno(), 64)
            received += chunk
            if DONE in received:
                return
            if not chunk:  # the run is gone without stopping its cluster
                reap(noted)
                return
        noted.update(descendants(run_pid))


class Watcher:
    """The run's end of a watcher process (:func:`watch`)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def done(self) -> None:
        """The run stopped its cluster: the watcher ends without killing anything."""
        stdin = self.process.stdin
        try:
            if stdin is not None:
                stdin.write(DONE)
                stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


def watch() -> Watcher | None:
    """Start the watcher of this process's private Ray cluster (Linux; else ``None``)."""
    if not os.path.isdir("/proc/self"):
        return None
    process = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__),
                                str(os.getpid())], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, start_new_session=True)
    return Watcher(process)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.stdin.buffer)
