"""The plugin contract of rft: every hook a plugin may implement.

A plugin is a module (or object) with functions decorated by ``rft.hookimpl`` whose names
are hooks below. It is found through the ``rft`` entry-point group of an installed
distribution, e.g. in the plugin's ``pyproject.toml``::

    [project.entry-points.rft]
    grpo = "rft_plugin_grpo"

Registration hooks
------------------
Every kind of thing that a YAML config selects *by name* has one ``register_*`` hook.
It takes no arguments and returns a ``dict`` mapping each name to its implementation.
All plugins' dicts are merged; a name registered by two plugins for the same kind is an
error that names both distributions.

An implementation may declare its arguments (the YAML ``*_args`` mapping that goes with
its name) as a dataclass in an attribute ``Args``::

    @dataclass
    class ClipArgs:
        clip_range: float = 0.2
        \"\"\"Symmetric clip range of the importance ratio.\"\"\"

    def clipped_ppo(...): ...
    clipped_ppo.Args = ClipArgs

Config validation checks ``*_args`` against ``Args`` (unknown key, wrong type) and fills
in its defaults; an implementation without ``Args`` accepts no arguments.

Hooks are grouped by the stage of a run that uses what they register.
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT_NAME = "rft"
"""Name of the pluggy project and of the entry-point group."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --------------------------------------------------------------------------------------
# Algorithm: presets and the maths they are assembled from
# --------------------------------------------------------------------------------------


@hookspec
def register_algorithms() -> dict[str, Any]:
    """Register algorithm presets, selected by ``algorithm.algorithm_type``.

    :return: ``{name: AlgorithmPreset}``. A preset names the default advantage fn,
        policy loss fn, KL loss fn, KL penalty fn, entropy loss fn, sample strategy and
        ``repeat_times`` of the algorithm, and its flags (uses a critic, uses a reference
        model, advantage computed in the explorer or the trainer, train-only). Values a
        user writes in ``algorithm`` always win over the preset's.

    Example::

        @hookimpl
        def register_algorithms():
            return {"grpo": AlgorithmPreset(advantage_fn="grpo", repeat_times=2, ...)}
    """


@hookspec
def register_advantage_fns() -> dict[str, Any]:
    """Register advantage functions, selected by ``algorithm.advantage_fn``.

    :return: ``{name: callable}``; the callable computes ``(advantages, returns)`` of
        shape ``(B, T)`` from token-level rewards, the response mask and the fields its
        algorithm needs (group ids, values, …). Its ``Args`` dataclass is filled from
        ``algorithm.advantage_fn_args``.

    Example::

        @hookimpl
        def register_advantage_fns():
            return {"grpo": grpo_advantages}
    """


@hookspec
def register_policy_loss_fns() -> dict[str, Any]:
    """Register policy loss functions, selected by ``algorithm.policy_loss_fn``.

    :return: ``{name: callable}``; the callable returns the per-token policy loss
        ``(B, T)`` (aggregated by the trainer) and a dict of metrics. Its ``Args``
        dataclass is filled from ``algorithm.policy_loss_fn_args``.

    Example::

        @hookimpl
        def register_policy_loss_fns():
            return {"ppo": clipped_surrogate_loss}
    """


@hookspec
def register_kl_fns() -> dict[str, Any]:
    """Register KL estimators, selected by ``algorithm.kl_loss_fn`` (KL as a loss term)
    and ``algorithm.kl_penalty_fn`` (KL subtracted from token-level rewards).

    :return: ``{name: callable}``; the callable maps per-token log-probabilities of the
        policy and the reference ``(B, T)`` to a per-token KL estimate ``(B, T)``. Its
        ``Args`` dataclass is filled from ``algorithm.kl_loss_fn_args`` or
        ``algorithm.kl_penalty_fn_args``.

    Example::

        @hookimpl
        def register_kl_fns():
            return {"k3": low_var_kl}
    """


@hookspec
def register_entropy_loss_fns() -> dict[str, Any]:
    """Register entropy loss functions, selected by ``algorithm.entropy_loss_fn``.

    :return: ``{name: callable}``; the callable maps per-token entropies ``(B, T)`` to
        the entropy term subtracted from the loss. Its ``Args`` dataclass is filled from
        ``algorithm.entropy_loss_fn_args``.

    Example::

        @hookimpl
        def register_entropy_loss_fns():
            return {"default": entropy_bonus}
    """


@hookspec
def register_sample_strategies() -> dict[str, Any]:
    """Register sample strategies, selected by ``algorithm.sample_strategy``.

    :return: ``{name: class}``; the class is built with the buffer config and its
        ``Args`` (from ``algorithm.sample_strategy_args``) and hands the trainer one batch
        of experiences per step.

    Example::

        @hookimpl
        def register_sample_strategies():
            return {"default": DefaultSampleStrategy}
    """


