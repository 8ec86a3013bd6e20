"""Metric curves drawn with matplotlib (Agg, no display): the PNG of ``rft plot`` and of the
end-of-run artefact, and the SVG of the runs page — one drawing for all three.

A figure has one panel per metric group (:data:`PANELS`: reward, accuracy, KL, entropy,
grad norm, response length, timing, eval), each with one line per run (stage) and metric;
each line's SVG group id is ``curve:<label>:<metric>`` so a page (and its browser test)
can find it.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from rft.errors import RftError
from rft_plugin_studio.run_files import Curve

PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("rollout/reward/mean", "critic/score/mean")),
    ("accuracy", ("rollout/accuracy",)),
    ("KL", ("actor/kl_loss", "actor/ppo_kl", "actor/reward_kl_penalty")),
    ("entropy", ("actor/entropy_loss", "actor/entropy")),
    ("grad norm", ("actor/grad_norm",)),
    ("response length", ("rollout/response_length/mean", "response_length/mean")),
    ("timing (s)", ("timing_s/step", "timing_s/explore")),
    ("eval", ("eval/*/accuracy", "eval/*/pass@*")),
)
"""The default panels: a title and the metric names (``fnmatch`` patterns) it draws;
the first name of a panel that a run logs is drawn (all matches for patterns)."""


@dataclass(frozen=True)
class Series:
    """One curve to draw: whose (``label``: run, or run/stage) and which metric."""

    label: str
    metric: str
    points: Curve


def panel_metrics(available: Sequence[str], patterns: Sequence[str], *,
                  first_only: bool) -> list[str]:
    """The names of ``available`` that ``patterns`` select (a name without ``*`` matches
    itself); with ``first_only``, only those of the first pattern that selects any."""
    chosen: list[str] = []
    for pattern in patterns:
        hits = [m for m in available if fnmatch.fnmatchcase(m, pattern)]
        if hits and first_only and "*" not in pattern:
            return hits[:1]
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def select_panels(curves: dict[str, dict[str, Curve]], metrics: Sequence[str] | None
                  ) -> list[tuple[str, list[Series]]]:
    """The panels to draw from ``curves`` (``{label: {metric: points}}``): one per
    ``--metric`` pattern when ``metrics`` is given (each a name or an ``fnmatch``
    pattern), else :data:`PANELS`; panels without data are left out.

    :raises RftError: a ``--metric`` that no run logs (one line naming the closest).
    """
    every = sorted({m for run in curves.values() for m in run})
    wanted = [(m, (m,)) for m in metrics] if metrics else list(PANELS)
    panels: list[tuple[str, list[Series]]] = []
    for title, patterns in wanted:
        series = [Series(label, metric, run[metric]) for label, run in curves.items()
                  for metric in panel_metrics(list(run), patterns, first_only=not metrics)
                  if run[metric]]
        if series:
            panels.append((title, series))
        elif metrics:
            close = [m for m in every if title.split("/")[-1] in m][:3]
            raise RftError(f"--metric {title}: no run logs it"
                           + (f" (did you mean {', '.join(close)}?)" if close else
                              f" ({len(every)} metrics logged; e.g. {', '.join(every[:3])})"))
    return panels


def curves_figure(panels: list[tuple[str, list[Series]]], *, width: float = 11.0) -> Figure:
    """A figure of ``panels`` (two per row), each line's gid ``curve:<label>:<metric>``."""
    if not panels:
        raise RftError("no metric to plot: the run has logged no step yet (its monitor "
                       "files are empty; the jsonl monitor writes them)")
    columns = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / columns)
    height = 2.8 * rows
    figure = Figure(figsize=(width, height))
    # fixed margins (in inches): constrained layout would double the drawing time
    figure.subplots_adjust(left=0.6 / width, right=1 - 0.2 / width, top=1 - 0.3 / height,
                           bottom=0.45 / height, hspace=0.55, wspace=0.18)
    labels = sorted({s.label for _, series in panels for s in series})
    colours = {label: f"C{index % 10}" for index, label in enumerate(labels)}
    for index, (title, series) in enumerate(panels):
        axes = figure.add_subplot(rows, columns, index + 1)
        seen: dict[str, int] = {}
        for item in series:
            steps = [p[0] for p in item.points]
            values = [p[1] for p in item.points]
            name = item.metric if len(labels) == 1 else f"{item.label} {item.metric}"
            nth = seen[item.label] = seen.get(item.label, -1) + 1
            # a run (stage) keeps its colour in every panel; its metrics differ by dashes
            (line,) = axes.plot(steps, values, marker="." if len(steps) < 30 else None,
                                linewidth=1.4, label=name, color=colours[item.label],
                                linestyle=("-", "--", ":", "-.")[nth % 4])
            line.set_gid(f"curve:{item.label}:{item.metric}")
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("step", fontsize=8)
        axes.tick_params(labelsize=8)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="best")
    return figure


def write_figure(figure: Figure, path: Path, dpi: int = 90) -> Path:
    """Save ``figure`` (format from the suffix: ``.png``, ``.svg``, ``.pdf``).

    :raises RftError: the file cannot be written (one line naming it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=dpi)
    except OSError as exc:
        raise RftError(f"{path}: cannot write the plot: {exc.strerror or exc}") from exc
    return path


__all__ = ["PANELS", "Series", "curves_figure", "panel_metrics", "select_panels",
           "write_figure"]
