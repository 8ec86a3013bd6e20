"""How much of vLLM's own logging reaches the console.

vLLM logs at INFO by default: its engine start-up, and a line or two at every weight
reload and prefix-cache reset (Ray forwards every actor's output to the driver): a 3-step
``both`` run of the example printed 60 lines with them, 35 without. rft quiets them to
WARNING unless ``log.level`` is ``DEBUG``, which shows vLLM's INFO records. A
``VLLM_LOGGING_LEVEL`` the user set in the environment wins.
"""

from __future__ import annotations

import logging
import os

ENV = "VLLM_LOGGING_LEVEL"
"""vLLM's variable: read when vLLM is imported, inherited by its worker processes."""

_set_by_rft: str | None = None
"""The value rft put in :data:`ENV` (a different value there is the user's own)."""


def vllm_log_level(rft_level: str) -> str:
    """vLLM's level for rft's ``log.level``: ``INFO`` under ``DEBUG``, else ``WARNING``."""
    return "INFO" if rft_level.upper() == "DEBUG" else "WARNING"


def configure_vllm_logging(rft_level: str) -> str:
    """Set vLLM's logging level for this process and the processes it starts (before or
    after vLLM is imported); return it. The user's own :data:`ENV` is kept."""
    global _set_by_rft
    current = os.environ.get(ENV)
    if current is not None and current != _set_by_rft:
        level = current.upper()
    else:
        level = vllm_log_level(rft_level)
        os.environ[ENV] = _set_by_rft = level
    logging.getLogger("vllm").setLevel(level)  # vLLM already imported: its logger now
    return level


__all__ = ["ENV", "configure_vllm_logging", "vllm_log_level"]
