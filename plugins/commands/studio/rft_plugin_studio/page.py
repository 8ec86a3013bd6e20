"""The contract between the studio's app and its pages.

A page is a :class:`StudioPage`: a title for the navigation bar, the path of its entry
route, and the Starlette routes it serves (its HTML page first, then any JSON or image
routes it needs). :func:`rft_plugin_studio.pages.studio_pages` lists the pages the app
serves; adding a page is adding its module and one line there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from starlette.routing import BaseRoute


@dataclass(frozen=True)
class StudioContext:
    """What every page may read: where runs live, and the access key when one is set."""

    runs_root: Path
    """The checkpoint root whose runs the runs and rollout pages list
    (``<runs_root>/<project>/<name>/``)."""
    access_key: str | None = None
    """The key a browser must present off loopback (``None`` on loopback)."""


@dataclass(frozen=True)
class StudioPage:
    """One page of the studio."""

    title: str
    """Shown in the navigation bar."""
    path: str
    """The path of the page's HTML route, e.g. ``/config``."""
    routes: Sequence[BaseRoute]
    """The page's routes (its HTML route among them)."""
