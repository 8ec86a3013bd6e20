"""Equivalence with veRL's ``core_algos``: :func:`assert_equals_verl` (re-exported by
:mod:`rft.testing.checks`)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from rft.contracts import AdvantageInputs, AggContext, KLInputs, PolicyLossInputs

from rft.testing.check_advantage import _advantages
from rft.testing.check_base import _Check, _grad, _leaf
from rft.testing.check_policy_loss import _aggregated


def _verl_core_algos() -> Any:
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        import pytest

        pytest.skip(f"veRL is not installed (pip install \"rft-framework[verl]\"; "
                    f"import verl.trainer.ppo.core_algos failed: {exc})")
    return core_algos


def _verl_index(index: Any) -> Any:
    """Group ids as veRL wants them: an object array of hashable labels."""
    import numpy as np

    labels = index.tolist() if isinstance(index, torch.Tensor) else list(index)
    return np.array([str(label) for label in labels], dtype=object)


def _verl_actor_config(agg: AggContext, config: Any) -> Any:
    """veRL's actor config: ``config`` as given, or an ``ActorConfig`` built from a dict
    (veRL's names: ``clip_ratio``, ``clip_ratio_low`` …) with ``agg``'s global counts."""
    if config is not None and not isinstance(config, Mapping):
        return config
    from verl.workers.config import ActorConfig

    info = {key: value for key, value in agg.kwargs().items() if value is not None}
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                       **{"global_batch_info": info, **dict(config or {})})


def _compare_verl(check: _Check, label: str, ours: torch.Tensor, theirs: Any) -> None:
    from rft.testing.algorithms import TOL

    theirs = torch.as_tensor(theirs, dtype=torch.float64)
    ours = ours.detach().to(torch.float64)
    check.ensure(ours.shape == theirs.shape, f"{label}: shape differs from veRL's",
                 f"{tuple(ours.shape)} vs {tuple(theirs.shape)}")
    close = torch.isclose(ours, theirs, atol=TOL["atol"], rtol=TOL["rtol"])
    worst = (ours - theirs).abs().max().item() if ours.numel() else 0.0
    check.ensure(bool(close.all()), f"{label} differs from veRL's", f"max gap {worst:.3g}")


def assert_equals_verl(fn: Callable[..., Any], args: Any, verl_fn_name: str, inputs: Any,
                       **verl_kwargs: Any) -> None:
    """``fn(inputs, args)`` equals veRL 0.9.1's ``verl_fn_name`` on the same tensors, to
    :data:`rft.testing.algorithms.TOL` (float64). Skips the test when veRL is not
    installed.

    ``verl_fn_name`` is a function of ``verl.trainer.ppo.core_algos``
    (``compute_grpo_outcome_advantage``), a name of veRL's policy-loss registry
    (``vanilla``, ``gspo``) or, for KL inputs, a ``kl_penalty`` name (``low_var_kl``).
    The tensors of ``inputs`` fill the veRL function's parameters of the same name
    (``token_level_rewards``, ``response_mask``, ``index``, ``values``,
    ``reward_baselines``, ``old_log_prob``, ``log_prob``, ``advantages``, ``logprob``,
    ``ref_logprob``, ``loss_agg_mode``); ``verl_kwargs`` give the rest
    (``epsilon=…``, ``gamma=…``, ``config=…``). For a policy loss ``config`` may be a
    dict of veRL actor settings (``{"clip_ratio": 0.2}``): it becomes an ``ActorConfig``
    carrying ``inputs.agg``'s global counts.

    Compared: policy loss — the aggregated loss (veRL's NaN on an all-empty mask is
    rft's 0), its gradient w.r.t. ``log_prob``, and each metric both report
    (``actor/<name>``); advantage — ``(advantages, returns)``, and a ``ValueError`` from
    veRL must be one from ``fn`` too; KL — the values and the gradients w.r.t. both
    log-probs.
    """
    core_algos = _verl_core_algos()
    check = _Check(f"assert_equals_verl[{verl_fn_name}]", fn)
    if isinstance(inputs, PolicyLossInputs):
        _verl_policy_loss(check, core_algos, fn, args, verl_fn_name, inputs, verl_kwargs)
    elif isinstance(inputs, AdvantageInputs):
        _verl_advantage(check, core_algos, fn, args, verl_fn_name, inputs, verl_kwargs)
    elif isinstance(inputs, KLInputs):
        _verl_kl(check, core_algos, fn, args, verl_fn_name, inputs)
    else:
        raise TypeError(f"assert_equals_verl: inputs must be PolicyLossInputs, "
                        f"AdvantageInputs or KLInputs, got {type(inputs).__name__}")


def _verl_policy_loss(check: _Check, core_algos: Any, fn: Callable[..., Any], args: Any,
                      name: str, inputs: PolicyLossInputs, verl_kwargs: dict[str, Any]) -> None:
    verl_fn = (getattr(core_algos, name) if hasattr(core_algos, name)
               else core_algos.get_policy_loss_fn(name))
    log_prob = _leaf(inputs.log_prob)
    ours_inputs = dataclasses.replace(inputs, log_prob=log_prob)
    ours, metrics, _ = _aggregated(check, fn, args, ours_inputs)
    kwargs = dict(verl_kwargs)
    config = _verl_actor_config(inputs.agg, kwargs.pop("config", None))
    theirs, their_metrics = verl_fn(
        old_log_prob=inputs.old_log_prob.detach().clone(), log_prob=log_prob,
        advantages=inputs.advantages.detach().clone(),
        response_mask=inputs.response_mask.detach().clone(), loss_agg_mode=inputs.agg.mode,
        config=config, **kwargs)
    for key, value in metrics.items():
        their_key = key if key in their_metrics else f"actor/{key}"
        if their_key in their_metrics:
            _compare_verl(check, f"metric {key!r}", torch.as_tensor(float(value)),
                          float(their_metrics[their_key]))
    if torch.isnan(theirs):
        check.ensure(bool(inputs.response_mask.sum() == 0) and ours.item() == 0.0,
                     "veRL's loss is NaN but the mask is not empty or ours is not 0")
        return
    _compare_verl(check, "loss", ours, theirs.detach())
    _compare_verl(check, "gradient w.r.t. log_prob", _grad(ours, log_prob), _grad(theirs, log_prob))


def _verl_advantage(check: _Check, core_algos: Any, fn: Callable[..., Any], args: Any,
                    name: str, inputs: AdvantageInputs, verl_kwargs: dict[str, Any]) -> None:
    verl_fn = (getattr(core_algos, name) if hasattr(core_algos, name)
               else core_algos.get_adv_estimator_fn(name))
    available: dict[str, Any] = {
        "token_level_rewards": inputs.token_level_rewards, "response_mask": inputs.response_mask,
        "index": _verl_index(inputs.index), "values": inputs.values,
        "reward_baselines": inputs.reward_baselines}
    parameters = inspect.signature(verl_fn).parameters
    kwargs = {key: (value.detach().clone() if isinstance(value, torch.Tensor) else value)
              for key, value in available.items() if key in parameters and value is not None}
    kwargs.update(verl_kwargs)
    try:
        theirs = verl_fn(**kwargs)
    except ValueError as exc:
        try:
            fn(inputs, args)
        except ValueError:
            return
        check.fail("veRL raises ValueError on this batch but the function does not", str(exc))
    ours = _advantages(check, fn, args, inputs)
    for label, a, b in zip(("advantages", "returns"), ours, theirs, strict=True):
        _compare_verl(check, label, a, b)


def _verl_kl(check: _Check, core_algos: Any, fn: Callable[..., Any], args: Any, name: str,
             inputs: KLInputs) -> None:
    log_prob, ref = _leaf(inputs.log_prob), _leaf(inputs.ref_log_prob)
    ours = fn(KLInputs(log_prob, ref), args)
    if hasattr(core_algos, name):
        theirs = getattr(core_algos, name)(log_prob, ref)
    else:
        theirs = core_algos.kl_penalty(log_prob, ref, name)
    _compare_verl(check, "kl", ours, theirs.detach())
    weights = torch.Generator().manual_seed(0)
    w = torch.randn(ours.shape, generator=weights, dtype=torch.float64).to(ours.dtype)
    for label, leaf in (("log_prob", log_prob), ("ref_log_prob", ref)):
        _compare_verl(check, f"gradient w.r.t. {label}", _grad((ours * w).sum(), leaf),
                      _grad((theirs * w).sum(), leaf))
