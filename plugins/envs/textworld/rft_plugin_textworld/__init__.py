"""rft-plugin-textworld: the ``textworld`` environment (Microsoft TextWorld games through
TextWorld's own engine), an offline game generator
(:mod:`rft_plugin_textworld.make_games`) and SFT rows from walkthroughs
(:mod:`rft_plugin_textworld.walkthrough`)."""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_textworld.environment import (
    SYSTEM_PROMPT,
    TextWorldArgs,
    TextWorldEnvironment,
    game_path,
)
from rft_plugin_textworld.text import clean_feedback
from rft_plugin_textworld.walkthrough import walkthrough_messages, write_sft_rows

__all__ = ["SYSTEM_PROMPT", "TextWorldArgs", "TextWorldEnvironment", "clean_feedback",
           "game_path", "walkthrough_messages", "write_sft_rows"]


@hookimpl
def register_environments() -> dict[str, Any]:
    return {"textworld": TextWorldEnvironment}
