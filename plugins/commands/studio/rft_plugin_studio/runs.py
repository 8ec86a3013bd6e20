"""The runs page (``/runs``): every run under the checkpoint root with its stages and
status, and the metric curves of the runs selected, overlaid; the page polls
``/runs/status.json`` and redraws while a run changes.

Routes: ``/runs?run=<id>&run=<id>`` (HTML; default: the newest run),
``/runs/status.json?run=…`` (status and a change stamp per run),
``/runs/curves.svg?run=…[&metric=…]`` (the drawing, matplotlib SVG) and
``/runs/curves.json?run=…`` (the points drawn).
"""

from __future__ import annotations

import io
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rft.errors import RftError
from rft_plugin_studio.page import StudioContext, StudioPage
from rft_plugin_studio.plot_command import run_curves
from rft_plugin_studio.rendering import render
from rft_plugin_studio.run_files import (RunFiles, discover_runs, read_curves, record_steps,
                                         run_status)

REFRESH_SECONDS = 3
"""How often the page asks whether the selected runs changed."""


def run_summary(run: RunFiles) -> dict[str, Any]:
    """What the runs table and the status route show of one run."""
    last_step = 0
    for stage in run.stages:
        for points in read_curves(stage).values():
            if points:
                last_step = max(last_step, points[-1][0])
    stamps = [p.stat().st_mtime for s in run.stages for p in s.metric_files()]
    return {"id": run.run_id, "status": run_status(run),
            "stages": [s.name for s in run.stages if s.name],
            "last_step": last_step, "changed": max(stamps, default=0.0),
            "recorded_steps": sum(len(record_steps(s)) for s in run.stages)}


def _selected(request: Request, runs: list[RunFiles]) -> list[RunFiles]:
    wanted = request.query_params.getlist("run")
    if not wanted:
        return runs[:1]
    by_id = {run.run_id: run for run in runs}
    missing = [w for w in wanted if w not in by_id]
    if missing:
        raise RftError(f"run={missing[0]}: no such run under the checkpoint root")
    return [by_id[w] for w in wanted]


def _curves(runs: list[RunFiles]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    curves: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for run in runs:
        curves.update(run_curves(run))
    return curves


def runs_page(context: StudioContext) -> StudioPage:
    """The runs page for ``context.runs_root``."""

    async def page(request: Request) -> Response:
        runs = discover_runs(context.runs_root)
        try:
            selected = _selected(request, runs)
        except RftError as exc:
            return PlainTextResponse(f"rft studio: {exc}", 404)
        return render(request, "runs.html", "Runs", runs=[run_summary(r) for r in runs],
                      selected=[r.run_id for r in selected], root=str(context.runs_root),
                      refresh_ms=REFRESH_SECONDS * 1000)

    async def status(request: Request) -> Response:
        runs = discover_runs(context.runs_root)
        try:
            selected = _selected(request, runs)
        except RftError as exc:
            return JSONResponse({"error": str(exc)}, 404)
        return JSONResponse({"runs": [run_summary(r) for r in selected]})

    async def curves_svg(request: Request) -> Response:
        from rft_plugin_studio.plot import curves_figure, select_panels

        try:
            panels = select_panels(_curves(_selected(request, discover_runs(context.runs_root))),
                                   request.query_params.getlist("metric") or None)
            figure = curves_figure(panels, width=12.0)
        except RftError as exc:
            return PlainTextResponse(f"rft studio: {exc}", 404)
        out = io.BytesIO()
        figure.savefig(out, format="svg")
        return Response(out.getvalue(), media_type="image/svg+xml")

    async def curves_json(request: Request) -> Response:
        try:
            curves = _curves(_selected(request, discover_runs(context.runs_root)))
        except RftError as exc:
            return JSONResponse({"error": str(exc)}, 404)
        return JSONResponse({label: {m: [list(p) for p in pts] for m, pts in metrics.items()}
                             for label, metrics in curves.items()})

    return StudioPage(title="Runs", path="/runs", routes=[
        Route("/runs", page), Route("/runs/status.json", status),
        Route("/runs/curves.svg", curves_svg), Route("/runs/curves.json", curves_json)])


__all__ = ["REFRESH_SECONDS", "run_summary", "runs_page"]
