"""Retrying a failed read or database operation (``max_retry_times`` /
``max_retry_interval`` of tasksets and experience buffers, as in Trinity-RFT).

:func:`retrying` runs an operation; when it raises an error that ``transient`` accepts
(a file not there yet, a locked database), it waits ``interval`` seconds and runs it again,
at most ``times`` more times. Any other error goes through at once. After the last try
one line names the culprit, the number of tries and the last cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rft.errors import RftError

log = logging.getLogger("rft.buffer")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failed operation is tried again."""

    times: int = 0
    """Tries after the first (``max_retry_times``); 0: no retry."""
    interval: float = 0.0
    """Seconds between two tries (``max_retry_interval``)."""


NO_RETRY = RetryPolicy()

STORAGE_RETRY_TIMES = 3
"""Retries of a storage that sets none and whose config was not validated (validation
fills a storage's unset ``max_retry_times`` from ``buffer.max_retry_times``, default 3)."""
STORAGE_RETRY_INTERVAL = 1
"""Seconds between those retries (``buffer.max_retry_interval``'s default)."""


def storage_retry(times: int | None, interval: float | None) -> RetryPolicy:
    """The retry policy of a taskset / experience buffer from its ``max_retry_times`` /
    ``max_retry_interval``; ``None`` (unset, config not validated): 3 times, 1 s."""
    return RetryPolicy(STORAGE_RETRY_TIMES if times is None else times,
                       STORAGE_RETRY_INTERVAL if interval is None else interval)


def retrying(policy: RetryPolicy, where: str, operation: Callable[[], T],
             transient: Callable[[BaseException], bool],
             error: type[RftError] = RftError) -> T:
    """``operation()``, tried again up to ``policy.times`` times after an error that
    ``transient`` accepts.

    :raises error: ``"<where>: failed N times (max_retry_times: K): <last cause>"`` once
        every try failed (the message of the last error when it is an :class:`RftError`,
        which already names the culprit); a non-transient error is raised unchanged.
    """
    tries = max(0, policy.times) + 1
    for attempt in range(1, tries + 1):
        try:
            return operation()
        except Exception as exc:
            if not transient(exc):
                raise
            if attempt == tries and policy.times <= 0:
                raise
            cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if not isinstance(exc, RftError):  # an RftError names the culprit already
                cause = f"{where}: {type(exc).__name__}: {cause}"
            if attempt == tries:
                raise error(f"{cause} (failed {tries} times, max_retry_times: {policy.times})"
                            ) from exc
            log.warning("%s; trying again in %gs (%d of %d)", cause, policy.interval, attempt,
                        policy.times)
            time.sleep(max(0.0, policy.interval))
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["NO_RETRY", "RetryPolicy", "retrying", "storage_retry"]
