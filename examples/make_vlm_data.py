"""Generate the VLM quickstart's visual task: which colour is the largest shape?

    image (32×32: three shapes of three colours on black)  +  "Which colour is the
    largest shape?"   →   response  "red" / "green" / "blue" / "yellow"

Writes to the output folder (default ``runs/vlm-shapes``) the images under ``images/``
and three disjoint sets of rows ``{"question", "image", "answer"}`` (``image`` relative to
the data file, as ``format.image_key`` reads it):

- ``heldout.jsonl`` (200): evaluation before and after each stage, never trained on;
- ``sft.jsonl`` (256): image–answer pairs for the SFT warm-up;
- ``rl.jsonl`` (1024): GRPO tasks (the answer is only used by the reward).

Every image has three shapes (squares or discs) of three different colours: one large
(side 13–17 px) and two small (side 5–8 px), placed at random; the answer is the large
one's colour. Answers are balanced in every set (always saying one colour scores 1/4).
Deterministic (seed 0); no two rows share an image::

    python examples/make_vlm_data.py [OUT_DIR]
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from PIL import Image, ImageDraw

COLOURS = {"red": (230, 30, 30), "green": (30, 200, 30), "blue": (40, 60, 240),
           "yellow": (240, 220, 20)}
"""Answer word → fill colour."""
SIZE = 32
"""Image side in pixels (16 image tokens for the tiny model: 4-px patches, merged 2×2)."""
SETS = {"heldout": 200, "sft": 256, "rl": 1024}
"""Rows per set, generated in this order."""
QUESTION = "Which colour is the largest shape?"


def draw(rng: random.Random, answer: str) -> tuple[Image.Image, tuple]:
    """An image whose largest shape is ``answer``-coloured, and a key that identifies it."""
    others = rng.sample([c for c in COLOURS if c != answer], 2)
    image = Image.new("RGB", (SIZE, SIZE), (0, 0, 0))
    pen = ImageDraw.Draw(image)
    key = []
    for colour, (low, high) in ((answer, (13, 17)), (others[0], (5, 8)), (others[1], (5, 8))):
        side = rng.randint(low, high)
        x, y = rng.randint(0, SIZE - side), rng.randint(0, SIZE - side)
        box = (x, y, x + side - 1, y + side - 1)
        disc = rng.random() < 0.5
        (pen.ellipse if disc else pen.rectangle)(box, fill=COLOURS[colour])
        key.append((colour, side, x, y, disc))
    return image, tuple(key)


def main(out: Path) -> None:
    rng = random.Random(0)
    (out / "images").mkdir(parents=True, exist_ok=True)
    seen: set[tuple] = set()
    for name, count in SETS.items():
        rows = []
        answers = [c for c in COLOURS for _ in range(count // len(COLOURS))]
        rng.shuffle(answers)
        for index, answer in enumerate(answers):
            while True:
                image, key = draw(rng, answer)
                if key not in seen:
                    seen.add(key)
                    break
            path = f"images/{name}_{index:04d}.png"
            image.save(out / path)
            rows.append({"question": QUESTION, "image": path, "answer": answer})
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                          encoding="utf-8")
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/vlm-shapes"))
