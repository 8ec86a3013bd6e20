"""The converted config without its interpolations, for checks that read plain values.

Shared by the command's schema check (:mod:`.cli`) and the trainer choice
(:mod:`.trainer_choice`); it sits apart so that neither imports the other.
"""

from __future__ import annotations

from typing import Any


def without_interpolations(value: Any) -> Any:
    """``value`` without the strings that hold an interpolation (``${oc.env:X}``): they
    are resolved, and converted, when rft loads the file."""
    if isinstance(value, dict):
        return {k: without_interpolations(v) for k, v in value.items()
                if not (isinstance(v, str) and "${" in v)}
    if isinstance(value, list):
        return [without_interpolations(v) for v in value]
    return value
