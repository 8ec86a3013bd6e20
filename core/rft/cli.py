"""The ``rft`` command.

    rft plugins [--json]                    list loaded plugins and the names they register
    rft validate CONFIG [key=value ...]     print the resolved config, or every problem
    rft run CONFIG [key=value ...]          validate, then run through the launcher
    rft tiny-model DIR                      build a tiny random Qwen2 model offline
    rft tiny-model --vision DIR             … a tiny Qwen2-VL model and its processor
    rft NAME ...                            a command contributed by a plugin
                                            (``register_commands``, e.g. ``convert-verl``)

A user error prints one line per problem (``rft: <problem>``) and exits with status 2;
``--debug`` adds the traceback. Plugin commands are added after the built-in ones; a
plugin command that clashes with a built-in one, or a plugin that fails to load, is such
an error.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from rft.commands import Command
from rft.errors import ConfigError, PluginError, RftError
from rft.plugins import PluginRegistry, core_compatibility_warnings, plugin_catalog

EXIT_USAGE = 2
"""Exit status for invalid configs, unknown plugins and other user errors."""


def _print_problems(error: RftError) -> None:
    lines = error.problems if isinstance(error, ConfigError) else str(error).splitlines()
    for line in lines or [type(error).__name__]:
        print(f"rft: {line}", file=sys.stderr)


def cmd_plugins(args: argparse.Namespace) -> int:
    """The plugin table (or ``--json``); a plugin whose distribution was built for another
    core ends its row with ``[incompatible: needs rft-framework…]``."""
    infos = PluginRegistry.create().plugins()
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=2))
        return 0
    header = ("plugin", "distribution", "version", "registers")
    rows = [(i.name, i.distribution, i.version,
             ("; ".join(f"{kind}: {', '.join(names)}" for kind, names in i.registers.items())
              or "-") + ("" if i.compatible else f"  [incompatible: {i.problem}]"))
            for i in infos]
    widths = [max(len(r[col]) for r in [header, *rows]) for col in range(3)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(widths[n]) for n, cell in enumerate(row[:3])) + "  " + row[3])
    return 0


def _warn_about_plugin_versions() -> None:
    """One ``rft: warning:`` line per plugin distribution built for another core."""
    for warning in core_compatibility_warnings():
        print(f"rft: warning: {warning}", file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    import dataclasses

    import yaml

    from rft.config import load_config
    from rft.modes.preflight import data_problems, model_file_problems

    _warn_about_plugin_versions()
    loaded = load_config(args.config, args.overrides)
    for warning in loaded.warnings:
        print(f"rft: warning: {warning}", file=sys.stderr)
    # the first rows of every data file: a bad byte, malformed JSON or an empty file is
    # reported now, with its file and line, not when the run reaches it
    # and the files of every local model folder (config, tokenizer, weights' headers)
    problems = list(dict.fromkeys(problem for stage in loaded.stages
                                  for problem in (*model_file_problems(stage.plan),
                                                  *data_problems(stage.plan))))
    if problems:
        _print_problems(ConfigError(problems))
        return EXIT_USAGE
    for stage in loaded.stages:
        if stage.name is not None:
            print(f"# stage: {stage.name}")
        print(yaml.safe_dump(dataclasses.asdict(stage.config), sort_keys=False), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rft.config import load_config
    from rft.launcher import run

    _warn_about_plugin_versions()
    loaded = load_config(args.config, args.overrides)
    for warning in loaded.warnings:
        print(f"rft: warning: {warning}", file=sys.stderr)
    return run(loaded)


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from rft.testing.tiny_model import build_tiny_model

    if args.vision:
        from rft.testing.tiny_vision_model import build_tiny_vision_model

        print(build_tiny_vision_model(args.directory, vocab_size=args.vocab_size,
                                      hidden_size=args.hidden_size, num_layers=args.layers,
                                      num_heads=args.num_heads,
                                      num_kv_heads=args.num_kv_heads, seed=args.seed))
        return 0
    path = build_tiny_model(args.directory, vocab_size=args.vocab_size,
                            hidden_size=args.hidden_size, num_layers=args.layers,
                            num_heads=args.num_heads, num_kv_heads=args.num_kv_heads,
                            seed=args.seed)
    print(path)
    return 0


def cmd_new_plugin(args: argparse.Namespace) -> int:
    import rft
    from rft.scaffold import next_line, scaffold

    root = scaffold(args.kind, args.name, args.dir, rft.__version__)
    print(root, flush=True)
    sys.stderr.write(next_line(root))
    sys.stderr.flush()
    return 0


def build_parser(registry: PluginRegistry | None = None) -> argparse.ArgumentParser:
    """The ``rft`` parser: the built-in commands, then the commands of ``registry``'s
    plugins (none when ``registry`` is ``None``).

    :raises PluginError: a plugin command is invalid or clashes with a built-in command.
    """
    parser = argparse.ArgumentParser(prog="rft", description="Reinforcement fine-tuning.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plugins = commands.add_parser("plugins", help="list plugins and the names they register")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    plugins.set_defaults(handler=cmd_plugins)

    tiny = commands.add_parser("tiny-model", help="build a tiny random Qwen2 model and "
                               "tokenizer offline (for tests and the CPU quickstart)")
    tiny.add_argument("directory", help="output folder")
    tiny.add_argument("--vocab-size", type=int, default=1024)
    tiny.add_argument("--hidden-size", type=int, default=64)
    tiny.add_argument("--layers", type=int, default=2)
    tiny.add_argument("--num-heads", type=int, default=4,
                      help="attention heads (vLLM's CPU attention needs a head size of 32 "
                      "or more: hidden size / heads)")
    tiny.add_argument("--num-kv-heads", type=int, default=2)
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--vision", action="store_true",
                      help="a tiny vision-language model (Qwen2-VL: 2-block vision tower, "
                      "4-px patches) with its processor, docs/multimodal.md")
    tiny.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    tiny.set_defaults(handler=cmd_tiny_model)

    new = commands.add_parser("new-plugin", help="write a plugin distribution that passes "
                              "its own tests (KIND: policy_loss, advantage, reward, workflow)")
    new.add_argument("kind", metavar="KIND", help="policy_loss, advantage, reward or workflow")
    new.add_argument("name", metavar="NAME", help="the name a config selects it by, e.g. "
                     "my_loss")
    new.add_argument("--dir", default=".", help="where to create rft-plugin-NAME/ "
                     "(default: here)")
    new.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    new.set_defaults(handler=cmd_new_plugin)

    for name, handler, text in (
        ("validate", cmd_validate, "check a config; print it resolved, or its problems"),
        ("run", cmd_run, "run an experiment from a config"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("config", help="YAML config file")
        sub.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                         help="dot-list overrides, e.g. buffer.batch_size=8")
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help="show tracebacks on errors")
        sub.set_defaults(handler=handler)
    if registry is not None:
        add_plugin_commands(commands, registry)
    return parser


def add_plugin_commands(commands: argparse._SubParsersAction, registry: PluginRegistry
                        ) -> None:
    """Add one subparser per command registered by a plugin, in name order, after the
    built-in commands already in ``commands``.

    :raises PluginError: naming the plugin and its distribution, when a name is already a
        built-in command, is not a :class:`~rft.commands.Command`, or its
        ``add_arguments`` fails.
    """
    builtin = set(commands.choices)
    for name in registry.names("command"):
        registration = registry.registration("command", name)
        command = registration.implementation
        where = f"plugin {registration.plugin!r} (distribution {registration.distribution})"
        if name in builtin:
            raise PluginError(f"{where}: command {name!r} clashes with the built-in command "
                              f"'rft {name}'")
        if not isinstance(command, Command):
            raise PluginError(f"{where}: register_commands() must map {name!r} to an "
                              f"rft.commands.Command, got {type(command).__name__}")
        sub = commands.add_parser(name, help=command.help, description=command.help)
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help="show tracebacks on errors")
        try:
            command.add_arguments(sub)
        except Exception as exc:  # a broken plugin must name itself
            raise PluginError(f"{where}: command {name!r}: add_arguments() raised "
                              f"{type(exc).__name__}: {exc}") from exc
        sub.set_defaults(handler=command.run)


def command_registry() -> PluginRegistry:
    """The registry the parser takes its plugin commands from: only ``register_commands``
    is called, and the core's built-in plugins (none registers a command; they import
    torch) are left out, so that ``rft --help`` costs no more than importing the
    installed plugins' entry-point modules."""
    return PluginRegistry.create(kinds=("command",), builtins=False)


