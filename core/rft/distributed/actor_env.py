"""``explorer.env_vars`` in the explorer's Ray actors, without writing their values to a log.

Ray's ``runtime_env={"env_vars": …}`` hands the values to the node's runtime-env agent,
which writes them to ``<ray session>/logs/runtime_env_agent.log`` — a file every user of the
machine may read (mode 644). The explorer actor and the engine actors therefore get the
variables in their constructor's arguments (the run's config, which they receive anyway)
and set them in their own process environment first thing, before any engine is built:
:func:`set_explorer_env`. A variable read when a Python process starts (``PYTHONPATH``,
``LD_PRELOAD``, …) is too late there: set such variables where the Ray cluster starts.
"""

from __future__ import annotations

import os

from rft.config.schema import RftConfig


def set_explorer_env(config: RftConfig) -> None:
    """Set ``config.explorer.env_vars`` in this process's environment (values as strings)."""
    os.environ.update({str(key): str(value)
                       for key, value in (config.explorer.env_vars or {}).items()})
