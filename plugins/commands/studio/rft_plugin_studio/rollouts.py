"""The rollouts page (``/rollouts``): a run's rollout record (``monitor.rollout_record``),
per explore step and task, every sample — the whole conversation (tool calls and tool
results marked), reward, advantage, and the response's tokens coloured by log-prob (or
entropy) — filtered by task and reward.

``/rollouts?run=<id>&stage=<name>&step=<N>&task=<taskset[i]>&min_reward=&max_reward=
&colour=logprob|entropy`` (defaults: the newest run with a record, its first stage with
one, its last recorded step, no filter, log-prob).
"""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from rft.errors import RftError
from rft_plugin_studio.page import StudioContext, StudioPage
from rft_plugin_studio.rendering import render
from rft_plugin_studio.rollouts_view import (Filters, message_parts, response_tokens,
                                             split_messages, task_key, transcript_messages)
from rft_plugin_studio.run_files import RunFiles, discover_runs, read_record, record_steps


def _float(text: str | None, name: str) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise RftError(f"{name}={text}: not a number") from None
    if not math.isfinite(value):
        raise RftError(f"{name}={text}: not a finite number")
    return value


def _with_record(runs: list[RunFiles]) -> list[RunFiles]:
    return [r for r in runs if any(record_steps(s) for s in r.stages)]


def rollouts_page(context: StudioContext) -> StudioPage:
    """The rollouts page for ``context.runs_root``."""

    async def page(request: Request) -> Response:
        q = request.query_params
        runs = _with_record(discover_runs(context.runs_root))
        if not runs:
            return render(request, "rollouts.html", "Rollouts", runs=[], root=str(context.runs_root))
        try:
            by_id = {r.run_id: r for r in runs}
            if q.get("run") and q["run"] not in by_id:
                raise RftError(f"run={q['run']}: no run with a rollout record under "
                               f"{context.runs_root}")
            run = by_id[q["run"]] if q.get("run") else runs[0]
            stages = [s for s in run.stages if record_steps(s)]
            wanted = q.get("stage")
            stage = (stages[0] if wanted is None
                     else next((s for s in stages if s.name == wanted), None))
            if stage is None:
                raise RftError(f"stage={wanted}: run {run.run_id} has no rollout record for "
                               f"it (stages with one: {', '.join(s.name for s in stages)})")
            steps = record_steps(stage)
            step = int(q["step"]) if q.get("step", "").isdigit() else steps[-1]
            rows = read_record(stage, step)
            filters = Filters(task=q.get("task", ""),
                              min_reward=_float(q.get("min_reward"), "min_reward"),
                              max_reward=_float(q.get("max_reward"), "max_reward"))
        except RftError as exc:
            return PlainTextResponse(f"rft studio: {exc}", 404)
        colour = "entropy" if q.get("colour") == "entropy" else "logprob"
        tasks = sorted({task_key(r) for r in rows})
        kept = [r for r in rows if filters.keeps(r)]
        groups: dict[str, list[dict[str, object]]] = {}
        for row in kept:
            groups.setdefault(task_key(row), []).append({
                "row": row, "prompt": split_messages(str(row.get("prompt") or "")),
                "reply": message_parts("assistant", str(row.get("response") or "")),
                "transcript": transcript_messages(row.get("transcript")),
                "tokens": response_tokens(row, colour)})
        return render(request, "rollouts.html", "Rollouts", runs=[r.run_id for r in runs],
                      run=run.run_id, stages=[s.name for s in stages], stage=stage.name,
                      steps=steps, step=step, tasks=tasks, filters=filters, colour=colour,
                      groups=groups, shown=len(kept), total=len(rows),
                      root=str(context.runs_root))

    return StudioPage(title="Rollouts", path="/rollouts", routes=[Route("/rollouts", page)])


__all__ = ["rollouts_page"]
