"""The math agents' Python tool: code run in a separate, limited interpreter.

:func:`run_python` starts ``python -I`` (isolated mode: no user site, no ``PYTHON*``
variables, the script's directory not on ``sys.path``) in a fresh temporary directory with
an almost empty environment. Before the code runs, the child caps its own resources with
``resource.setrlimit`` — CPU seconds, address space, size of files it writes, open files —
and the parent kills its whole process group when the wall-clock time-out passes. This is a
guard against runaway or careless code from a policy under training, not a security
boundary against a hostile one (the code still runs as this user, with network access).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

_BOOTSTRAP = """\
import resource, sys
cpu, memory, fsize = {cpu}, {memory}, {fsize}
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
code = sys.stdin.read()
sys.stdin = open("/dev/null")
exec(compile(code, "<tool>", "exec"), {{"__name__": "__main__"}})
"""
"""Run by the child before the tool's code (read from stdin), under its limits."""


@dataclass(frozen=True)
class PythonLimits:
    """Limits of one :func:`run_python` call."""

    timeout: float = 10.0
    """Wall-clock seconds before the process group is killed (CPU seconds: this, rounded
    up, plus one)."""
    memory_mb: int = 1024
    """Address space of the child, in MiB."""
    max_output_chars: int = 2000
    """Characters of stdout (and of stderr) kept; the rest is cut with a note."""
    max_file_mb: int = 8
    """Largest file the code may write, in MiB."""


@dataclass(frozen=True)
class PythonResult:
    """What the code printed and how it ended."""

    text: str
    """The tool result the agent reads: stdout, then stderr, else a note that it printed
    nothing; a time-out or a non-zero exit code is said first."""
    failed: bool
    """It timed out or exited with a non-zero code."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters cut)"


def run_python(code: str, limits: PythonLimits | None = None) -> PythonResult:
    """Run ``code`` in a limited child interpreter (module docstring)."""
    limits = limits or PythonLimits()
    bootstrap = _BOOTSTRAP.format(cpu=math.ceil(limits.timeout) + 1,
                                  memory=limits.memory_mb << 20, fsize=limits.max_file_mb << 20)
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "LANG": "C.UTF-8"}
    with tempfile.TemporaryDirectory(prefix="rft-python-tool-") as workdir:
        process = subprocess.Popen([sys.executable, "-I", "-c", bootstrap], cwd=workdir,
                                   env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            stdout, stderr = process.communicate(code, timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended just now
                pass
            process.communicate()
            return PythonResult(f"error: the code ran longer than {limits.timeout:g} s and "
                                "was stopped", failed=True)
    parts = []
    if process.returncode != 0:
        reason = (f"killed by signal {-process.returncode}" if process.returncode < 0
                  else f"exit code {process.returncode}")
        parts.append(f"error: {reason}")
    if stdout:
        parts.append(_cut(stdout, limits.max_output_chars))
    if stderr:
        parts.append("stderr:\n" + _cut(stderr, limits.max_output_chars))
    if not stdout and not stderr and process.returncode == 0:
        parts.append("(the code printed nothing: print the values you need)")
    return PythonResult("\n".join(parts), failed=process.returncode != 0)


__all__ = ["PythonLimits", "PythonResult", "run_python"]
