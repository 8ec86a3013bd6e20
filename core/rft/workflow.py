"""Tasks and the workflow interface.

A *task* is one row of a taskset plus what its taskset config says about it (workflow,
reward function, format keys, rollout args, repeat count). A *workflow* turns one task
into experiences by talking to the model through a :class:`~rft.rollout.model_wrapper.ModelWrapper`
and scoring the responses with the task's reward function:

    class MyWorkflow(Workflow):
        def run(self) -> list[Experience]:
            experiences = self.model.chat([{"role": "user", "content": self.task.prompt}],
                                          n=self.task.repeat_times, **self.task.sampling)
            for exp in experiences:
                self.score(exp, self.response_text(exp))
            return experiences

Workflows are plugins (``register_workflows``), selected by ``default_workflow_type``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rft.errors import RftError

if TYPE_CHECKING:
    from rft.environment import ActionParser, Environment
    from rft.experience import Experience
    from rft.rollout.model_wrapper import ModelWrapper

RewardFn = Callable[..., Mapping[str, float]]
"""``fn(response, truth, args) -> {part: value}``; the parts are summed into the reward."""


class RewardError(RftError):
    """A reward function returned something other than finite numbers."""


@dataclass
class Task:
    """One task of a taskset, ready for its workflow."""

    raw: dict[str, Any]
    """The dataset row."""
    index: int
    """Row index within the taskset."""
    taskset: str
    """Name of the taskset it comes from."""
    prompt: str | None = None
    """Text of ``format.prompt_key`` (plaintext prompts)."""
    messages: list[dict[str, Any]] | None = None
    """Chat messages of ``format.messages_key`` (messages prompts)."""
    truth: Any = None
    """Value of ``format.response_key``: the reference answer the reward compares with."""
    system_prompt: str | None = None
    """System prompt from ``format.system_prompt_key`` or ``format.system_prompt``."""
    tools: list[dict[str, Any]] | None = None
    """Tool definitions (OpenAI function specs) of ``format.tools_key``; the workflow's
    model renders them into every chat prompt it does not give tools of its own
    (:meth:`~rft.rollout.model_wrapper.ModelWrapper.chat`)."""
    repeat_times: int = 1
    """Rollouts to produce for this task."""
    sampling: dict[str, Any] = field(default_factory=dict)
    """Rollout args (temperature, top_p, top_k, max_tokens, …) for the engine."""
    workflow_args: Any = None
    """Instance of the workflow's ``Args`` dataclass (``workflow_args``)."""
    workflow: type | None = None
    """The workflow class a row names (``format.workflow_key``); ``None``: the taskset's."""
    reward_fn: RewardFn | None = None
    """The taskset's reward function."""
    reward_args: Any = None
    """Instance of the reward function's ``Args`` dataclass (``reward_fn_args``)."""
    is_eval: bool = False
    """Evaluation tasks are scored but never trained on."""
    environment: type[Environment] | None = None
    """The environment class the taskset names (``environment``), played by a workflow
    with :attr:`Workflow.plays_environments`; ``None``: none."""
    environment_args: Any = None
    """Instance of the environment's ``Args`` dataclass (``environment_args``)."""
    action_parser: ActionParser | None = None
    """The action parser validation resolved for the environment (``workflow_args.action_parser``,
    else the environment's ``default_action_parser``); ``None``: the workflow looks it up."""
    greedy_baseline: bool = False
    """The algorithm needs a greedy baseline (``AlgorithmPreset.reward_baseline``): the
    workflow also answers once greedily, scores that answer ``b`` and sets
    ``info["reward_baseline"] = b`` on every experience it returns."""
    images: tuple[Any, ...] = ()
    """The row's images (``format.image_key``) as RGB ``PIL.Image.Image`` objects, loaded
    and checked by the taskset (:mod:`rft.multimodal.media`); a multimodal workflow renders
    them through the model's processor (:mod:`rft.multimodal.processor`)."""
    videos: tuple[Any, ...] = ()
    """The row's videos (``format.video_key``), each a list of RGB frames."""

    def chat_messages(self) -> list[dict[str, Any]]:
        """Messages for a chat call: the task's messages, or system + user prompt."""
        if self.messages is not None:
            return list(self.messages)
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return messages + [{"role": "user", "content": self.prompt or ""}]


def default_reward_fn(workflow: Any) -> str | None:
    """The reward function ``workflow`` (a class) falls back to
    (:attr:`Workflow.default_reward_fn`; ``None`` for a workflow that declares none)."""
    name = getattr(workflow, "default_reward_fn", None)
    return name if isinstance(name, str) and name else None


def default_environment(workflow: Any) -> str | None:
    """The environment ``workflow`` (a class) plays when its taskset names none
    (:attr:`Workflow.default_environment`; ``None`` when it declares none)."""
    name = getattr(workflow, "default_environment", None)
    return name if isinstance(name, str) and name else None


