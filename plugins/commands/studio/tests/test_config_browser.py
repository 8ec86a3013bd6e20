"""The config generator in a real browser (headless Debian chromium): the beginner page
builds the quickstart's config field by field, its export validates and resolves to the
quickstart's config; an invalid value shows ``rft validate``'s line beside its field."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.applications import Starlette

from rft import cli
from rft.plugins import PluginRegistry
from rft_plugin_studio.app import build_app
from rft_plugin_studio.config_page import config_page
from rft_plugin_studio.config_page_checks import check_document
from rft_plugin_studio.page import StudioContext
from rft_plugin_studio.schema_form import yaml_text
from rft_plugin_studio.schema_form_values import parse_document
from rft_plugin_studio.testing import screenshot

REPO = Path(__file__).resolve().parents[4]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


@pytest.fixture
def config_url(tmp_path: Path, registry: PluginRegistry, monkeypatch: pytest.MonkeyPatch,
               serve_studio: Callable[[Starlette], AbstractContextManager[str]]
               ) -> Iterator[str]:
    monkeypatch.chdir(REPO)  # the quickstart's paths are relative to the repository root
    context = StudioContext(tmp_path)
    with serve_studio(build_app(context, [config_page(context, registry)])) as url:
        yield url


def _settle(browser: Any) -> None:
    """Wait until every edit and check the page started has answered."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 30, poll_frequency=0.05).until(lambda b: b.execute_script(
        "return document.getElementById('status').dataset.pending === '0'"))


def _type(browser: Any, key: str, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    field = browser.find_element("css selector", f'[data-key="{key}"]')
    if field.tag_name == "select":
        from selenium.webdriver.support.ui import Select

        Select(field).select_by_value(text)
        _settle(browser)
    else:
        rebuilds = bool(field.get_attribute("data-restructure"))
        # select-all then type: one change event (clear() would send one of its own)
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(text, Keys.TAB)
        if rebuilds:
            _settle(browser)  # the form is rebuilt: wait before the next field


def _fill(browser: Any, values: Any, key: str) -> None:
    """Enter ``values`` (a plain config subtree) at ``key`` the way a user would: one
    input per leaf, the add button for each item of a list of sections."""
    if isinstance(values, dict):
        for name, value in values.items():
            _fill(browser, value, f"{key}.{name}" if key else name)
    elif isinstance(values, list) and all(isinstance(item, dict) for item in values):
        for i, item in enumerate(values):
            browser.find_element("css selector", f'[data-add="{key}"]').click()
            _settle(browser)
            _fill(browser, item, f"{key}[{i}]")
    else:
        _type(browser, key, yaml_text(values))


@pytest.mark.slow
def test_beginner_page_builds_the_quickstart(
        config_url: str, studio_browser: Any, registry: PluginRegistry,
        tmp_path: Path) -> None:
    quickstart = parse_document(QUICKSTART.read_text())
    studio_browser.get(config_url + "/config?mode=beginner")
    _settle(studio_browser)
    _fill(studio_browser, quickstart, "")
    _settle(studio_browser)
    screenshot(studio_browser, tmp_path / "config-beginner.png")
    studio_browser.find_element("id", "export").click()
    _settle(studio_browser)
    exported = studio_browser.find_element("id", "exported").get_attribute("textContent")
    assert studio_browser.find_element("id", "status").text.startswith("exported")
    built = check_document(parse_document(exported), registry)
    expected = check_document(quickstart, registry)
    assert built.valid and built.resolved == expected.resolved
    assert [name for name, _ in built.resolved] == ["sft", "grpo"]


def test_an_invalid_value_shows_rft_validates_line_beside_its_field(
        config_url: str, studio_browser: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    studio_browser.get(config_url + "/config?mode=beginner")
    _settle(studio_browser)
    _type(studio_browser, "buffer.batch_size", "many")
    _settle(studio_browser)
    shown = [element.text for element in studio_browser.find_elements(
        "css selector", '[data-findings-for="buffer.batch_size"] .problem')]
    path = tmp_path / "typed.yaml"
    path.write_text(yaml.safe_dump({"buffer": {"batch_size": "many"}}))
    assert cli.main(["validate", str(path)]) != 0
    printed = [line for line in capsys.readouterr().err.splitlines()
               if line.startswith("rft: buffer.batch_size:")]
    assert printed and ["rft: " + line for line in shown] == printed
    screenshot(studio_browser, tmp_path / "config-invalid.png")


def test_an_uploaded_file_fills_the_form(config_url: str, studio_browser: Any,
                                         tmp_path: Path) -> None:
    studio_browser.get(config_url + "/config?mode=beginner")
    _settle(studio_browser)
    studio_browser.find_element("id", "import-file").send_keys(str(QUICKSTART))
    _settle(studio_browser)
    value = studio_browser.find_element("css selector", '[data-key="stages[1].algorithm'
                                        '.algorithm_type"]').get_attribute("value")
    assert value == "grpo"
    assert studio_browser.find_element("id", "status").text.startswith("valid")
    screenshot(studio_browser, tmp_path / "config-imported.png")
