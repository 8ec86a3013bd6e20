"""rft-plugin-studio: ``rft studio`` (a web app on 127.0.0.1: config generator, runs
dashboard, rollout viewer) and ``rft plot``. Registered through ``register_commands``;
importing this module stays light (the web stack is imported when a command runs)."""

from __future__ import annotations

from rft import hookimpl
from rft.commands import Command
from rft_plugin_studio import cli


@hookimpl
def register_commands() -> dict[str, Command]:
    """``studio``: serve the studio web app."""
    return {"studio": Command(help="serve rft studio (config generator, runs, rollouts) on "
                                   "127.0.0.1", add_arguments=cli.add_arguments, run=cli.run)}
