"""The browser-test kit itself: a served app is reached by the real chromium, its
screenshot is checked non-blank, and a blank image is recognised as blank."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from PIL import Image
from starlette.applications import Starlette

from rft_plugin_studio.app import build_app
from rft_plugin_studio.page import StudioContext
from rft_plugin_studio.testing import blank_reason, screenshot


def test_blank_screenshots_are_recognised(tmp_path: Path) -> None:
    white = tmp_path / "white.png"
    Image.new("RGB", (40, 30), (255, 255, 255)).save(white)
    assert "blank" in (blank_reason(white) or "")
    drawn = tmp_path / "drawn.png"
    image = Image.new("RGB", (40, 30), (255, 255, 255))
    image.putpixel((3, 4), (32, 48, 74))
    image.save(drawn)
    assert blank_reason(drawn) is None


def test_the_browser_reaches_the_served_index(
        tmp_path: Path, studio_browser: Any,
        serve_studio: Callable[[Starlette], AbstractContextManager[str]]) -> None:
    with serve_studio(build_app(StudioContext(tmp_path))) as url:
        studio_browser.get(url + "/")
        assert studio_browser.find_element("tag name", "h1").text == "rft studio"
        screenshot(studio_browser, tmp_path / "index.png")
