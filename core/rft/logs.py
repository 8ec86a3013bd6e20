"""Logging of a run (the ``log`` section).

The launching process writes the ``rft`` loggers at ``log.level`` to
``<job dir>/log/launcher.log`` — or ``<job dir>/log/<node ip>/launcher.log`` with
``log.group_by_node`` — and warnings and errors also to stderr. (In mode ``both`` the Ray
actors' own records still go to Ray's log files; :func:`configure_logging` takes the role
so that they can join.)
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Any

from rft.config.schema import LogConfig
from rft.folders import make_folder

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""One line per record in the log files."""

_HANDLER_MARK = "_rft_run_handler"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (not the stream of the
    moment it was made: a test's captured stream, say, may be closed by then)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def node_address() -> str:
    """This machine's address as Ray names nodes (its IP), else its host name."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 (no Ray, or not connected: fall back)
        pass
    return socket.gethostname()


def log_path(job_dir: str, role: str, config: LogConfig) -> str:
    """Where ``role`` writes its log in ``job_dir``."""
    parts = [job_dir, "log"] + ([node_address()] if config.group_by_node else []) + [
        f"{role}.log"]
    return os.path.join(*parts)


def configure_logging(config: LogConfig, job_dir: str, role: str) -> str:
    """Send the ``rft`` loggers at ``config.level`` to this role's log file (replacing the
    file of an earlier stage of the same process) and warnings to stderr; return the
    file's path."""
    reset_logging()
    logger = logging.getLogger("rft")
    logger.setLevel(config.level)
    path = log_path(job_dir, role, config)
    make_folder(os.path.dirname(path), "log")
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setFormatter(logging.Formatter(LOG_FORMAT))
    to_stderr = _StderrHandler()
    to_stderr.setLevel(logging.WARNING)
    to_stderr.setFormatter(logging.Formatter("rft: %(levelname)s: %(message)s"))
    for handler in (to_file, to_stderr):
        setattr(handler, _HANDLER_MARK, True)
        logger.addHandler(handler)
    return path


def file_note(name: str, level: int, message: str) -> None:
    """``message`` to the log file of :func:`configure_logging` only (not stderr, where
    the ``rft: <problem>`` line of an error says it already); nothing when no log file is
    open (the error came before the run configured one)."""
    logger = logging.getLogger(name)
    record = logger.makeRecord(name, level, "(rft)", 0, message, (), None)
    for handler in logging.getLogger("rft").handlers:
        if getattr(handler, _HANDLER_MARK, False) and isinstance(handler, logging.FileHandler):
            handler.handle(record)


def reset_logging() -> None:
    """Remove what :func:`configure_logging` added (closes the log file)."""
    logger = logging.getLogger("rft")
    for handler in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(handler)
        handler.close()
    logger.setLevel(logging.NOTSET)


__all__ = ["configure_logging", "file_note", "log_path", "node_address", "reset_logging"]
