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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

# The calling contracts of the loss-path hooks, re-exported for plugin authors.
from rft.contracts import AdvantageFn as AdvantageFn
from rft.contracts import AdvantageInputs as AdvantageInputs
from rft.contracts import AggContext as AggContext
from rft.contracts import EntropyInputs as EntropyInputs
from rft.contracts import EntropyLossFn as EntropyLossFn
from rft.contracts import KLFn as KLFn
from rft.contracts import KLInputs as KLInputs
from rft.contracts import PolicyLossFn as PolicyLossFn
from rft.contracts import PolicyLossInputs as PolicyLossInputs
from rft.contracts import needs_ref_log_prob as needs_ref_log_prob

if TYPE_CHECKING:  # what the other hooks' dicts hold (rft.plugin_kinds names the same types)
    from rft.algorithm import AlgorithmPreset
    from rft.buffer.operators import ExperienceOperator
    from rft.buffer.replay import PriorityFn
    from rft.buffer.sampling import SampleStrategy
    from rft.buffer.selector import TaskSelector
    from rft.data.task_operator import TaskOperator
    from rft.engines.engine import InferenceEngine
    from rft.engines.reply_parsing import FunctionCall
    from rft.environment import ActionParser, Environment
    from rft.monitor.base import Monitor
    from rft.services import RunService
    from rft.trainer.base import Trainer
    from rft.workflow import Workflow

