"""Small modules with one job: no file of the core over 600 lines, the schema excepted
(a declaration per field, with its docstring and support note, is long by nature)."""

from __future__ import annotations

from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core" / "rft"
MAX_LINES = 600
EXCEPTED = {CORE / "config" / "schema.py"}


def test_no_core_file_is_over_600_lines():
    long = sorted(f"{path.relative_to(CORE.parent)}: {lines} lines"
                  for path in CORE.rglob("*.py") if path not in EXCEPTED
                  for lines in [len(path.read_text(encoding="utf-8").splitlines())]
                  if lines > MAX_LINES)
    assert long == []
