"""Core tests: make helper modules in tests/ (config_corpus, …) importable."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fixtures_models import tiny_model_dir  # noqa: E402,F401  (session fixture for all tests)
from fixtures_packaging import build_deps, fresh, wheels  # noqa: E402,F401  (session fixtures)


@pytest.fixture(autouse=True)
def sigint_raises_keyboard_interrupt() -> None:
    """Give SIGINT back to Python's handler before each test. Something a test runs in this
    process (seen in a full run: ``SigIgn`` in ``/proc/<pid>/status`` showed SIGINT and
    SIGQUIT ignored — what C ``system()`` does while it waits; which test leaks it is not
    known) can leave SIGINT *ignored*; a process started afterwards inherits that and
    Python then installs no ``KeyboardInterrupt`` handler in it, so the tests that send
    SIGINT to a child (``test_endpoint_faults``, ``test_faults``) would wait on a child that
    cannot hear it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
