"""What a conversion could not carry over, and what the user should check.

Every veRL override ends up in exactly one place: an rft key (with a comment naming it),
``trainer.trainer_config`` (passed through to veRL's workers), or this report. The report
is printed to stderr by ``rft convert-verl`` and written as a comment block at the top of
the converted YAML.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO


@dataclass(frozen=True)
class Entry:
    """A veRL setting that is not in the converted config."""

    key: str
    """The veRL key (or the launch argument as written)."""
    value: str | None
    """Its value as written in the launch; ``None`` for an argument without one."""
    reason: str
    """Why it was not converted, and what to do instead when there is something."""
    line: int = 0
    """Input line (0: unknown)."""

    def text(self) -> str:
        shown = self.key if self.value is None else f"{self.key}={self.value}"
        where = f" (line {self.line})" if self.line else ""
        return f"{shown}{where}: {self.reason}"


@dataclass
class Report:
    """Settings left out of the converted config, and notes on derived values."""

    not_converted: list[Entry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, key: str, value: str | None, reason: str, line: int = 0) -> None:
        self.not_converted.append(Entry(key, value, reason, line))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def keys(self) -> list[str]:
        return [entry.key for entry in self.not_converted]

    def __bool__(self) -> bool:
        return bool(self.not_converted or self.notes)

    def lines(self) -> list[str]:
        """The report as plain text lines (no prefix)."""
        out: list[str] = []
        if self.not_converted:
            count = len(self.not_converted)
            out.append(f"{count} veRL setting{'s' if count != 1 else ''} not converted:")
            out.extend(f"  {entry.text()}" for entry in self.not_converted)
        if self.notes:
            out.append("notes:")
            out.extend(f"  - {note}" for note in self.notes)
        return out

    def print(self, stream: TextIO | None = None, prefix: str = "rft convert-verl: ") -> None:
        """Write the report to ``stream`` (stderr by default), one prefixed line each."""
        stream = stream or sys.stderr
        for line in self.lines():
            print(f"{prefix}{line}", file=stream)

    def comment_block(self) -> list[str]:
        """The report as YAML comment lines."""
        return [f"# {line}".rstrip() for line in self.lines()]
