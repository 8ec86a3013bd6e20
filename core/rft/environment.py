"""The environment contract: text environments an agent acts in over many turns.

An environment plugin registers classes (``register_environments``) that follow a
Gymnasium-style contract over text::

    class Guess(Environment):
        def reset(self, task, seed=None):
            self.secret = int(task.raw["secret"])
            return "Guess a number from 1 to 10.", {}

        def step(self, action):
            if action.strip() == str(self.secret):
                return StepResult("Right!", reward=1.0, terminated=True)
            return StepResult("Wrong, try again.", reward=0.0)

The generic ``environment_workflow`` (rft-plugin-workflows) plays any registered environment
with the policy: the chat history is the state, the model's reply goes through an action
parser into :meth:`Environment.step`, and the observation comes back as the next user
message, until ``terminated`` or ``truncated`` or the workflow's ``max_steps``.

Lifecycle: one instance serves many episodes when :attr:`Environment.reusable` is true
(``reset`` starts each one); :meth:`Environment.close` is called once when the instance is
no longer needed and must be idempotent. Environments that need a process of their own (a
JVM, a server) start it in ``__init__`` or ``reset`` and stop it in ``close``; the explorer
runs each instance under the time-outs of its workflow and reports a dead one in one line;
with :attr:`Environment.out_of_process` rft runs the instance in a child process of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rft.errors import RftError

if TYPE_CHECKING:
    from rft.workflow import Task


class EnvironmentFailure(RftError):
    """An environment failed (its process died, a call timed out, it broke its contract);
    the message names the environment in one line.

    Retryable: the workflow runner tries the task again up to ``explorer.max_retry_times``
    (a dead JVM or a stuck server may well work on a fresh instance), then counts it
    failed and the run goes on."""

    retryable = True


@dataclass(frozen=True)
class StepResult:
    """What :meth:`Environment.step` returns (Gymnasium's ``step`` tuple, named)."""

    observation: str
    """Text the agent sees next (the next user message)."""
    reward: float = 0.0
    """Reward earned by this action (shaped rewards per step; the terminal reward on the
    last one)."""
    terminated: bool = False
    """The episode ended inside the environment (goal reached, lost)."""
    truncated: bool = False
    """The environment cut the episode short (its own step limit)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Extra facts of this step (``won``, ``score``, ``admissible_actions``, ...)."""


class Environment(ABC):
    """Base class of text environments (module docstring).

    :param args: an instance of :attr:`Args` filled from the taskset's
        ``environment_args`` (``None`` when the class declares no ``Args``).
    """

    Args: ClassVar[type | None] = None
    """Dataclass of the environment's arguments; ``None``: takes none."""

    reusable: ClassVar[bool] = True
    """One instance may play many episodes (``reset`` between them); ``False``: a new
    instance per episode."""

    out_of_process: ClassVar[bool] = False
    """Run each instance in a child process of its own
    (:class:`rft.environments.process_host.ProcessEnvironment`): for environments that may
    crash or hang the interpreter (native code, a JVM bridge). Its ``Args``, the task and
    what ``reset`` / ``step`` return must pickle."""

    default_action_parser: ClassVar[str] = "raw"
    """Name of the registered action parser that turns a model reply into an action when
    the workflow names none."""

    def __init__(self, args: Any = None) -> None:
        self.args = args

    def system_prompt(self) -> str | None:
        """Instructions shown to the agent before the first observation (``None``: none)."""
        return None

    @abstractmethod
    def reset(self, task: Task, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode of ``task`` (its row in ``task.raw`` names the game, level, ...).

        :return: the first observation and an info dict.
        """

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply ``action`` (the parsed reply) and return what follows."""

    def close(self) -> None:
        """Release what the environment holds (processes, files); idempotent."""


ActionParser = Callable[[str], str | None]
"""An action parser (``register_action_parsers``): the model's reply → the action passed to
:meth:`Environment.step`, or ``None`` when the reply holds no valid action."""


__all__ = ["ActionParser", "Environment", "EnvironmentFailure", "StepResult"]
