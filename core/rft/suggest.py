"""Did-you-mean: the known names closest to a misspelt one.

Used by every "unknown key" and "unknown name" message (config conversion, the plugin
registry, a row's plugin name). A name that differs from a known one only in case or in
``-`` / ``_`` (``GRPO``, ``Simple-Workflow``) always finds it; other names are matched by
:func:`difflib.get_close_matches` on their case-folded spelling.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def _fold(name: str) -> str:
    """The spelling compared: lower case, ``-`` read as ``_``."""
    return name.casefold().replace("-", "_")


def closest(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` names of ``known`` closest to ``name``, best first: those equal to it up
    to case and ``-`` / ``_`` when there are any (only those), else ``difflib``'s matches
    (similarity ≥ ``cutoff``) of the case-folded spellings."""
    choices = list(dict.fromkeys(str(k) for k in known))
    folded: dict[str, list[str]] = {}
    for choice in choices:
        folded.setdefault(_fold(choice), []).append(choice)
    target = _fold(str(name))
    found = [c for c in folded.get(target, []) if c != name]
    if found:  # the same name but for case or - / _: that is the one meant
        return found[:n]
    for match in difflib.get_close_matches(target, list(folded), n=n, cutoff=cutoff):
        found += [c for c in folded[match] if c not in found and c != name]
    return found[:n]


def did_you_mean(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.6) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the :func:`closest` names, ``""`` for none."""
    found = closest(name, known, n, cutoff)
    return "; did you mean " + " or ".join(repr(c) for c in found) + "?" if found else ""


__all__ = ["closest", "did_you_mean"]
