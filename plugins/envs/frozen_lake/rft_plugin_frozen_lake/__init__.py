"""rft-plugin-frozen-lake: ``frozen_lake_workflow``, Trinity-RFT's multi-turn FrozenLake
game (gymnasium's ``FrozenLakeEnv``) as an rft workflow."""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_frozen_lake.game import FrozenLakeGame, generate_map, parse_action
from rft_plugin_frozen_lake.workflow import FrozenLakeArgs, FrozenLakeWorkflow

__all__ = ["FrozenLakeArgs", "FrozenLakeGame", "FrozenLakeWorkflow", "generate_map",
           "parse_action"]


@hookimpl
def register_workflows() -> dict[str, Any]:
    return {"frozen_lake_workflow": FrozenLakeWorkflow}
