"""The ``rft`` command.

    rft plugins [--json]                    list loaded plugins and the names they register
    rft validate CONFIG [key=value ...]     print the resolved config, or every problem
    rft run CONFIG [key=value ...]          validate, then run through the launcher
    rft tiny-model DIR                      build a tiny random Qwen2 model offline

A user error prints one line per problem (``rft: <problem>``) and exits with status 2;
``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rft.errors import ConfigError, RftError

EXIT_USAGE = 2
"""Exit status for invalid configs, unknown plugins and other user errors."""


def _print_problems(error: RftError) -> None:
    lines = error.problems if isinstance(error, ConfigError) else str(error).splitlines()
    for line in lines or [type(error).__name__]:
        print(f"rft: {line}", file=sys.stderr)


def cmd_plugins(args: argparse.Namespace) -> int:
    from rft.plugins import PluginRegistry

    infos = PluginRegistry.create().plugins()
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=2))
        return 0
    header = ("plugin", "distribution", "version", "registers")
    rows = [(i.name, i.distribution, i.version,
             "; ".join(f"{kind}: {', '.join(names)}" for kind, names in i.registers.items())
             or "-") for i in infos]
    widths = [max(len(r[col]) for r in [header, *rows]) for col in range(3)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(widths[n]) for n, cell in enumerate(row[:3])) + "  " + row[3])
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    import dataclasses

    import yaml

    from rft.config import load_config

    loaded = load_config(args.config, args.overrides)
    for warning in loaded.warnings:
        print(f"rft: warning: {warning}", file=sys.stderr)
    for stage in loaded.stages:
        if stage.name is not None:
            print(f"# stage: {stage.name}")
        print(yaml.safe_dump(dataclasses.asdict(stage.config), sort_keys=False), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from rft.config import load_config
    from rft.launcher import run

    loaded = load_config(args.config, args.overrides)
    for warning in loaded.warnings:
        print(f"rft: warning: {warning}", file=sys.stderr)
    return run(loaded)


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from rft.testing.tiny_model import build_tiny_model

    path = build_tiny_model(args.directory, vocab_size=args.vocab_size,
                            hidden_size=args.hidden_size, num_layers=args.layers,
                            seed=args.seed)
    print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
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
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)
    tiny.set_defaults(handler=cmd_tiny_model)
    from rft.verl_convert.cli import add_parser as add_convert_verl_parser
    add_convert_verl_parser(commands)

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except RftError as error:
        if args.debug:
            raise
        _print_problems(error)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rft: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