def _unknown_command_hint(argv: Sequence[str], registry: PluginRegistry) -> str | None:
    """For a command that is not installed but that a known plugin distribution provides
    (e.g. ``convert-verl``), the line saying what to install; else ``None``."""
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    if name is None or registry.has("command", name):
        return None
    if plugin_catalog().provider("command", name) is None:
        return None
    return registry.unknown_name_message("command", name)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the run unwinds (monitors closed, endpoint and
    Ray cluster stopped) and ends with one line."""


def _raise_terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
    raise Terminated


def terminate_like_interrupt() -> Any:
    """Turn SIGTERM into :class:`Terminated` in the main thread (unless a caller installed
    its own handler); return the handler it replaced (``None``: none replaced)."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        return signal.signal(signal.SIGTERM, _raise_terminated)
    return None


def main(argv: Sequence[str] | None = None, *, registry: PluginRegistry | None = None
         ) -> int:
    """Run ``rft`` with ``argv`` (default: the process's arguments); the exit status.

    :param registry: where plugin commands come from; default: a fresh
        :func:`command_registry`.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if registry is None:
            registry = command_registry()
        parser = build_parser(registry)
    except RftError as error:
        if "--debug" in argv:
            raise
        _print_problems(error)
        return EXIT_USAGE
    hint = _unknown_command_hint(argv, registry)
    if hint is not None:
        print(f"rft: {hint}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    previous = terminate_like_interrupt()
    try:
        return args.handler(args)
    except RftError as error:
        if args.debug:
            raise
        _print_problems(error)
        return EXIT_USAGE
    except KeyboardInterrupt as interrupt:
        terminated = isinstance(interrupt, Terminated)
        print(f"rft: {'terminated (SIGTERM)' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        if previous is not None:  # main() called in a process that goes on (tests)
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
