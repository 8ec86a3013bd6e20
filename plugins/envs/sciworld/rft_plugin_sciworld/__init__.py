"""rft-plugin-sciworld: environment ``sciworld``, AllenAI's ScienceWorld simulator (the real
JVM the ``scienceworld`` wheel ships), started and stopped by rft."""

from __future__ import annotations

from rft import hookimpl
from rft.environment import Environment
from rft_plugin_sciworld.env import SciWorldArgs, SciWorldEnvironment, SciWorldTask, task_of
from rft_plugin_sciworld.jvm import ScienceWorldProcess, java_missing

__all__ = ["SciWorldArgs", "SciWorldEnvironment", "SciWorldTask", "ScienceWorldProcess",
           "java_missing", "task_of"]


@hookimpl
def register_environments() -> dict[str, type[Environment]]:
    return {"sciworld": SciWorldEnvironment}
