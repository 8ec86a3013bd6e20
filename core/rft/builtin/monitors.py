"""Built-in monitors of the core: ``console`` and ``jsonl``."""

from __future__ import annotations

from typing import Any

from rft.hookspecs import hookimpl
from rft.monitor.files import ConsoleMonitor, JsonlMonitor


@hookimpl
def register_monitors() -> dict[str, Any]:
    return {"console": ConsoleMonitor, "jsonl": JsonlMonitor}
