"""rft-plugin-studio: ``rft studio`` (a web app on 127.0.0.1: config generator, runs
dashboard, rollout viewer), ``rft plot`` and the end-of-run ``curves.png``. Registered
through ``register_commands`` and ``register_run_artifacts``; importing this module stays
light (the web stack and matplotlib are imported when a command runs)."""

from __future__ import annotations

from rft import hookimpl
from rft.commands import Command
from rft.run_artifacts import RunArtifact
from rft_plugin_studio import cli, plot_command


@hookimpl
def register_commands() -> dict[str, Command]:
    """``studio``: serve the studio web app; ``plot``: a run's curves as a PNG."""
    return {"studio": Command(help="serve rft studio (config generator, runs, rollouts) on "
                                   "127.0.0.1", add_arguments=cli.add_arguments, run=cli.run),
            "plot": Command(help="draw a run's metric curves to a PNG (rft plot RUN -o "
                                 "FILE.png)", add_arguments=plot_command.add_arguments,
                            run=plot_command.run)}


@hookimpl
def register_run_artifacts() -> dict[str, RunArtifact]:
    """``curves``: ``<job dir>/monitor/curves.png`` when a run ends."""
    return {"curves": RunArtifact(write=plot_command.write_curves)}
