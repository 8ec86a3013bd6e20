"""Generate the quickstart's task: the largest digit of a 6-digit string.

    prompt  "max 302132"   →   response  "3"

Writes three disjoint sets (no digit string appears in two of them) to the output folder:

- ``heldout.jsonl`` (200): evaluation before and after each stage, never trained on;
- ``sft.jsonl`` (512): prompt/response pairs for the SFT warm-up;
- ``rl.jsonl`` (2048): GRPO tasks (the answer is only used by the reward).

The answer (the maximum, 2–9) is balanced: every value is equally frequent in every set,
so always answering "9" scores 1/8. A string with maximum ``m`` has digits drawn
uniformly from ``0..m`` (one forced to ``m`` if none is). Fields: ``question``,
``answer``. Deterministic (seed 0)::

    python examples/make_quickstart_data.py [examples/data/max_digit]
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

DIGITS = 6
"""Length of the digit string."""
ANSWERS = tuple(range(2, 10))
"""Possible maxima (1 and 0 have too few strings to fill disjoint balanced sets)."""
SIZES = {"heldout": 200, "sft": 512, "rl": 2048}
"""Rows per set, generated in this order."""


def digit_string(rng: random.Random, maximum: int) -> str:
    digits = [rng.randint(0, maximum) for _ in range(DIGITS)]
    if maximum not in digits:
        digits[rng.randrange(DIGITS)] = maximum
    return "".join(map(str, digits))


def make_sets(seed: int = 0) -> dict[str, list[dict[str, str]]]:
    """The three sets; answers cycle through :data:`ANSWERS`, then each set is shuffled."""
    rng = random.Random(seed)
    used: set[str] = set()
    sets: dict[str, list[dict[str, str]]] = {}
    for name, size in SIZES.items():
        rows = []
        for i in range(size):
            maximum = ANSWERS[i % len(ANSWERS)]
            while (text := digit_string(rng, maximum)) in used:
                pass
            used.add(text)
            rows.append({"question": f"max {text}", "answer": str(maximum)})
        rng.shuffle(rows)
        sets[name] = rows
    return sets


def write(folder: Path, seed: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in make_sets(seed).items():
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "examples/data/max_digit"))
