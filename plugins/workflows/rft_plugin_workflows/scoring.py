"""Calling a taskset's reward function with the inputs it declares beyond the text.

A reward function is called as ``fn(response, truth, args)``. One that needs more declares
``fn.extra_inputs``: names of optional keyword arguments. The workflows of this
distribution pass those they have (:meth:`SimpleWorkflow.reward_inputs
<rft_plugin_workflows.single_turn.SimpleWorkflow.reward_inputs>`):

``response_tokens``
    the response's token ids (``math_dapo_reward``'s overlong penalty counts them);
``with_think``, ``format_score_coef``
    ``math_boxed_workflow``'s arguments (``math_boxed_reward``'s format score).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from rft.errors import RftError
from rft.workflow import Task, score_response


def reward_name(task: Task) -> str:
    """The task's reward function's name, for messages."""
    return getattr(task.reward_fn, "__name__", "reward function")


def reward_parts(task: Task, response: str, inputs: Mapping[str, Any] | None = None,
                 *, workflow: str = "workflow") -> dict[str, float]:
    """The parts of the task's reward for ``response``, the declared ``extra_inputs`` taken
    from ``inputs`` (those that are ``None`` or missing are not passed).

    :raises RftError: the taskset has no reward function.
    :raises RewardError: a part is not a finite number.
    """
    fn = task.reward_fn
    if fn is None:
        raise RftError(f"taskset {task.taskset!r}: {workflow} needs a reward function "
                       "(default_reward_fn_type)")
    wanted = getattr(fn, "extra_inputs", ())
    extras = {name: inputs[name] for name in wanted
              if inputs is not None and inputs.get(name) is not None}
    call = functools.partial(fn, **extras) if extras else fn
    return score_response(call, response, task.truth, task.reward_args, name=reward_name(task))


__all__ = ["reward_name", "reward_parts"]
