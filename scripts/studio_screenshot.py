"""Write the README's screenshot of the studio's config generator (docs/images/).

    .venv/bin/python scripts/studio_screenshot.py [OUT.png]

Serves the studio on 127.0.0.1 (rft_plugin_studio.testing), opens the beginner page in
headless Debian chromium, imports examples/quickstart.yaml and types a misspelt mode
so a finding shows beside its field, then saves a palette PNG (about 100 KB).
Run from the repository root (the quickstart's paths are relative to it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from PIL import Image
from selenium.webdriver.common.keys import Keys

from rft_plugin_studio.app import build_app
from rft_plugin_studio.page import StudioContext
from rft_plugin_studio.testing import headless_chromium, screenshot, serve_in_thread


def _settle(driver: Any) -> None:
    for _ in range(600):
        if driver.execute_script("return document.getElementById('status').dataset.pending === '0'"):
            return
        time.sleep(0.05)


def main(out: Path) -> None:
    driver = headless_chromium(1280, 820)
    try:
        with serve_in_thread(build_app(StudioContext(Path("checkpoints")))) as url:
            driver.get(url + "/config?mode=beginner")
            _settle(driver)
            driver.execute_script("document.getElementById('yaml').value = arguments[0]",
                                  Path("examples/quickstart.yaml").read_text())
            driver.find_element("id", "import").click()
            _settle(driver)
            field = driver.find_element("css selector", '[data-key="mode"]')
            field.clear()
            field.send_keys("colocated", Keys.TAB)
            _settle(driver)
            raw = screenshot(driver, out.with_suffix(".raw.png"))
    finally:
        driver.quit()
    with Image.open(raw) as image:
        image.convert("RGB").quantize(colors=64).save(out, optimize=True)
    raw.unlink()
    print(f"{out}: {out.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/images/studio-config.png"))
