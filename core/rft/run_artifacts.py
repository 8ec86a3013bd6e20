"""End-of-run artefacts contributed by plugins (the ``register_run_artifacts`` hook).

When every stage of ``rft run`` has finished, the launcher asks each registered
:class:`RunArtifact` to write its file into each stage's job dir, and the end-of-run
summary names what was written (``[<stage>] curves: <job dir>/monitor/curves.png``; also
``artifacts`` in ``summary.json``). Without such a plugin nothing is written and the
summary is unchanged. rft-plugin-studio registers ``curves`` (the run's metric curves as
a PNG, as ``rft plot`` draws them)::

    @hookimpl
    def register_run_artifacts():
        return {"curves": RunArtifact(write=write_curves)}

This module is imported by the launcher: it must stay free of heavy imports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from rft.errors import RftError

log = logging.getLogger("rft.run_artifacts")


@dataclass(frozen=True)
class RunArtifact:
    """One file a plugin writes into a stage's job dir when the run ends."""

    write: Callable[[str], str | None]
    """``write(job_dir)`` writes the file and returns its path (``None``: nothing to write
    for this job dir, e.g. no metrics). A failure is raised as :class:`rft.errors.RftError`
    (one line); the launcher reports it as a warning and the run still succeeds."""


def write_artifacts(artifacts: dict[str, RunArtifact], job_dir: str) -> dict[str, str]:
    """Every artefact of ``artifacts`` written for ``job_dir``: ``{name: path}`` of those
    that wrote a file; one warning line for each that failed."""
    written: dict[str, str] = {}
    for name, artifact in sorted(artifacts.items()):
        try:
            path = artifact.write(job_dir)
        except (RftError, OSError) as exc:
            log.warning("run artefact %s: %s", name, exc)
            continue
        if path is not None:
            written[name] = path
    return written


__all__ = ["RunArtifact", "write_artifacts"]
