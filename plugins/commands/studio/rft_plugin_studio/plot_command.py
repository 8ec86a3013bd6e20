"""``rft plot RUN [--metric M ...] -o FILE.png``: a run's curves as a PNG (for CI, papers,
people without a browser), and the end-of-run artefact ``<job dir>/monitor/curves.png``
(``register_run_artifacts``: the summary of ``rft run`` names it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rft_plugin_studio.run_files import Curve, RunFiles, read_curves, resolve_run

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CURVES_FILE = "curves.png"
"""The end-of-run artefact, under ``<job dir>/monitor/``."""


def run_curves(run: RunFiles, label: str | None = None) -> dict[str, dict[str, Curve]]:
    """``{label: {metric: points}}`` of each stage of ``run`` (label: the run's, plus
    ``/<stage>`` for a multi-stage run)."""
    name = label or run.run_id
    return {(f"{name}/{stage.name}" if stage.name else name): read_curves(stage)
            for stage in run.stages}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``rft plot RUN [--metric M ...] [-o FILE]``."""
    parser.add_argument("run", type=Path, metavar="RUN",
                        help="the run's folder, <checkpoint_root_dir>/<project>/<name>")
    parser.add_argument("--metric", action="append", default=None, metavar="M",
                        help="a metric name or pattern (eval/*/accuracy), one panel each; "
                             "repeat for more (default: reward, accuracy, KL, entropy, grad "
                             "norm, response length, timing, eval)")
    parser.add_argument("-o", "--output", type=Path, default=Path("curves.png"),
                        help="the image to write (.png, .svg or .pdf; default curves.png)")


def draw(run_dir: Path, metrics: list[str] | None = None) -> Figure:
    """The figure of the run in ``run_dir``: one panel per ``metrics`` pattern, or the
    default panels. :raises RftError: not a run, an unknown metric, nothing logged."""
    from rft_plugin_studio.plot import curves_figure, select_panels

    panels = select_panels(run_curves(resolve_run(run_dir), run_dir.name), metrics)
    return curves_figure(panels)


def run(args: argparse.Namespace) -> int:
    """Write the plot; print its path; exit status 0."""
    from rft_plugin_studio.plot import write_figure

    path = write_figure(draw(args.run, args.metric), args.output)
    print(f"rft plot: {path}")
    return 0


def write_curves(job_dir: str) -> str | None:
    """``<job_dir>/monitor/curves.png`` of the stage that ran in ``job_dir`` (``None``:
    it logged no metric to the jsonl monitor)."""
    from rft_plugin_studio.plot import curves_figure, select_panels, write_figure

    folder = Path(job_dir)
    if not (folder / "monitor").is_dir():
        return None
    panels = select_panels(run_curves(resolve_run(folder), folder.name), None)
    if not panels:
        return None
    return str(write_figure(curves_figure(panels), folder / "monitor" / CURVES_FILE))
