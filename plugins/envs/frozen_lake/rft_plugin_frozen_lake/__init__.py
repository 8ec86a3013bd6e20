"""rft-plugin-frozen-lake: Trinity-RFT's multi-turn FrozenLake game (gymnasium's
``FrozenLakeEnv``) as the workflow ``frozen_lake_workflow`` and as the environment
``frozen_lake`` (played by ``environment_workflow``)."""

from __future__ import annotations

from typing import Any

from rft import hookimpl
from rft_plugin_frozen_lake.environment import FrozenLakeEnvArgs, FrozenLakeEnvironment
from rft_plugin_frozen_lake.game import FrozenLakeGame, generate_map, parse_action
from rft_plugin_frozen_lake.workflow import FrozenLakeArgs, FrozenLakeWorkflow

__all__ = ["FrozenLakeArgs", "FrozenLakeEnvArgs", "FrozenLakeEnvironment", "FrozenLakeGame", "FrozenLakeWorkflow", "generate_map",
           "parse_action"]


@hookimpl
def register_workflows() -> dict[str, Any]:
    return {"frozen_lake_workflow": FrozenLakeWorkflow}


@hookimpl
def register_environments() -> dict[str, Any]:
    return {"frozen_lake": FrozenLakeEnvironment}
