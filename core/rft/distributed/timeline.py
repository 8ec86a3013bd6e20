"""``monitor.enable_ray_timeline``: Ray's task timeline (Chrome trace JSON, open it in
``chrome://tracing`` or Perfetto) written to ``<monitor dir>/timeline.json`` when the run
leaves its Ray cluster (:func:`rft.distributed.cluster.ray_cluster`)."""

from __future__ import annotations

import os
import sys

from rft.config.plan import RunPlan
from rft.modes.builders import monitor_dir

TIMELINE_FILE = "timeline.json"


def timeline_file(plan: RunPlan) -> str | None:
    """``<job dir>/monitor/timeline.json`` with ``monitor.enable_ray_timeline``, else
    ``None``."""
    if not plan.config.monitor.enable_ray_timeline:
        return None
    return os.path.join(monitor_dir(plan), TIMELINE_FILE)


def write_timeline(path: str) -> None:
    """``ray.timeline(filename=path)`` (Ray connected); a failure is one line on stderr,
    not an error of the run that has ended."""
    import ray

    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        ray.timeline(filename=path)
    except Exception as exc:  # noqa: BLE001 (the run's result stands)
        print(f"rft: monitor.enable_ray_timeline: cannot write {path}: "
              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr, flush=True)
        return
    print(f"rft: Ray timeline written to {path}", file=sys.stderr, flush=True)
