"""Write the README's screenshots of the studio's runs and rollouts pages (docs/images/).

    .venv/bin/python scripts/studio_runs_screenshots.py CHECKPOINT_ROOT [OUT_DIR]

CHECKPOINT_ROOT holds the runs to show: the README's come from the studio tests' two real
runs (plugins/commands/studio/tests/recorded_runs.py: ``quickstart_like/vowels``, GRPO on
the tiny model with the rollout record on, and ``tools/toolcall``, a Tool-N1 episode).
Serves the studio on 127.0.0.1, opens ``/runs`` with both runs overlaid and ``/rollouts``
on the tool-call episode in headless Debian chromium, and saves palette PNGs (each under
150 KB).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from PIL import Image

from rft_plugin_studio.app import build_app
from rft_plugin_studio.page import StudioContext
from rft_plugin_studio.testing import headless_chromium, screenshot, serve_in_thread


def _small(raw: Path, out: Path) -> None:
    with Image.open(raw) as image:
        image.convert("RGB").quantize(colors=64).save(out, optimize=True)
    raw.unlink()
    print(f"{out}: {out.stat().st_size // 1024} KB")


def main(root: Path, out_dir: Path) -> None:
    driver = headless_chromium(1280, 900)
    try:
        with serve_in_thread(build_app(StudioContext(root))) as url:
            driver.get(url + "/runs?run=quickstart_like/vowels&run=tools/toolcall")
            for _ in range(200):
                if driver.find_elements("css selector", "#curves svg"):
                    break
                time.sleep(0.05)
            _small(screenshot(driver, out_dir / "studio-runs.raw.png"),
                   out_dir / "studio-runs.png")
            driver.get(url + "/rollouts?run=tools/toolcall")
            _small(screenshot(driver, out_dir / "studio-rollouts.raw.png"),
                   out_dir / "studio-rollouts.png")
    finally:
        driver.quit()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/images"))