PROJECT_NAME = "rft"
"""Name of the pluggy project and of the entry-point group."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --------------------------------------------------------------------------------------
# Algorithm: presets and the maths they are assembled from
# --------------------------------------------------------------------------------------


@hookspec
def register_algorithms() -> dict[str, AlgorithmPreset]:
    """Register algorithm presets, selected by ``algorithm.algorithm_type``.

    :return: ``{name: AlgorithmPreset}``. A preset names the default advantage fn,
        policy loss fn, KL loss fn, KL penalty fn, entropy loss fn, sample strategy and
        ``repeat_times`` of the algorithm, and its flags (uses a critic, uses a reference
        model, advantage computed in the explorer or the trainer, train-only). Values a
        user writes in ``algorithm`` always win over the preset's. Its ``batch_layout``
        (:class:`rft.algorithm.BatchLayout`) arranges each training batch and names how
        many consecutive rows form a unit the trainer keeps whole (DPO: a chosen and a
        rejected row); the default keeps every row on its own.

    Example::

        @hookimpl
        def register_algorithms():
            return {"grpo": AlgorithmPreset(advantage_fn="grpo", repeat_times=2, ...)}
    """


@hookspec
def register_advantage_fns() -> dict[str, AdvantageFn[Any]]:
    """Register advantage functions, selected by ``algorithm.advantage_fn``.

    :return: ``{name: fn}``, each ``fn`` an :class:`~rft.contracts.AdvantageFn`:
        ``fn(inputs: AdvantageInputs, args) -> (advantages, returns)``, both ``(B, T)``,
        computed without gradient. ``inputs`` holds ``token_level_rewards`` ``(B, T)``,
        ``response_mask`` ``(B, T)``, ``index`` (``B`` group ids) and, when the run
        provides them, ``values`` ``(B, T)`` (critic), ``reward_baselines`` ``(B,)``,
        ``rollout_log_prob`` ``(B, T)`` (the engine's sampling log-probs) and
        ``teacher_log_prob`` ``(B, T)`` (``Experience.teacher_logprobs``, which a
        distillation workflow sets); a
        function that needs one takes it with ``inputs.require("values", "<name>")``,
        which fails with a one-line error saying what provides it. ``args`` is the built
        instance of ``fn.Args`` (from ``algorithm.advantage_fn_args``, defaults filled in),
        ``None`` for a function without ``Args``. Shape letters: :mod:`rft.contracts`.

    Example::

        def outcome_advantages(inputs: AdvantageInputs, args: None):
            scores = inputs.token_level_rewards.sum(-1, keepdim=True)  # (B, 1)
            advantages = scores * inputs.response_mask  # (B, T)
            return advantages, advantages

        @hookimpl
        def register_advantage_fns():
            return {"outcome": outcome_advantages}
    """


@hookspec
def register_policy_loss_fns() -> dict[str, PolicyLossFn[Any]]:
    """Register policy loss functions, selected by ``algorithm.policy_loss_fn``.

    :return: ``{name: fn}``, each ``fn`` a :class:`~rft.contracts.PolicyLossFn`:
        ``fn(inputs: PolicyLossInputs, args) -> (pg_loss, metrics)``, called once per
        micro-batch. ``inputs`` holds ``log_prob`` (current policy, with gradient),
        ``old_log_prob``, ``advantages``, ``response_mask`` (all ``(B, T)``), ``agg`` (the
        trainer's :class:`~rft.contracts.AggContext`: ``loss_agg_mode`` and the
        mini-batch's global counts), ``ref_log_prob`` ``(B, T)`` or ``None``,
        ``is_expert_mask`` ``(B,)`` or ``None``, ``teacher_log_prob`` ``(B, T)`` or ``None``
        (``Experience.teacher_logprobs``) and ``global_step`` (the training step being
        taken, from 1; for schedules such as CHORD's ``μ``); an optional input is taken
        with ``inputs.require("teacher_log_prob", "<name>")``, which fails with a one-line
        error saying what provides it. ``pg_loss`` is per token ``(B, T)`` (the
        trainer aggregates it with ``inputs.agg``) or 0-dim (already aggregated: use
        ``inputs.agg``'s counts, e.g. ``inputs.agg(x, inputs.response_mask)``, so that
        micro-batches add up). ``metrics`` maps names to 0-dim tensors or floats, reported
        as ``actor/<name>``. ``args`` is the built instance of ``fn.Args`` (from
        ``algorithm.policy_loss_fn_args``, defaults filled in; defaults live only there),
        ``None`` for a function without ``Args``. A loss that reads ``inputs.ref_log_prob``
        declares ``fn.needs_ref_log_prob = True`` (:func:`rft.contracts.needs_ref_log_prob`):
        the trainer then holds and runs the reference model (otherwise it does so only for
        a KL term with a non-zero ``kl_coef``; see ``LossPlan.needs_ref``).

    A config selects the example below with ``policy_loss_fn: clipped_pg`` and
    ``policy_loss_fn_args: {clip_range: 0.1}``.

    Example::

        from dataclasses import dataclass

        import torch

        from rft import PolicyLossInputs, hookimpl
        from rft.ops import masked_mean

        @dataclass
        class ClippedPGArgs:
            clip_range: float = 0.2
            \"\"\"Symmetric clip range of the importance ratio.\"\"\"

        def clipped_pg(inputs: PolicyLossInputs, args: ClippedPGArgs):
            ratio = torch.exp(inputs.log_prob - inputs.old_log_prob)  # (B, T)
            clipped = ratio.clamp(1 - args.clip_range, 1 + args.clip_range)  # (B, T)
            pg_loss = torch.maximum(-inputs.advantages * ratio,
                                    -inputs.advantages * clipped)  # (B, T)
            with torch.no_grad():
                clipfrac = masked_mean((clipped != ratio).float(), inputs.response_mask)
            return pg_loss, {"pg_clipfrac": clipfrac}

        clipped_pg.Args = ClippedPGArgs

        @hookimpl
        def register_policy_loss_fns():
            return {"clipped_pg": clipped_pg}
    """


@hookspec
def register_kl_fns() -> dict[str, KLFn[Any]]:
    """Register KL estimators, selected by ``algorithm.kl_loss_fn`` (KL as a loss term)
    and ``algorithm.kl_penalty_fn`` (KL subtracted from token-level rewards).

    :return: ``{name: fn}``, each ``fn`` a :class:`~rft.contracts.KLFn`:
        ``fn(inputs: KLInputs, args) -> kl``, a per-token estimate ``(B, T)`` of
        ``KL(π ‖ π_ref)`` from ``inputs.log_prob`` (the policy's; with gradient as a loss,
        ``old_log_prob`` as a reward penalty) and ``inputs.ref_log_prob``, both ``(B, T)``.
        ``args`` is the built instance of ``fn.Args`` (from ``algorithm.kl_loss_fn_args``
        or ``algorithm.kl_penalty_fn_args``); the trainer multiplies the KL by its
        ``kl_coef`` field (the core's ``rft.builtin.kl.KLArgs``).

    Example::

        def squared_log_ratio(inputs: KLInputs, args: KLArgs):
            return 0.5 * (inputs.log_prob - inputs.ref_log_prob).square()  # (B, T)

        squared_log_ratio.Args = KLArgs

        @hookimpl
        def register_kl_fns():
            return {"squared": squared_log_ratio}
    """


@hookspec
def register_entropy_loss_fns() -> dict[str, EntropyLossFn[Any]]:
    """Register entropy loss functions, selected by ``algorithm.entropy_loss_fn``.

    :return: ``{name: fn}``, each ``fn`` an :class:`~rft.contracts.EntropyLossFn`:
        ``fn(inputs: EntropyInputs, args) -> term``, 0-dim, subtracted from the loss.
        ``inputs`` holds ``entropy`` and ``response_mask`` ``(B, T)`` and ``agg``, the
        trainer's aggregation with the mini-batch's counts. ``args`` is the built instance
        of ``fn.Args`` (from ``algorithm.entropy_loss_fn_args``); an ``Args`` field
        ``entropy_coef`` equal to 0 lets the trainer skip the entropy's gradient.

    Example::

        @dataclass
        class BonusArgs:
            entropy_coef: float = 0.001
            \"\"\"Weight of the entropy bonus.\"\"\"

        def entropy_bonus(inputs: EntropyInputs, args: BonusArgs):
            return args.entropy_coef * inputs.agg(inputs.entropy, inputs.response_mask)

        entropy_bonus.Args = BonusArgs

        @hookimpl
        def register_entropy_loss_fns():
            return {"bonus": entropy_bonus}
    """


@hookspec
def register_sample_strategies() -> dict[str, type[SampleStrategy]]:
    """Register sample strategies, selected by ``algorithm.sample_strategy``.

    :return: ``{name: class}``; the class is built with the trainer's buffers
        (:class:`rft.buffer.sampling.TrainerBuffers`: the experience buffer, and
        ``buffer.trainer_input.auxiliary_buffers`` opened by name), the batch size, the
        read timeout and its ``Args`` (from ``algorithm.sample_strategy_args``), and hands
        the trainer one batch of experiences per step.

    Example::

        @hookimpl
        def register_sample_strategies():
            return {"default": DefaultSampleStrategy}
    """


@hookspec
def register_priority_fns() -> dict[str, PriorityFn]:
    """Register replay-buffer priority functions, selected by
    ``buffer.trainer_input.experience_buffer.replay_buffer.priority_fn``.

    :return: ``{name: callable}``; the callable follows
        :class:`rft.buffer.replay.PriorityFn`: ``fn(item, args, rng) -> float`` scores a
        :class:`rft.buffer.replay.ReplayItem` (its experience, ``use_count``,
        ``last_used``); the replay buffer reads the highest scores first. ``args`` is the
        built instance of the function's ``Args`` dataclass (from ``priority_fn_args``),
        ``rng`` a seeded ``random.Random``. An ``Args`` field ``use_count_limit`` removes
        experiences read that many times.

    Example::

        @hookimpl
        def register_priority_fns():
            return {"linear_decay": linear_decay}
    """


# --------------------------------------------------------------------------------------
# Exploration: tasks, workflows, rewards, engines
# --------------------------------------------------------------------------------------


@hookspec
def register_workflows() -> dict[str, type[Workflow]]:
    """Register workflows, selected by ``default_workflow_type`` (explorer input or taskset).

    :return: ``{name: class}``; the class is built per task with the task and a model
        wrapper, and its ``run()`` returns a list of experiences. Its ``Args`` dataclass is
        filled from the taskset's ``workflow_args``. The explorer numbers each
        experience's ``eid.batch`` / ``eid.task`` / ``eid.run`` and keeps what the workflow
        set in ``eid.step`` (the step of a multi-step episode) and ``eid.suffix``; a
        distillation workflow stores a teacher's log-probs in ``teacher_logprobs`` ``(R,)``
        (the trainer's ``teacher_log_prob``). A task's tools (``format.tools_key``,
        ``Task.tools``) are offered in the prompts of ``self.model.chat`` calls that pass
        no ``tools=`` of their own. A class with ``default_reward_fn = "<name>"`` scores
        with that registered reward function when its taskset names none (validation
        selects it and says so; ``math_workflow``: ``math_reward``).

    Example::

        @hookimpl
        def register_workflows():
            return {"math_workflow": MathWorkflow}
    """


@hookspec
def register_environments() -> dict[str, type[Environment]]:
    """Register text environments (:class:`rft.environment.Environment`), selected by a
    taskset's ``environment`` and played by ``environment_workflow``.

    :return: ``{name: class}``; the class is built with an instance of its ``Args``
        dataclass filled from the taskset's ``environment_args``; ``reset(task, seed)``
        starts an episode and returns ``(observation, info)``, ``step(action)`` returns a
        :class:`rft.environment.StepResult`, ``close()`` releases it (idempotent).

    Example::

        @hookimpl
        def register_environments():
            return {"textworld": TextWorldEnvironment}
    """


@hookspec
def register_action_parsers() -> dict[str, ActionParser]:
    """Register action parsers: what turns a model's reply into the action an environment
    steps with, selected by ``environment_workflow``'s ``workflow_args.action_parser``
    (default: the environment's ``default_action_parser``).

    :return: ``{name: callable}``; the callable takes the reply's text and returns the
        action (a string), or ``None`` when the reply holds no valid action (the
        environment is then not stepped and the agent is told so). Built in: ``raw``,
        ``last_code_block``, ``action_tag``, ``last_line``.

    Example::

        @hookimpl
        def register_action_parsers():
            return {"json_action": lambda reply: json.loads(reply).get("action")}
    """


@hookspec
def register_reward_fns() -> dict[str, Callable[..., Any]]:
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
def register_task_selectors() -> dict[str, type[TaskSelector]]:
    """Register task selectors, selected by a taskset's ``task_selector.selector_type``.

    :return: ``{name: class}``; the class decides which task indices of a taskset form
        the next batch (sequential, shuffled, by difficulty, …).

    Example::

        @hookimpl
        def register_task_selectors():
            return {"shuffle": ShuffleSelector}
    """


@hookspec
def register_experience_operators() -> dict[str, type[ExperienceOperator]]:
    """Register experience operators, selected by
    ``data_processor.experience_pipeline.operators[i].name``.

    :return: ``{name: class}``; the class transforms a list of experiences between the
        explorer and the buffer (filter, reward shaping, explorer-side advantage). Its
        ``Args`` dataclass is filled from the operator's ``args``; its ``needs_services``
        (e.g. ``("data_juicer",)``) names the ``service`` sections it works through, which
        validation then requires.

    Example::

        @hookimpl
        def register_experience_operators():
            return {"reward_filter": RewardFilter}
    """


@hookspec
def register_task_operators() -> dict[str, type[TaskOperator]]:
    """Register task operators, selected by
    ``data_processor.task_pipeline.operators[i].name``.

    :return: ``{name: class}``; the class (a :class:`rft.data.task_operator.TaskOperator`)
        filters, changes or scores the taskset's rows before exploring
        (``process(rows) -> rows``). Its ``Args`` dataclass is filled from the operator's
        ``args``; its ``version`` is part of the pipeline's cache key; ``row_wise = False``
        keeps all rows in one call (no split over ``num_process`` workers).

    Example::

        class LengthFilter(TaskOperator):
            Args = LengthArgs

            def process(self, rows):
                return [r for r in rows if len(r[self.args.key]) <= self.args.max_len]

        @hookimpl
        def register_task_operators():
            return {"length_filter": LengthFilter}
    """


@hookspec
def register_services() -> dict[str, type[RunService]]:
    """Register run services, selected by the section set in ``service``: the service
    registered as ``data_juicer`` runs when ``service.data_juicer`` is set.

    :return: ``{section name: class}``; the class (a :class:`rft.services.RunService`) is
        built with the section's dataclass and the job dir; the launcher calls ``start()``
        (returns environment variables the run reaches the service through) before a
        stage runs and ``close()`` after it, however it ends.

    Example::

        class DataJuicerService(RunService):
            def start(self):
                ...  # start the server, wait until it answers
                return {"RFT_DATA_JUICER_URL": self.url}

            def close(self):
                ...  # stop it and its process group

        @hookimpl
        def register_services():
            return {"data_juicer": DataJuicerService}
    """


@hookspec
def register_engines() -> dict[str, type[InferenceEngine]]:
    """Register inference engines, selected by ``explorer.rollout_model.engine_type``.

    :return: ``{name: class}``; the class generates responses (with per-token
        log-probabilities) and accepts weight updates (``update_weights``). An engine whose
        model lives in processes of its own may also implement
        :class:`rft.distributed.weight_broadcast.JoinsWeightGroup`, so that with
        ``sync_method: nccl`` those processes receive the trainer's broadcast themselves.
        One that can release its device memory while a colocated trainer steps implements
        :class:`rft.engines.engine_sleep.SleepMode` (``sleep_mode``, ``sleep``,
        ``wake_up``; vLLM's sleep mode). A class with ``remote = True`` serves a model on
        a server elsewhere (the built-in ``external``): chat only, no weights, never the
        policy being trained (validation reads the flag). A class with an ``Args``
        dataclass gets ``extra_engine_args`` checked against it at validation. One with
        ``serves_lora = True`` implements ``update_adapter(adapter, version)`` and serves
        ``model.lora_configs`` adapters (:class:`rft.adapter.AdapterWeights`); validation
        refuses LoRA with any other. ``required_modules`` (with ``install_hint``) name the
        Python packages it imports when it starts: validation refuses the engine where one
        is missing. ``engine_options`` name the vLLM-style ``InferenceModelConfig`` fields
        it reads; one set for an engine that does not read it is a warning.

    Example::

        @hookimpl
        def register_engines():
            return {"hf": HFEngine}
    """


@hookspec
def register_tool_call_parsers() -> dict[str, Callable[[str], tuple[str, list[FunctionCall]]]]:
    """Register tool-call parsers of the OpenAI endpoint, selected by
    ``explorer.rollout_model.tool_call_parser`` (and an auxiliary model's).

    :return: ``{name: callable}``; the callable takes a reply's text and returns
        ``(content, calls)``: the text left as the message's ``content`` and a list of
        :class:`rft.engines.reply_parsing.FunctionCall` (empty when the reply calls no
        tool). The endpoint returns the calls as ``message.tool_calls``.

    Example::

        @hookimpl
        def register_tool_call_parsers():
            return {"hermes": hermes_tool_calls}
    """


@hookspec
def register_reasoning_parsers() -> dict[str, Callable[[str], tuple[str | None, str]]]:
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
def register_trainers() -> dict[str, type[Trainer]]:
    """Register trainer backends, selected by ``trainer.trainer_type``.

    :return: ``{name: class}``; a :class:`rft.trainer.base.Trainer` subclass built as
        ``cls(plan)`` from a :class:`rft.config.plan.TrainerPlan` (the ``model``,
        ``algorithm`` and ``trainer`` sections, the preset, the resolved loss functions,
        batch size and step count). It owns the actor (and reference / critic models) and
        performs one optimisation step per batch of experiences. Its classmethod
        ``check_config(config)`` reports, at validation, what it cannot run (a missing
        dependency, a ``trainer.trainer_config`` key it does not know), e.g. the ``verl``
        trainer of ``rft-plugin-verl``. One with ``supports_lora = True`` trains
        ``model.lora_configs`` adapters and returns them from ``adapter_weights()`` (what
        a weight sync then moves); validation refuses LoRA with any other.

    Example::

        @hookimpl
        def register_trainers():
            return {"torch": TorchTrainer}
    """


@hookspec
def register_monitors() -> dict[str, type[Monitor]]:
    """Register metric monitors, selected by ``monitor.monitor_type``.

    :return: ``{name: class}``; the class (a :class:`rft.monitor.base.Monitor`) receives
        ``{metric_name: float}`` per step and writes it somewhere (console, jsonl,
        tensorboard, wandb, mlflow), and may show small tables (``log_table``: the rollout
        preview of ``trainer.enable_preview``). Its ``Args`` dataclass is filled from
        ``monitor.monitor_args``.

    Example::

        @hookimpl
        def register_monitors():
            return {"tensorboard": TensorboardMonitor}
    """


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------

from rft.commands import Command  # noqa: E402  (a light module; this section's return type)


@hookspec
def register_commands() -> dict[str, Command]:
    """Register subcommands of the ``rft`` command, selected by ``rft NAME ...``.

    :return: ``{name: Command}``; each :class:`rft.commands.Command` gives the one-line
        ``help`` that ``rft --help`` shows, ``add_arguments(parser)`` that fills the
        command's subparser, and ``run(args) -> int`` that runs it and returns the exit
        status. ``rft`` adds plugin commands after its built-in ones; a name that is a
        built-in command (``run``, ``validate``, ``plugins``, ``tiny-model``) is a one-line
        error naming the plugin's distribution. ``run`` reports a user error by raising
        :class:`rft.errors.RftError`, printed as one line (``rft: <problem>``, exit 2).
        The plugin module is imported on every ``rft`` start, ``rft --help`` included:
        import heavy modules inside ``run``, not at module level.

    Example::

        @hookimpl
        def register_commands():
            return {"convert-verl": Command(help="convert a veRL launch into an rft config",
                                            add_arguments=add_arguments, run=run)}
    """


# --------------------------------------------------------------------------------------
# End of a run
# --------------------------------------------------------------------------------------

from rft.run_artifacts import RunArtifact  # noqa: E402  (a light module; the return type)


@hookspec
def register_run_artifacts() -> dict[str, RunArtifact]:
    """Register files written into each stage's job dir when ``rft run`` ends.

    :return: ``{name: RunArtifact}``; the launcher calls ``artifact.write(job_dir)`` for
        every stage once all stages ran, and the end-of-run summary names each file
        written (``[<stage>] <name>: <path>`` on the console, ``artifacts`` in
        ``summary.json``). ``write`` returns the path, or ``None`` when it has nothing to
        write; an :class:`rft.errors.RftError` it raises is reported as one warning line
        and the run still succeeds. Nothing registered: nothing written, the summary
        unchanged.

    Example::

        @hookimpl
        def register_run_artifacts():
            return {"curves": RunArtifact(write=lambda job_dir: draw_curves(job_dir))}
    """
