"""The studio's Starlette app: the index, every page's routes, and the access key.

On loopback no key is asked. Off loopback the server refuses to start without a key
(:mod:`rft_plugin_studio.server`), and every request must present it: the header
``Authorization: Bearer <key>``, or ``?key=<key>`` once, which sets a cookie for the
pages that follow.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from rft_plugin_studio.page import StudioContext, StudioPage
from rft_plugin_studio.pages import studio_pages
from rft_plugin_studio.rendering import render

KEY_COOKIE = "rft_studio_key"


def build_app(context: StudioContext, pages: list[StudioPage] | None = None) -> Starlette:
    """The studio app for ``context``, serving ``pages`` (default: every studio page)."""
    served = studio_pages(context) if pages is None else pages

    async def index(request: Request) -> Response:
        return render(request, "index.html", "rft studio")

    routes: list[BaseRoute] = [Route("/", index, name="index")]
    for page in served:
        routes.extend(page.routes)
    app = Starlette(routes=routes)
    app.state.pages = served
    app.state.context = context
    if context.access_key is not None:
        app.add_middleware(BaseHTTPMiddleware, dispatch=_key_check(context.access_key))
    return app


def _key_check(key: str) -> Callable[[Request, Callable[[Request], Awaitable[Response]]],
                                     Awaitable[Response]]:
    async def dispatch(request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        header = request.headers.get("authorization", "")
        offered = (header.removeprefix("Bearer ").strip() if header.startswith("Bearer ")
                   else request.query_params.get("key") or request.cookies.get(KEY_COOKIE, ""))
        if not hmac.compare_digest(offered.encode(), key.encode()):
            return PlainTextResponse("rft studio: this server needs its access key "
                                     "(?key=... or Authorization: Bearer ...)", 401)
        response = await call_next(request)
        if request.query_params.get("key"):
            response.set_cookie(KEY_COOKIE, key, httponly=True, samesite="strict")
        return response
    return dispatch
