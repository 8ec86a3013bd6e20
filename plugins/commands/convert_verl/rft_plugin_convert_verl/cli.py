"""``rft convert-verl INPUT [-o OUTPUT]``: a veRL launch → an rft config.

INPUT is a launch script (``python3 -m verl.trainer.main_ppo key=value ...``) or a file
of Hydra overrides; ``-`` reads stdin. The config goes to OUTPUT (stdout by default); the
report of veRL settings that were not converted goes to stderr and into the YAML header.
A problem prints one line (``rft: <problem>``) and exits with status 2.

The plugin registers :data:`COMMAND` as ``rft convert-verl``; also runnable alone:
``python -m rft_plugin_convert_verl.cli INPUT [-o OUTPUT]``. This module is imported on
every ``rft`` start (through the plugin's entry point): the converter is imported by
:func:`run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from rft.commands import Command
from rft.errors import RftError

from rft_plugin_convert_verl.interpolations import without_interpolations
from rft_plugin_convert_verl.parse import VerlConvertError

EXIT_USAGE = 2


def _read_input(name: str) -> tuple[str, str]:
    """The text of ``name`` (``-``: stdin) and the name shown in messages."""
    if name == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(name, encoding="utf-8") as handle:
            return handle.read(), name
    except FileNotFoundError:
        raise VerlConvertError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise VerlConvertError(f"{name}: is a directory, not a launch script") from None
    except UnicodeDecodeError:
        raise VerlConvertError(f"{name}: not a UTF-8 text file") from None
    except OSError as exc:
        raise VerlConvertError(f"{name}: cannot read: {exc.strerror}") from None


def _check_schema(result: Any) -> None:
    """Every emitted key must convert onto the rft schema; a problem names the veRL source
    (e.g. a string where veRL's value should be a number)."""
    from rft.config.convert import to_dataclass
    from rft.config.schema import RftConfig

    problems: list[str] = []
    to_dataclass(RftConfig, without_interpolations(result.config), "", problems)
    if problems:
        first = problems[0]
        key = first.split(":", 1)[0]
        source = result.sources.get(key)
        where = f" (from {source})" if source else ""
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise VerlConvertError(f"converted config: {key}{where}:{first.split(':', 1)[1]}"
                               f"{more}")


def run(args: argparse.Namespace) -> int:
    """Run ``convert-verl``: write the converted config, print the report; exit status."""
    from rft_plugin_convert_verl.convert import convert_text

    text, source_name = _read_input(args.input)
    result = convert_text(text, source_name, None if args.input == "-" else args.input,
                          trainer=args.trainer)
    _check_schema(result)
    if args.output in (None, "-"):
        sys.stdout.write(result.yaml)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(result.yaml)
        except OSError as exc:
            raise VerlConvertError(f"{args.output}: cannot write: {exc.strerror}") from None
    if not args.quiet:
        result.report.print()
        if args.output not in (None, "-"):
            print(f"rft convert-verl: wrote {args.output}; check it with: rft validate "
                  f"{os.fspath(args.output)}", file=sys.stderr)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``convert-verl`` (shared by ``rft convert-verl`` and :func:`main`)."""
    parser.description = ("Convert a veRL launch script or Hydra override list into an rft "
                          "config; see docs/verl.md.")
    parser.add_argument("input", metavar="INPUT",
                        help="veRL launch script or file of Hydra overrides; '-' for stdin")
    parser.add_argument("-o", "--output", metavar="OUTPUT",
                        help="write the rft config here (default: stdout)")
    parser.add_argument("--trainer", choices=("torch", "verl"), default=None,
                        help="write this trainer_type (default: verl when the launch needs "
                        "veRL's workers and rft-plugin-verl can run it, else torch)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="do not print the report to stderr (it stays in the YAML header)")


COMMAND = Command(
    help="convert a veRL launch script (python -m verl.trainer.main_ppo key=value ...) "
    "into an rft config",
    add_arguments=add_arguments,
    run=run,
)
"""``rft convert-verl``, registered by the plugin's ``register_commands``."""


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry: ``python -m rft_plugin_convert_verl.cli INPUT [-o OUTPUT]``."""
    parser = argparse.ArgumentParser(prog="rft convert-verl")
    add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except RftError as error:
        if args.debug:
            raise
        print(f"rft: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
