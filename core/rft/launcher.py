"""Launcher: runs the stages of a validated config in order, each in its mode.

Modes are part of the core (not plugins): ``colocate`` (explorer and trainer alternate in
one process), ``both`` (Ray actors), ``explore``, ``train`` and ``bench``.
"""

from __future__ import annotations

from collections.abc import Callable

from rft.config import LoadedConfig, Stage
from rft.errors import RftError

ModeRunner = Callable[[Stage], None]

MODE_RUNNERS: dict[str, ModeRunner] = {}
"""Runner per mode; a mode missing here is not available in this version of rft."""


def run(loaded: LoadedConfig) -> int:
    """Run every stage in order; return the process exit status."""
    missing = sorted({stage.config.mode for stage in loaded.stages} - set(MODE_RUNNERS))
    if missing:
        raise RftError(
            f"mode: {', '.join(repr(m) for m in missing)} cannot run yet: this version of rft "
            "validates configs but has no runner for it (available: "
            f"{', '.join(sorted(MODE_RUNNERS)) or 'none'})"
        )
    for stage in loaded.stages:
        MODE_RUNNERS[stage.config.mode](stage)
    return 0
