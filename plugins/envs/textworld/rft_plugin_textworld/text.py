"""Cleaning TextWorld's feedback text into what the agent reads."""

from __future__ import annotations

import re

_ART = re.compile(r"^[\s_|\\$/<>()]*$")
"""A line of the ASCII-art banner (only drawing characters), or a blank line."""
_DROP = ("Would you like to RESTART", "*** The End ***")
"""Lines of the game's end screen that say nothing to the agent."""
_BLANKS = re.compile(r"\n{3,}")


def clean_feedback(text: str) -> str:
    """TextWorld's feedback without the ASCII-art banner, the ``>`` prompt and what follows
    it (the status line), the end screen's restart question; runs of blank lines made one.

    ``"\\n  ___ \\n | $$ \\n\\nOpen the box.\\n\\n-= Attic =-\\n>  -= Attic =-0/1"`` →
    ``"Open the box.\\n\\n-= Attic =-"``.
    """
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(">"):
            break
        if any(marker in line for marker in _DROP):
            continue
        lines.append("" if _ART.match(line) else line.rstrip())
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


__all__ = ["clean_feedback"]
