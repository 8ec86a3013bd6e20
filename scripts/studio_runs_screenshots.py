"""Write the README's screenshots of the studio's runs and rollouts pages (docs/images/).

    .venv/bin/python scripts/studio_runs_screenshots.py CHECKPOINT_ROOT RUNS ROLLOUT_RUN

CHECKPOINT_ROOT holds the runs to show; RUNS: the run ids to overlay, comma-separated;
ROLLOUT_RUN: the run whose rollout record is shown. The README's: the quickstart
(``make quickstart``, ``quickstart/quickstart``) beside the studio tests' two real runs
(plugins/commands/studio/tests/recorded_runs.py: ``quickstart_like/vowels`` and
``tools/toolcall``, a Tool-N1 episode), i.e. ``quickstart/quickstart,quickstart_like/vowels
tools/toolcall``. Serves the studio on 127.0.0.1, opens ``/runs`` and ``/rollouts`` in
headless Debian chromium, and saves palette PNGs (each under 150 KB) in docs/images/.
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


def main(root: Path, runs: list[str], rollout_run: str, out_dir: Path) -> None:
    driver = headless_chromium(1280, 900)
    try:
        with serve_in_thread(build_app(StudioContext(root))) as url:
            driver.get(url + "/runs?" + "&".join(f"run={run}" for run in runs))
            for _ in range(200):
                if driver.find_elements("css selector", "#curves svg"):
                    break
                time.sleep(0.05)
            _small(screenshot(driver, out_dir / "studio-runs.raw.png"),
                   out_dir / "studio-runs.png")
            driver.get(url + f"/rollouts?run={rollout_run}")
            _small(screenshot(driver, out_dir / "studio-rollouts.raw.png"),
                   out_dir / "studio-rollouts.png")
    finally:
        driver.quit()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3], Path("docs/images"))
