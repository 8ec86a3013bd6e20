"""The config generator page (``/config``) and its JSON routes.

The page holds the user's config as YAML text; the form is generated from the schema
(:mod:`rft_plugin_studio.schema_form`). Its script calls:

- ``POST /config/api/edit`` ``{yaml, action: set|unset|add|remove, key, value}``: the
  document with one dotted key changed -> ``{yaml}`` or ``{error}``;
- ``POST /config/api/form`` ``{yaml, mode}``: the form's HTML for the document (after an
  import, an added / removed item, or a plugin name changing its ``*_args`` form);
- ``POST /config/api/check`` ``{yaml}``: ``rft validate``'s findings ->
  ``{problems, warnings}``, each line starting with the dotted key it names;
- ``POST /config/api/export`` ``{yaml}``: the YAML to save, with the same findings; the
  page saves it only when it validates.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rft.errors import ConfigError, RftError
from rft.plugins import PluginRegistry
from rft_plugin_studio.config_page_checks import check_document
from rft_plugin_studio.page import StudioContext, StudioPage
from rft_plugin_studio.rendering import TEMPLATES, render
from rft_plugin_studio.schema_form import FormBuilder, Mode
from rft_plugin_studio.schema_form_values import (
    add_item, dump_document, parse_document, parse_value, remove_item, set_value,
    unset_value)

STATIC = Path(__file__).parent / "static"
"""The page's script and style sheet, served under ``/static/config/``."""


def config_page(context: StudioContext, registry: PluginRegistry | None = None) -> StudioPage:
    """The config generator; plugin names come from ``registry`` (default: the installed
    plugins, collected on first use)."""
    held: list[PluginRegistry] = [registry] if registry is not None else []

    def plugins() -> PluginRegistry:
        if not held:
            held.append(PluginRegistry.create())
        return held[0]

    async def page(request: Request) -> Response:
        mode = _mode(request.query_params.get("mode"))
        builder = await run_in_threadpool(lambda: FormBuilder(plugins()))
        return render(request, "config.html", "Config generator", mode=mode,
                      nodes=builder.build({}, mode))

    async def form(request: Request) -> Response:
        body = await _body(request)
        try:
            document = parse_document(str(body.get("yaml", "")), "the YAML")
        except ConfigError as exc:
            return JSONResponse({"problems": exc.problems})
        mode = _mode(body.get("mode"))
        nodes = await run_in_threadpool(lambda: FormBuilder(plugins()).build(document, mode))
        html = TEMPLATES.get_template("config_form.html").render(nodes=nodes, mode=mode)
        return JSONResponse({"html": html, "yaml": dump_document(document), "problems": []})

    async def edit(request: Request) -> Response:
        body = await _body(request)
        try:
            document = parse_document(str(body.get("yaml", "")), "the YAML")
            _edit(document, str(body.get("action", "")), str(body.get("key", "")),
                  body.get("value"))
        except ConfigError as exc:
            return JSONResponse({"error": exc.problems[0]})
        except RftError as exc:
            return JSONResponse({"error": str(exc)})
        return JSONResponse({"yaml": dump_document(document)})

    async def check(request: Request) -> Response:
        return JSONResponse(await _checked(request, plugins))

    async def export(request: Request) -> Response:
        found = await _checked(request, plugins)
        return JSONResponse({**found, "valid": not found["problems"]})

    return StudioPage(title="Config", path="/config", routes=[
        Route("/config", page, name="config"),
        Route("/config/api/form", form, methods=["POST"]),
        Route("/config/api/edit", edit, methods=["POST"]),
        Route("/config/api/check", check, methods=["POST"]),
        Route("/config/api/export", export, methods=["POST"]),
        Mount("/static/config", StaticFiles(directory=STATIC), name="config-static"),
    ])


def _mode(text: Any) -> Mode:
    return "expert" if text == "expert" else "beginner"


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except json.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


def _edit(document: dict[str, Any], action: str, key: str, value: Any) -> None:
    """Apply one edit of the page to ``document``. :raises RftError: a bad key / value."""
    if action == "set":
        set_value(document, key, parse_value(key, str(value)))
    elif action == "unset":
        unset_value(document, key)
    elif action == "add":
        add_item(document, key)
    elif action == "remove":
        remove_item(document, key)
    else:
        raise RftError(f"action {action!r}: expected set, unset, add or remove")


async def _checked(request: Request,
                   plugins: Callable[[], PluginRegistry]) -> dict[str, Any]:
    body = await _body(request)
    text = str(body.get("yaml", ""))
    try:
        document = parse_document(text, "the YAML")
    except ConfigError as exc:
        return {"problems": exc.problems, "warnings": [], "yaml": text}
    found = await run_in_threadpool(lambda: check_document(document, plugins()))
    return {"problems": list(found.problems), "warnings": list(found.warnings),
            "yaml": dump_document(document)}