def score_response(reward_fn: RewardFn, response: str, truth: Any, args: Any,
                   name: str = "reward function") -> dict[str, float]:
    """Call a reward function and check what it returned.

    :return: the reward parts as floats.
    :raises RewardError: a part is not a number, or is NaN/inf (one line naming it).
    """
    parts = reward_fn(response, truth, args) if args is not None else reward_fn(response, truth)
    if not isinstance(parts, Mapping):
        raise RewardError(f"{name} returned {type(parts).__name__}, expected a dict of "
                          "{part: number}")
    clean: dict[str, float] = {}
    for key, value in parts.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RewardError(f"{name} returned {key}={value!r}, which is not a number")
        if not math.isfinite(value):
            raise RewardError(f"{name} returned {key}={value}, which is not finite")
        clean[str(key)] = float(value)
    return clean


class Workflow(ABC):
    """Base class of workflows: one instance per task.

    :param task: the task to run.
    :param model: the rollout model (generate / chat / logprobs, returning experiences).
    :param auxiliary_models: extra models from ``explorer.auxiliary_models`` (judges, …).
    """

    Args: type | None = None
    """Dataclass of the workflow's ``workflow_args``; ``None``: takes none."""

    default_reward_fn: str | None = None
    """The registered reward function the workflow scores with when its taskset names none
    (``default_reward_fn_type`` unset): config validation selects it and says so in one
    line (Trinity-RFT's ``math_workflow`` falls back to its math reward this way).
    ``None``: the taskset's reward function, when the workflow needs one, must be set."""

    plays_environments: bool = False
    """The workflow plays the task's :attr:`Task.environment` (a taskset may set
    ``environment`` only with such a workflow, and such a workflow needs one)."""

    takes_images: bool = False
    """The workflow sends the task's :attr:`Task.images` to the model (a taskset may set
    ``format.image_key`` / ``video_key`` only with such a workflow: another would train on
    the text alone)."""

    default_environment: str | None = None
    """The registered environment such a workflow plays when its taskset names none
    (config derivation fills the taskset's ``environment`` with it: Trinity-RFT's
    ``alfworld_workflow`` names no environment in its configs). ``None``: the taskset names
    it."""

    def __init__(self, task: Task, model: ModelWrapper,
                 auxiliary_models: list[ModelWrapper] | None = None) -> None:
        self.task = task
        self.model = model
        self.auxiliary_models = auxiliary_models or []
        self.args = task.workflow_args

    @abstractmethod
    def run(self) -> list[Experience]:
        """Run the task; return its experiences (each with reward set)."""

    def auxiliary_model(self, name: str | int) -> ModelWrapper:
        """The auxiliary model called ``name`` (``explorer.auxiliary_models[i].name``, else
        its position ``i``); a one-line error lists the configured ones."""
        for model in self.auxiliary_models:
            if model.name == name:
                return model
        index = name if isinstance(name, int) else int(name) if name.isdigit() else None
        if index is not None and 0 <= index < len(self.auxiliary_models):
            return self.auxiliary_models[index]
        known = ", ".join(repr(m.name) for m in self.auxiliary_models) or "none configured"
        raise RftError(f"no auxiliary model {name!r} (explorer.auxiliary_models: {known})")

    def attach_greedy_baseline(self, experiences: list[Experience],
                               messages: list[dict[str, Any]]) -> None:
        """When the task asks for it (:attr:`Task.greedy_baseline`), answer ``messages`` once
        greedily, score it as ``b`` and set ``info["reward_baseline"] = b`` on every
        experience (ReMax's baseline)."""
        if not self.task.greedy_baseline or not experiences:
            return
        sampling = {**self.task.sampling, "temperature": 0.0}
        (greedy,) = self.model.chat(messages, n=1, **sampling)
        baseline = self.score(greedy, self.response_text(greedy))
        for experience in experiences:
            experience.info["reward_baseline"] = baseline

    def response_text(self, experience: Experience) -> str:
        """The experience's response text: the engine's own decoding when it has one, else
        the decoded response tokens."""
        if experience.response_text is not None:
            return experience.response_text
        return self.model.decode(experience.response_tokens)

    def score(self, experience: Experience, response: str) -> float:
        """Set ``experience.reward`` (sum of the reward parts) and its metrics; return it."""
        if self.task.reward_fn is None:
            raise RftError(f"taskset {self.task.taskset!r}: no reward function configured")
        parts = score_response(self.task.reward_fn, response, self.task.truth,
                               self.task.reward_args,
                               name=getattr(self.task.reward_fn, "__name__", "reward function"))
        experience.reward = sum(parts.values())
        experience.metrics.update({f"reward/{k}": v for k, v in parts.items()})
        return experience.reward
