"""The contract checks of reward functions and workflows: :func:`check_reward` and
:func:`check_workflow` (re-exported by :mod:`rft.testing.checks`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch


from rft.testing.check_base import _Check, _finite


def _call_reward(fn: Callable[..., Any], response: str, truth: Any, args: Any) -> Any:
    return fn(response, truth, args) if args is not None else fn(response, truth)


def check_reward(fn: Callable[..., Any], args: Any,
                 cases: Iterable[tuple[str, Any]] | tuple[str, Any]) -> list[dict[str, float]]:
    """Check a reward function ``fn(response, truth[, args]) -> {part: value}`` (called as
    rft calls it: without ``args`` when ``args`` is ``None``) on ``(response, truth)`` cases
    (one pair or an iterable of pairs).

    1. it returns a mapping of string names to numbers (not bools), each finite — the
       reward is their sum;
    2. it is deterministic: the same case gives the same parts.

    :return: the parts of each case, as floats.
    """
    check = _Check("check_reward", fn)
    if isinstance(cases, tuple) and len(cases) == 2 and isinstance(cases[0], str):
        cases = [cases]
    results: list[dict[str, float]] = []
    for response, truth in cases:
        parts = _call_reward(fn, response, truth, args)
        check.ensure(isinstance(parts, Mapping), "must return a dict {part: number}",
                     f"got {type(parts).__name__} for response {response[:40]!r}")
        clean: dict[str, float] = {}
        for key, value in parts.items():
            check.ensure(isinstance(key, str), "part names must be strings", repr(key))
            check.ensure(isinstance(value, (int, float)) and not isinstance(value, bool),
                         f"part {key!r} must be a number", f"got {value!r}")
            check.ensure(math.isfinite(value), f"part {key!r} is not finite",
                         f"{value} for response {response[:40]!r}")
            clean[key] = float(value)
        again = _call_reward(fn, response, truth, args)
        check.ensure(dict(again) == dict(parts), "not deterministic: the same case gave "
                     "different parts", f"{dict(parts)} then {dict(again)}")
        results.append(clean)
    return results


def check_workflow(workflow_cls: type, args: Any, task: Any, model: Any) -> list[Any]:
    """Run ``workflow_cls(task, model)`` once (``task.workflow_args = args``; the ``Args``
    defaults when ``args`` is ``None``) and check the experiences it returns.

    1. ``run()`` returns a non-empty list of :class:`rft.experience.Experience`;
    2. each has 1-D integer ``tokens`` with ``1 ≤ prompt_length ≤ len(tokens)``; its
       ``logprobs`` (when set) are ``(R,)`` and finite, its ``action_mask`` (when set)
       ``(R,)``, ``R`` the response length;
    3. each is scored: a finite ``reward``, or a finite ``token_level_reward`` ``(R,)``;
       its metrics are finite numbers;
    4. when ``task.greedy_baseline`` is set (ReMax), each carries a finite
       ``info["reward_baseline"]``.

    :param model: a :class:`rft.rollout.model_wrapper.ModelWrapper` (the ``rft_model``
        fixture wraps the tiny model).
    :return: the experiences.
    """
    from rft.experience import Experience

    check = _Check("check_workflow", workflow_cls)
    args_type = getattr(workflow_cls, "Args", None)
    if args is None and args_type is not None:
        args = args_type()
    task = dataclasses.replace(task, workflow_args=args)
    experiences = workflow_cls(task, model).run()
    check.ensure(isinstance(experiences, list) and len(experiences) > 0,
                 "run() must return a non-empty list of experiences",
                 f"got {type(experiences).__name__} of length "
                 f"{len(experiences) if isinstance(experiences, Sequence) else '?'}")
    for i, exp in enumerate(experiences):
        where = f"experience {i}"
        check.ensure(isinstance(exp, Experience), f"{where} is not an Experience",
                     type(exp).__name__)
        tokens = exp.tokens
        check.ensure(isinstance(tokens, torch.Tensor) and tokens.dim() == 1
                     and not tokens.is_floating_point(), f"{where}: tokens must be 1-D integers")
        check.ensure(1 <= exp.prompt_length <= tokens.shape[0],
                     f"{where}: prompt_length must be within 1 … len(tokens)",
                     f"{exp.prompt_length} of {tokens.shape[0]}")
        length = tokens.shape[0] - exp.prompt_length
        if exp.logprobs is not None:
            check.ensure(tuple(exp.logprobs.shape) == (length,),
                         f"{where}: logprobs must be (R,)", f"got {tuple(exp.logprobs.shape)}, "
                         f"R = {length}")
            check.ensure(_finite(exp.logprobs), f"{where}: logprobs are not finite")
        if exp.action_mask is not None:
            check.ensure(tuple(exp.action_mask.shape) == (length,),
                         f"{where}: action_mask must be (R,)",
                         f"got {tuple(exp.action_mask.shape)}, R = {length}")
        if exp.token_level_reward is not None:
            check.ensure(tuple(exp.token_level_reward.shape) == (length,)
                         and _finite(exp.token_level_reward),
                         f"{where}: token_level_reward must be finite and (R,)")
        else:
            check.ensure(isinstance(exp.reward, (int, float)) and math.isfinite(exp.reward),
                         f"{where} is not scored: reward must be a finite number",
                         f"got {exp.reward!r}")
        for key, value in exp.metrics.items():
            check.ensure(isinstance(value, (int, float)) and math.isfinite(value),
                         f"{where}: metric {key!r} must be a finite number", repr(value))
        if task.greedy_baseline:
            baseline = exp.info.get("reward_baseline")
            check.ensure(isinstance(baseline, (int, float)) and math.isfinite(baseline),
                         f"{where}: task.greedy_baseline is set but info['reward_baseline'] "
                         "is missing (call self.attach_greedy_baseline)", repr(baseline))
    return experiences
