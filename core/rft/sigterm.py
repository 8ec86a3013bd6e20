"""The run's own SIGTERM handler, kept across ``ray.init``."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def own_sigterm_handler() -> Iterator[None]:
    """Keep this process's SIGTERM handler across ``ray.init``, which installs two of its
    own: a Python one (``sys.exit``) and, below it, its core worker's crash handler (the
    ``*** SIGTERM received ***`` abort, exit 134). Installing the previous Python handler
    again replaces both, so a run on Ray ends on SIGTERM as one without (``rft.cli``: one
    line, exit 143, the trainer's last step saved). Main thread only (Python's rule)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)
