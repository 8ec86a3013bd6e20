"""Fixtures of the studio's browser tests (:mod:`rft_plugin_studio.testing`):
``studio_browser``, one headless chromium for the whole session, and ``serve_studio``,
which serves an app on 127.0.0.1 for one test."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from starlette.applications import Starlette

from rft_plugin_studio.testing import headless_chromium, missing_browser, serve_in_thread

sys.path.insert(0, str(Path(__file__).parent))
from recorded_runs import recorded_runs  # noqa: E402,F401  (session fixture: two real runs)


@pytest.fixture(scope="session")
def studio_browser() -> Iterator[object]:
    """A headless chromium (selenium WebDriver) shared by every browser test; a missing
    browser fails the test in one line (the test set-up installs it)."""
    why = missing_browser()
    if why is not None:
        pytest.fail(why, pytrace=False)
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    def no_download(*args: object) -> dict[str, str]:
        raise AssertionError("selenium-manager ran: the browser tests must use "
                             "/usr/bin/chromedriver and download nothing")

    with pytest.MonkeyPatch.context() as patch:  # the kit must never reach selenium-manager
        patch.setattr(SeleniumManager, "binary_paths", no_download)
        driver = headless_chromium()
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def serve_studio() -> Callable[[Starlette], AbstractContextManager[str]]:
    """``with serve_studio(app) as url:`` serves ``app`` on 127.0.0.1:<free port>."""
    return serve_in_thread
