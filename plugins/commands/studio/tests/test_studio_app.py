"""The studio app's frame: the index lists the pages, the access key guards every route off
loopback, and serving beyond loopback without a key is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from rft.errors import RftError
from rft_plugin_studio.app import build_app
from rft_plugin_studio.page import StudioContext, StudioPage
from rft_plugin_studio.server import access_key, serve


def _hello_page() -> StudioPage:
    async def hello(request: object) -> PlainTextResponse:
        return PlainTextResponse("hello page")
    return StudioPage(title="Hello", path="/hello", routes=[Route("/hello", hello)])


def test_index_links_every_page(tmp_path: Path) -> None:
    client = TestClient(build_app(StudioContext(tmp_path), [_hello_page()]))
    index = client.get("/")
    assert index.status_code == 200
    assert 'href="/hello"' in index.text and "Hello" in index.text
    assert client.get("/hello").text == "hello page"


def test_a_key_guards_every_route(tmp_path: Path) -> None:
    client = TestClient(build_app(StudioContext(tmp_path, access_key="s3cret"),
                                  [_hello_page()]))
    refused = client.get("/hello")
    assert refused.status_code == 401 and "access key" in refused.text
    assert client.get("/hello", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/hello", headers={"Authorization": "Bearer s3cret"}).text == "hello page"
    assert client.get("/hello?key=s3cret").status_code == 200
    assert client.get("/hello").status_code == 200  # the cookie set by ?key= carries on


def test_beyond_loopback_without_key_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RftError, match=r"^--host 0\.0\.0\.0: .*access key") as caught:
        serve(StudioContext(tmp_path), "0.0.0.0", 0)
    assert "\n" not in str(caught.value)


def test_key_env_must_hold_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RFT_STUDIO_TEST_KEY", raising=False)
    assert access_key(None) is None
    with pytest.raises(RftError, match="--key-env RFT_STUDIO_TEST_KEY: .*unset or empty"):
        access_key("RFT_STUDIO_TEST_KEY")
    monkeypatch.setenv("RFT_STUDIO_TEST_KEY", "k")
    assert access_key("RFT_STUDIO_TEST_KEY") == "k"
