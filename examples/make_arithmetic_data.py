"""Generate the quickstart's arithmetic tasks: ``a+b=`` with single-digit operands.

Writes ``train.jsonl`` (SFT warm-up pairs), ``rl.jsonl`` (GRPO tasks) and
``heldout.jsonl`` (evaluation) into the output folder; the three sets share no problem.
Fields: ``question`` (e.g. ``"3+4="``) and ``answer`` (``"7"``). Deterministic (seed 0).

    python examples/make_arithmetic_data.py examples/data/arithmetic
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def problems() -> list[dict[str, str]]:
    """All ``a+b`` and ``a*b`` problems with operands 0-9, in a fixed shuffled order."""
    items = [{"question": f"{a}{op}{b}=", "answer": str(a + b if op == "+" else a * b)}
             for op in "+*" for a in range(10) for b in range(10)]
    random.Random(0).shuffle(items)
    return items


def write(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    items = problems()
    splits = {"heldout": items[:40], "rl": items[40:120], "train": items[120:]}
    for name, rows in splits.items():
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "examples/data/arithmetic"))
