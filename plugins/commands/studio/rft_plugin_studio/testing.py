"""The studio's browser-test kit: the app served by uvicorn on ``127.0.0.1:<free port>``
in a thread, a headless Debian ``chromium`` driven through selenium and
``/usr/bin/chromedriver`` (the driver path is given, so selenium-manager never runs and
no browser is downloaded), and a check that a screenshot is not blank.

The pytest fixtures over these live in ``plugins/commands/studio/tests/conftest.py``
(``studio_browser``: one browser for the whole session; ``serve_studio``: a server per
test). ``scripts/setup.sh --test`` installs selenium, ``chromium`` and
``chromium-driver``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette

from rft.errors import RftError

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
START_TIMEOUT_S = 20.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serve_in_thread(app: Starlette) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 in a daemon thread; yields its base URL
    (``http://127.0.0.1:<port>``) once it accepts connections, stops it on exit.

    :raises RftError: the server did not start within ``START_TIMEOUT_S``."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name=f"studio-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RftError(f"studio test server on 127.0.0.1:{port} did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def missing_browser() -> str | None:
    """Why the browser tests cannot run here (one line), or ``None`` when they can."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            return (f"{path}: not found; `scripts/setup.sh --test` installs Debian's "
                    f"{package}")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium: not installed; `scripts/setup.sh --test` installs it"
    return None


def headless_chromium(width: int = 1280, height: int = 900) -> WebDriver:
    """A headless ``chromium`` under selenium through ``/usr/bin/chromedriver``.

    :raises RftError: the browser, its driver or selenium is missing (one line)."""
    why = missing_browser()
    if why is not None:
        raise RftError(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", f"--window-size={width},{height}",
                     "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))


def blank_reason(png: Path) -> str | None:
    """Why the screenshot ``png`` counts as blank (a single colour: all white, say), or
    ``None`` when it shows more than one colour."""
    from PIL import Image

    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    if colours is not None and len(colours) <= 1:
        only = colours[0][1] if colours else "none"
        return f"{png}: blank (a single colour, RGB {only})"
    return None


def screenshot(driver: WebDriver, path: Path) -> Path:
    """Save the browser's viewport to ``path`` (PNG) and check it is not blank.

    :raises AssertionError: the screenshot is blank."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(path)):
        raise AssertionError(f"{path}: the browser wrote no screenshot")
    why = blank_reason(path)
    assert why is None, why
    return path
