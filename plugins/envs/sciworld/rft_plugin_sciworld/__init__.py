"""rft-plugin-sciworld: environment ``sciworld``, AllenAI's ScienceWorld simulator (the real
JVM the ``scienceworld`` wheel ships), started and stopped by rft; workflow
``sciworld_workflow`` (Trinity-RFT's name) plays it."""

from __future__ import annotations

from rft import hookimpl
from rft.environment import Environment
from rft_plugin_sciworld.env import SciWorldArgs, SciWorldEnvironment, SciWorldTask, task_of
from rft_plugin_sciworld.jvm import ScienceWorldProcess, java_missing
from rft_plugin_sciworld.workflow import SciWorldWorkflow, SciWorldWorkflowArgs

__all__ = ["SciWorldArgs", "SciWorldEnvironment", "SciWorldTask", "SciWorldWorkflow",
           "SciWorldWorkflowArgs", "ScienceWorldProcess", "java_missing", "task_of"]


@hookimpl
def register_environments() -> dict[str, type[Environment]]:
    return {"sciworld": SciWorldEnvironment}


@hookimpl
def register_workflows() -> dict[str, type]:
    return {"sciworld_workflow": SciWorldWorkflow}
