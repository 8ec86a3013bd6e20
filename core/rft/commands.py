"""Subcommands of ``rft`` contributed by plugins (the ``register_commands`` hook).

A plugin returns ``{name: Command(...)}``; ``rft`` adds one subparser per name after its
built-in commands, so ``rft --help`` lists it and ``rft NAME ...`` runs it::

    from rft import hookimpl
    from rft.commands import Command

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("input")

    def run(args: argparse.Namespace) -> int:
        print(args.input)
        return 0

    @hookimpl
    def register_commands():
        return {"echo": Command(help="print INPUT", add_arguments=add_arguments, run=run)}

This module is imported on every ``rft`` start: it must stay free of heavy imports.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One ``rft`` subcommand provided by a plugin."""

    help: str
    """One line shown next to the command's name by ``rft --help`` (and used as the
    description of ``rft NAME --help``)."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    """Adds the command's arguments to its subparser. ``--debug`` (show tracebacks) is
    already there; the subparser's ``handler`` default is set by ``rft`` to :attr:`run`."""

    run: Callable[[argparse.Namespace], int]
    """Runs the command with the parsed arguments and returns the exit status. A user
    error is raised as :class:`rft.errors.RftError`: ``rft`` prints its one-line message
    (``rft: <problem>``) and exits with status 2, as for the built-in commands."""
