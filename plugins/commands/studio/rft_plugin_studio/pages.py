"""The pages the studio serves, in navigation order."""

from __future__ import annotations

from rft_plugin_studio.config_page import config_page
from rft_plugin_studio.page import StudioContext, StudioPage
from rft_plugin_studio.rollouts import rollouts_page
from rft_plugin_studio.runs import runs_page


def studio_pages(context: StudioContext) -> list[StudioPage]:
    """Every page of the studio for ``context``, in navigation order."""
    pages: list[StudioPage] = [config_page(context)]
    pages.append(runs_page(context))
    pages.append(rollouts_page(context))
    return pages
