"""Hook specifications of training and observation, the command line and the end of a
run (gathered, with the others, in :mod:`rft.hookspecs`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rft.hooks.markers import hookspec

if TYPE_CHECKING:  # what the hooks' dicts hold (rft.plugin_kinds names the same types)
    from rft.monitor.base import Monitor
    from rft.trainer.base import Trainer

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
