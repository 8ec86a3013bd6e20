"""``sciworld_workflow``: Trinity-RFT's ScienceWorld workflow name, bound to rft's
``environment_workflow`` playing ``sciworld``.

Trinity-RFT's ``sciworld_workflow`` plays one ScienceWorld task (its row: a JSON string of
``task_name`` / ``var_num`` in the prompt column) for at most 30 steps with ``easy``
simplifications, the action inside ``<action>``, and trains on the whole conversation with
the reward ``max score / 100``. Here that is ``environment_workflow`` with those defaults:
the taskset names no ``environment`` (this workflow plays ``sciworld``); the environment's
arguments go under ``workflow_args.environment_args``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rft.environment import Environment
from rft.environments import open_environment
from rft_plugin_sciworld.env import SciWorldArgs, SciWorldEnvironment
from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow


@dataclass
class SciWorldWorkflowArgs(EnvironmentArgs):
    """``workflow_args`` of ``sciworld_workflow``: ``environment_workflow``'s, with
    Trinity-RFT's defaults, its name ``max_env_steps``, and the environment's arguments."""

    max_steps: int = 30
    """Most model replies per episode (Trinity-RFT plays 30)."""
    max_env_steps: int | None = None
    """Trinity-RFT's name of ``max_steps``; both set and different: refused."""
    reward: Literal["terminal", "sum"] = "sum"
    """``sum``: the step rewards add up to the best score / 100 (Trinity-RFT's reward)."""
    env_timeout: float | None = None
    """No limit around each call: the environment's own ``timeout`` / ``start_timeout``
    stop a JVM that hangs (a thread cannot be stopped; the JVM can)."""
    environment_args: SciWorldArgs = field(default_factory=SciWorldArgs)
    """Arguments of the ``sciworld`` environment (its README)."""

    def __post_init__(self) -> None:
        if self.max_env_steps is not None:
            if self.max_steps not in (30, self.max_env_steps):
                raise ValueError(f"max_env_steps {self.max_env_steps} differs from max_steps "
                                 f"{self.max_steps} (Trinity-RFT's name of it); set one")
            self.max_steps = self.max_env_steps
        super().__post_init__()


class SciWorldWorkflow(EnvironmentWorkflow):
    """``environment_workflow`` on ``sciworld`` with Trinity-RFT's defaults (module
    docstring)."""

    Args = SciWorldWorkflowArgs
    plays_environments = False
    """The taskset names no environment: this workflow always plays ``sciworld``."""

    @property
    def options(self) -> SciWorldWorkflowArgs:
        args = self.args if self.args is not None else SciWorldWorkflowArgs()
        assert isinstance(args, SciWorldWorkflowArgs)
        return args

    def environment_class(self) -> type[Environment]:
        return SciWorldEnvironment

    def open(self) -> Environment:
        return open_environment(SciWorldEnvironment, self.options.environment_args,
                                timeout=self.options.env_timeout)


__all__ = ["SciWorldWorkflow", "SciWorldWorkflowArgs"]
