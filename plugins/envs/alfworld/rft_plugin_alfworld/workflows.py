"""Trinity-RFT's ALFWorld workflow names, bound to rft's ``environment_workflow`` playing
``alfworld``.

| Trinity-RFT name | here |
|---|---|
| ``alfworld_workflow`` | one experience per episode (its concatenated multi-turn form), 30 steps |
| ``alfworld_workflow_v2``, ``step_wise_alfworld_workflow`` | one experience per step, the episode's reward on each (its ``RewardPropagationWorkflow``; ``multi_step_grpo`` / ``step_wise_grpo``), 30 steps (``max_env_steps``) |
| ``RAFT_alfworld_workflow`` | one experience per episode, 50 steps, replies must hold ``<experience>``, ``<think>`` and ``<action>`` (parser ``experience_think_action``); ``raft`` fine-tunes on the won ones (reward 1) |
| ``RAFT_reflect_alfworld_workflow`` | as ``RAFT_alfworld_workflow``; Trinity-RFT's second, reflected attempt after a failure is not made |

Rewards as Trinity-RFT's: 1 when the episode is won; an episode that is not won earns
``unfinished_reward`` (-0.1 for ``alfworld_workflow`` and the step-wise ones, 0 for the
RAFT ones). A taskset that names no ``environment`` plays ``alfworld``
(:attr:`default_environment`), with the environment's arguments (``data_path``, ...) in the
taskset's ``environment_args``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rft.environment import ActionParser, Environment
from rft.experience import Experience
from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow

RAFT_REPLY = re.compile(r"<experience>\s*(\S.*?)\s*</experience>.*?<think>\s*(\S.*?)\s*</think>"
                        r".*?<action>\s*(\S.*?)\s*</action>", re.DOTALL)


def experience_think_action(reply: str) -> str | None:
    """The action of a reply holding non-empty ``<experience>``, ``<think>`` and
    ``<action>`` parts in that order (Trinity-RFT's RAFT format); ``None`` otherwise."""
    found = RAFT_REPLY.search(reply)
    return found.group(3) if found else None


@dataclass
class AlfWorldWorkflowArgs(EnvironmentArgs):
    """``workflow_args`` of the ALFWorld workflows: ``environment_workflow``'s with
    Trinity-RFT's defaults and names."""

    max_steps: int = 30
    """Most model replies per episode (Trinity-RFT: 30; its RAFT workflows: 50)."""
    max_env_steps: int | None = None
    """Trinity-RFT's name of ``max_steps``; when set it wins (setting both to different
    values, ``max_steps`` other than its default, is refused)."""
    unfinished_reward: float = -0.1
    """Reward of an episode that is not won (Trinity-RFT: -0.1; RAFT: 0)."""

    def __post_init__(self) -> None:
        if self.max_env_steps is not None:
            default = type(self).__dataclass_fields__["max_steps"].default
            if self.max_steps not in (default, self.max_env_steps):
                raise ValueError(f"max_env_steps {self.max_env_steps} differs from max_steps "
                                 f"{self.max_steps} (Trinity-RFT's name of it); set one")
            self.max_steps = self.max_env_steps
        super().__post_init__()


@dataclass
class StepWiseAlfWorldArgs(AlfWorldWorkflowArgs):
    """``alfworld_workflow_v2`` / ``step_wise_alfworld_workflow``: one experience per step."""

    experience_form: Literal["episode", "step"] = "step"


@dataclass
class RAFTAlfWorldArgs(AlfWorldWorkflowArgs):
    """``RAFT_alfworld_workflow`` / ``RAFT_reflect_alfworld_workflow``."""

    max_steps: int = 50
    action_parser: str | None = "experience_think_action"
    unfinished_reward: float = 0.0


class AlfWorldWorkflow(EnvironmentWorkflow):
    """``environment_workflow`` on ``alfworld`` with Trinity-RFT's defaults (module
    docstring): ``alfworld_workflow``."""

    Args = AlfWorldWorkflowArgs
    default_environment = "alfworld"

    @property
    def options(self) -> AlfWorldWorkflowArgs:
        args = self.args if self.args is not None else self.Args()
        assert isinstance(args, AlfWorldWorkflowArgs)
        return args

    def episode(self, env: Environment, parser: ActionParser, index: int) -> list[Experience]:
        """``environment_workflow``'s episode; one that is not won earns
        ``unfinished_reward``."""
        experiences = super().episode(env, parser, index)
        if experiences and experiences[-1].metrics.get("env/success") == 0.0:
            change = self.options.unfinished_reward - float(experiences[-1].reward)
            for experience in experiences:
                experience.reward = self.options.unfinished_reward
            if "step_reward" in experiences[-1].info:  # step form: Σ r_t stays the return
                experiences[-1].info["step_reward"] += change
        return experiences


class StepWiseAlfWorldWorkflow(AlfWorldWorkflow):
    """``alfworld_workflow_v2`` and ``step_wise_alfworld_workflow``."""

    Args = StepWiseAlfWorldArgs


class RAFTAlfWorldWorkflow(AlfWorldWorkflow):
    """``RAFT_alfworld_workflow`` and ``RAFT_reflect_alfworld_workflow``."""

    Args = RAFTAlfWorldArgs


WORKFLOWS: dict[str, type] = {
    "alfworld_workflow": AlfWorldWorkflow,
    "alfworld_workflow_v2": StepWiseAlfWorldWorkflow,
    "step_wise_alfworld_workflow": StepWiseAlfWorldWorkflow,
    "RAFT_alfworld_workflow": RAFTAlfWorldWorkflow,
    "RAFT_reflect_alfworld_workflow": RAFTAlfWorldWorkflow,
}
"""Trinity-RFT's names and what plays them."""

__all__ = ["AlfWorldWorkflow", "AlfWorldWorkflowArgs", "RAFTAlfWorldArgs",
           "RAFTAlfWorldWorkflow", "StepWiseAlfWorldArgs", "StepWiseAlfWorldWorkflow",
           "WORKFLOWS", "experience_think_action"]
