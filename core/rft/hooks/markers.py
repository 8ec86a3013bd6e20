"""The pluggy markers of rft's hooks: ``hookspec`` marks a specification,
``hookimpl`` a plugin's implementation."""

from __future__ import annotations

import pluggy

PROJECT_NAME = "rft"
"""Name of the pluggy project and of the entry-point group."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