# --------------------------------------------------------------------------------------
# Exploration: tasks, workflows, rewards, engines
# --------------------------------------------------------------------------------------


@hookspec
def register_workflows() -> dict[str, Any]:
    """Register workflows, selected by ``default_workflow_type`` (explorer input or taskset).

    :return: ``{name: class}``; the class is built per task with the task and a model
        wrapper, and its ``run()`` returns a list of experiences. Its ``Args`` dataclass is
        filled from the taskset's ``workflow_args``.

    Example::

        @hookimpl
        def register_workflows():
            return {"math_workflow": MathWorkflow}
    """


@hookspec
def register_reward_fns() -> dict[str, Any]:
    """Register reward functions, selected by ``default_reward_fn_type``.

    :return: ``{name: callable or class}``; it scores a response against a task and
        returns a dict of named float rewards whose sum is the reward. Its ``Args``
        dataclass is filled from the taskset's ``reward_fn_args``.

    Example::

        @hookimpl
        def register_reward_fns():
            return {"gsm8k_reward": gsm8k_reward}
    """


@hookspec
def register_task_selectors() -> dict[str, Any]:
    """Register task selectors, selected by a taskset's ``task_selector.selector_type``.

    :return: ``{name: class}``; the class decides which task indices of a taskset form
        the next batch (sequential, shuffled, by difficulty, …).

    Example::

        @hookimpl
        def register_task_selectors():
            return {"shuffle": ShuffleSelector}
    """


@hookspec
def register_experience_operators() -> dict[str, Any]:
    """Register experience operators, selected by
    ``data_processor.experience_pipeline.operators[i].name``.

    :return: ``{name: class}``; the class transforms a list of experiences between the
        explorer and the buffer (filter, reward shaping, explorer-side advantage). Its
        ``Args`` dataclass is filled from the operator's ``args``.

    Example::

        @hookimpl
        def register_experience_operators():
            return {"reward_filter": RewardFilter}
    """


@hookspec
def register_engines() -> dict[str, Any]:
    """Register inference engines, selected by ``explorer.rollout_model.engine_type``.

    :return: ``{name: class}``; the class generates responses (with per-token
        log-probabilities) and accepts weight updates (``update_weights``). An engine whose
        model lives in processes of its own may also implement
        :class:`rft.distributed.weight_broadcast.JoinsWeightGroup`, so that with
        ``sync_method: nccl`` those processes receive the trainer's broadcast themselves.

    Example::

        @hookimpl
        def register_engines():
            return {"hf": HFEngine}
    """


@hookspec
def register_tool_call_parsers() -> dict[str, Any]:
    """Register tool-call parsers of the OpenAI endpoint, selected by
    ``explorer.rollout_model.tool_call_parser`` (and an auxiliary model's).

    :return: ``{name: callable}``; the callable takes a reply's text and returns
        ``(content, calls)``: the text left as the message's ``content`` and a list of
        :class:`rft.explorer.reply_parsing.FunctionCall` (empty when the reply calls no
        tool). The endpoint returns the calls as ``message.tool_calls``.

    Example::

        @hookimpl
        def register_tool_call_parsers():
            return {"hermes": hermes_tool_calls}
    """


@hookspec
def register_reasoning_parsers() -> dict[str, Any]:
    """Register reasoning parsers of the OpenAI endpoint, selected by
    ``explorer.rollout_model.reasoning_parser`` (and an auxiliary model's).

    :return: ``{name: callable}``; the callable takes a reply's text and returns
        ``(reasoning, content)``: the reasoning (``None`` when the reply has none),
        returned as ``message.reasoning_content``, and the rest.

    Example::

        @hookimpl
        def register_reasoning_parsers():
            return {"qwen3": qwen3_reasoning}
    """


# --------------------------------------------------------------------------------------
# Training and observation
# --------------------------------------------------------------------------------------


@hookspec
def register_trainers() -> dict[str, Any]:
    """Register trainer backends, selected by ``trainer.trainer_type``.

    :return: ``{name: class}``; the class owns the actor (and reference / critic models)
        and performs one optimisation step per batch of experiences.

    Example::

        @hookimpl
        def register_trainers():
            return {"torch": TorchTrainer}
    """


@hookspec
def register_monitors() -> dict[str, Any]:
    """Register metric monitors, selected by ``monitor.monitor_type``.

    :return: ``{name: class}``; the class receives ``{metric_name: float}`` per step and
        writes it somewhere (console, jsonl, tensorboard, wandb, mlflow). Its ``Args``
        dataclass is filled from ``monitor.monitor_args``.

    Example::

        @hookimpl
        def register_monitors():
            return {"tensorboard": TensorboardMonitor}
    """
