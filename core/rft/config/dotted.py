"""Implementations named by a dotted Python path instead of a registered name.

Trinity-RFT lets a config name a workflow or reward by its import path, e.g.
``default_workflow_type: examples.my_task.workflow.MyWorkflow``; rft accepts the same for
every kind. The module is imported with the working directory on ``sys.path`` (as a
``python -m`` run from there would); the object is used as if a plugin registered it.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

DOTTED_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
"""``package.module.Object``: at least one dot, identifiers only."""


def looks_dotted(name: str) -> bool:
    """``name`` has the form of an import path (``a.b`` or longer)."""
    return DOTTED_PATH.fullmatch(name) is not None


def import_dotted(name: str) -> Any:
    """The object at ``module.path.Object``.

    :raises ImportError: the module cannot be imported or has no such attribute (the
        message says which, in one line).
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    module_name, _, attribute = name.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 (any failure while importing user code)
        first = (str(exc).splitlines() or [""])[0]
        raise ImportError(f"importing {module_name!r} failed: {type(exc).__name__}: "
                          f"{first}") from exc
    if not hasattr(module, attribute):
        raise ImportError(f"module {module_name!r} has no attribute {attribute!r}")
    return getattr(module, attribute)
