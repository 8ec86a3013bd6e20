"""``verl_workflow``: a task in veRL's dataset layout, rewarded as veRL rewards it.

veRL's preprocessed datasets (``examples/data_preprocess``) hold one prompt per row: the
chat messages in ``prompt``, the reference answer in ``reward_model.ground_truth``, the
dataset's name in ``data_source`` and anything else in ``extra_info``. veRL's default
reward manager decodes each response and scores it with
``compute_score(data_source, solution_str, ground_truth, extra_info)``: the function of
``custom_reward_function`` when the launch names one, else
``verl.utils.reward_score.default_compute_score``, which picks the scorer by
``data_source``.

The workflow does the same for one task: it sends the row's messages as they are (the
taskset's ``format.messages_key``), samples ``repeat_times`` responses and scores each

- with the taskset's reward function when it has one (``default_reward_fn_type``, e.g.
  ``gsm8k_reward``, rft's port of veRL's GSM8K scorer), given the ground truth (and the
  response's token ids when the function declares ``extra_inputs = ("response_tokens",)``);
- else with the custom function (``workflow_args.custom_reward_path`` /
  ``custom_reward_name`` / ``reward_kwargs``, loaded from its file as veRL loads it);
- else with veRL's own ``default_compute_score`` (veRL must be installed).

A score that is a dict contributes its ``score`` as the reward and its other numbers as
``reward/<name>`` metrics, as in veRL. ``rft convert-verl`` writes configs that use it.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rft.errors import RftError
from rft.workflow import Workflow, score_response

if TYPE_CHECKING:
    from rft.experience import Experience

__all__ = ["VerlWorkflow", "VerlWorkflowArgs", "ground_truth", "load_custom_reward"]


@dataclass
class VerlWorkflowArgs:
    """Arguments of ``verl_workflow`` (``workflow_args``)."""

    custom_reward_path: str | None = None
    """File of a custom reward function (veRL's ``custom_reward_function.path``);
    ``None``: the taskset's reward function, else veRL's ``default_compute_score``."""
    custom_reward_name: str = "compute_score"
    """Name of the function in that file (veRL's ``custom_reward_function.name``)."""
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of the custom function (veRL's
    ``custom_reward_function.reward_kwargs``)."""
    data_source: str | None = None
    """``data_source`` of rows that have no such column; ``None``: such rows fail."""


def ground_truth(row: Mapping[str, Any], truth: Any) -> Any:
    """The reference answer of a veRL row: ``reward_model.ground_truth`` (the row's column,
    or ``truth`` when that is the ``reward_model`` mapping), else ``truth`` itself."""
    for candidate in (row.get("reward_model"), truth):
        if isinstance(candidate, Mapping) and "ground_truth" in candidate:
            return candidate["ground_truth"]
    return truth


_CUSTOM: dict[tuple[str, str], Callable[..., Any]] = {}


def load_custom_reward(path: str, name: str) -> Callable[..., Any]:
    """The function ``name`` of the Python file ``path`` (loaded once per process).

    :raises RftError: no such file or function (one line).
    """
    key = (os.path.abspath(os.path.expanduser(path)), name)
    if key in _CUSTOM:
        return _CUSTOM[key]
    if not os.path.isfile(key[0]):
        raise RftError(f"workflow_args.custom_reward_path: {path!r} does not exist")
    spec = importlib.util.spec_from_file_location("rft_verl_custom_reward", key[0])
    if spec is None or spec.loader is None:
        raise RftError(f"workflow_args.custom_reward_path: cannot load {path!r}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: name it and the cause
        raise RftError(f"workflow_args.custom_reward_path: {path!r} failed to import: "
                       f"{type(exc).__name__}: {exc}") from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise RftError(f"workflow_args.custom_reward_name: {path!r} has no function {name!r}")
    _CUSTOM[key] = function
    return function


def _verl_default_compute_score() -> Callable[..., Any]:
    try:
        from verl.utils.reward_score import default_compute_score
    except ImportError as exc:
        raise RftError("verl_workflow: this row's data_source is scored by veRL's "
                       "default_compute_score, which needs veRL installed (pip install verl); "
                       "or set the taskset's default_reward_fn_type / "
                       "workflow_args.custom_reward_path") from exc
    return default_compute_score


def _as_score(result: Any, where: str) -> tuple[float, dict[str, float]]:
    """veRL's score (a number, or a dict with ``score``) → ``(reward, extra metrics)``."""
    extras: dict[str, float] = {}
    if isinstance(result, Mapping):
        if "score" not in result:
            raise RftError(f"{where} returned a dict without 'score': {sorted(result)}")
        extras = {str(k): float(v) for k, v in result.items()
                  if k != "score" and isinstance(v, (int, float))}
        result = result["score"]
    elif isinstance(result, (list, tuple)) and result:
        result = result[0]
    try:
        score = float(result)
    except (TypeError, ValueError):
        raise RftError(f"{where} returned {result!r}, which is not a number") from None
    if not math.isfinite(score):
        raise RftError(f"{where} returned {score}, which is not finite")
    return score, extras


class VerlWorkflow(Workflow):
    """One chat turn on the row's messages; each response scored as veRL scores it."""

    Args = VerlWorkflowArgs

    def run(self) -> list[Experience]:
        messages = self.task.chat_messages()
        experiences = self.model.chat(messages, n=self.task.repeat_times, **self.task.sampling)
        for experience in experiences:
            self.score(experience, self.response_text(experience))
        self.attach_greedy_baseline(experiences, messages)
        return experiences

    def score(self, experience: Experience, response: str) -> float:
        row = self.task.raw
        truth = ground_truth(row, self.task.truth)
        if self.task.reward_fn is not None:
            function = self.task.reward_fn
            # a reward that declares extra inputs (math_dapo_reward's response_tokens) gets
            # those the workflow has
            tokens = getattr(experience, "response_tokens", None)
            if "response_tokens" in getattr(function, "extra_inputs", ()) and tokens is not None:
                function = functools.partial(function, response_tokens=tokens)
            parts = score_response(function, response, truth, self.task.reward_args,
                                   name=getattr(self.task.reward_fn, "__name__",
                                                "reward function"))
            experience.reward = sum(parts.values())
            experience.metrics.update({f"reward/{k}": v for k, v in parts.items()})
            return experience.reward
        args = self.args or VerlWorkflowArgs()
        data_source = row.get("data_source") or args.data_source
        if args.custom_reward_path:
            function = load_custom_reward(args.custom_reward_path, args.custom_reward_name)
            where = f"{args.custom_reward_path}:{args.custom_reward_name}"
        else:
            if not data_source:
                raise RftError(f"taskset {self.task.taskset!r}: row {self.task.index} has no "
                               "data_source column (veRL scores by it); set "
                               "workflow_args.data_source or default_reward_fn_type")
            function = _verl_default_compute_score()
            where = f"veRL's default_compute_score (data_source {data_source!r})"
        try:
            result = function(data_source=data_source, solution_str=response,
                              ground_truth=truth, extra_info=row.get("extra_info"),
                              **args.reward_kwargs)
        except NotImplementedError as exc:
            raise RftError(f"{where}: veRL has no reward function for it ({exc}); set the "
                           "taskset's default_reward_fn_type or "
                           "workflow_args.custom_reward_path") from exc
        score, extras = _as_score(result, where)
        experience.reward = score
        experience.metrics["reward/score"] = score
        experience.metrics.update({f"reward/{k}": v for k, v in extras.items()})
        return score
