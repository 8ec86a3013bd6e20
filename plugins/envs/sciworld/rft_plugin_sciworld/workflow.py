"""``sciworld_workflow``: Trinity-RFT's ScienceWorld workflow name, bound to rft's
``environment_workflow`` playing ``sciworld``.

Trinity-RFT's ``sciworld_workflow`` plays one ScienceWorld task (its row: a JSON string of
``task_name`` / ``var_num`` in the prompt column) for at most 30 steps with ``easy``
simplifications, the action inside ``<action>``, and trains on the whole conversation with
the reward ``max score / 100``. Here that is ``environment_workflow`` with those defaults;
a taskset that names no ``environment`` plays ``sciworld`` (:attr:`default_environment`),
with the environment's arguments in the taskset's ``environment_args``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow


@dataclass
class SciWorldWorkflowArgs(EnvironmentArgs):
    """``workflow_args`` of ``sciworld_workflow``: ``environment_workflow``'s, with
    Trinity-RFT's defaults and its name ``max_env_steps``."""

    max_steps: int = 30
    """Most model replies per episode (Trinity-RFT plays 30)."""
    max_env_steps: int | None = None
    """Trinity-RFT's name of ``max_steps``; both set and different: refused."""
    reward: Literal["terminal", "sum"] = "sum"
    """``sum``: the step rewards add up to the best score / 100 (Trinity-RFT's reward)."""
    env_timeout: float | None = None
    """No limit around each call: the environment's own ``timeout`` / ``start_timeout``
    stop a JVM that hangs (a thread cannot be stopped; the JVM can)."""

    def __post_init__(self) -> None:
        if self.max_env_steps is not None:
            if self.max_steps not in (30, self.max_env_steps):
                raise ValueError(f"max_env_steps {self.max_env_steps} differs from max_steps "
                                 f"{self.max_steps} (Trinity-RFT's name of it); set one")
            self.max_steps = self.max_env_steps
        super().__post_init__()


class SciWorldWorkflow(EnvironmentWorkflow):
    """``environment_workflow`` with Trinity-RFT's defaults, playing ``sciworld`` unless
    the taskset names another environment (module docstring)."""

    Args = SciWorldWorkflowArgs
    default_environment = "sciworld"


__all__ = ["SciWorldWorkflow", "SciWorldWorkflowArgs"]
