"""Hook specifications of the algorithm: presets and the maths they are assembled from
(gathered, with the others, in :mod:`rft.hookspecs`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rft.contracts import AdvantageFn, EntropyLossFn, KLFn, PolicyLossFn
from rft.hooks.markers import hookspec

if TYPE_CHECKING:  # what the hooks' dicts hold (rft.plugin_kinds names the same types)
    from rft.algorithm import AlgorithmPreset
    from rft.buffer.replay import PriorityFn
    from rft.buffer.sampling import SampleStrategy

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
