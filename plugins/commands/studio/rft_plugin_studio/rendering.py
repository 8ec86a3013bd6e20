"""HTML rendering shared by the pages: one Jinja2 environment over ``templates/``, whose
``base.html`` draws the navigation bar from the app's pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def render(request: Request, template: str, title: str, status_code: int = 200,
           **values: Any) -> HTMLResponse:
    """``template`` rendered with ``values``, the page ``title`` and the navigation bar (the
    app's pages, the current one marked)."""
    context = {"title": title, "pages": request.app.state.pages,
               "current": request.url.path, **values}
    return TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)
