"""Commands contributed by plugins (``register_commands``): added to ``rft`` after the
built-in ones, listed by ``rft --help``, run through :func:`rft.cli.main`, and their
errors printed as one line."""

from __future__ import annotations

import argparse

import pytest

from rft import hookimpl
from rft.cli import main
from rft.commands import Command
from rft.errors import DuplicateNameError, RftError
from rft.plugins import PluginRegistry, create_plugin_manager


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("word")
    parser.add_argument("--times", type=int, default=1)


def _run(args: argparse.Namespace) -> int:
    if args.word == "bad":
        raise RftError(f"cannot echo {args.word!r}")
    print(" ".join([args.word] * args.times))
    return 3 if args.word == "three" else 0


ECHO = Command(help="print WORD", add_arguments=_add_arguments, run=_run)


class EchoPlugin:
    @hookimpl
    def register_commands(self):
        return {"echo": ECHO}


class Twin:
    """Registers the same name as :class:`EchoPlugin`."""

    @hookimpl
    def register_commands(self):
        return {"echo": ECHO}


class Clash:
    """Registers the name of a built-in command."""

    @hookimpl
    def register_commands(self):
        return {"validate": ECHO}


class Loose:
    """Registers a function where a :class:`Command` belongs."""

    @hookimpl
    def register_commands(self):
        return {"loose": _run}


def _conflicting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug")  # rft adds --debug itself


class Conflicting:
    """A command whose ``add_arguments`` fails."""

    @hookimpl
    def register_commands(self):
        return {"conflict": Command("conflicts", _conflicting, _run)}


def _registry(*plugins: object, distribution: str = "rft-plugin-fake") -> PluginRegistry:
    """A registry with ``plugins`` registered in-process, each reported as coming from
    ``distribution`` (as if it had been installed), and no entry points."""
    manager = create_plugin_manager(autoload=False, extra_plugins=plugins)
    for plugin in plugins:
        manager.distributions[manager.get_name(plugin)] = (distribution, "0.0.1")
    return PluginRegistry(manager)


def test_plugin_command_runs_through_main(capsys: pytest.CaptureFixture[str]) -> None:
    registry = _registry(EchoPlugin())
    assert registry.registration("command", "echo").distribution == "rft-plugin-fake"
    assert main(["echo", "hi", "--times", "2"], registry=registry) == 0
    assert capsys.readouterr().out == "hi hi\n"
    assert main(["echo", "three"], registry=registry) == 3


def test_plugin_command_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    registry = _registry(EchoPlugin())
    assert main(["echo", "bad"], registry=registry) == 2
    assert capsys.readouterr().err == "rft: cannot echo 'bad'\n"
    with pytest.raises(RftError, match="cannot echo"):
        main(["echo", "bad", "--debug"], registry=registry)


def test_help_lists_plugin_commands_after_builtins(capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"], registry=_registry(EchoPlugin()))
    assert exited.value.code == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ")]
    assert listed[-1] == "echo" and {"plugins", "validate", "run", "tiny-model"} < set(listed)
    assert any(line.split() == ["echo", "print", "WORD"] for line in out.splitlines())
    with pytest.raises(SystemExit):
        main(["echo", "--help"], registry=_registry(EchoPlugin()))
    assert "--times TIMES" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["echo", "x"], ["plugins"]])
def test_command_clashing_with_a_builtin_is_one_line_naming_the_distribution(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv, registry=_registry(Clash(), EchoPlugin(),
                                         distribution="rft-plugin-clash")) == 2
    assert capsys.readouterr().err == (
        "rft: plugin 'Clash' (distribution rft-plugin-clash): command 'validate' clashes "
        "with the built-in command 'rft validate'\n")


def test_two_plugins_with_one_command_name_both_distributions() -> None:
    manager = create_plugin_manager(autoload=False, extra_plugins=[EchoPlugin(), Twin()])
    manager.distributions.update({"EchoPlugin": ("rft-plugin-echo", "1"),
                                  "Twin": ("rft-plugin-twin", "1")})
    with pytest.raises(DuplicateNameError) as caught:
        PluginRegistry(manager)
    message = str(caught.value)
    assert message.startswith("command 'echo' is registered twice: by plugin ")
    assert "plugin 'EchoPlugin' (distribution rft-plugin-echo)" in message
    assert "plugin 'Twin' (distribution rft-plugin-twin)" in message


def test_a_value_that_is_not_a_command_is_a_plugin_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["loose"], registry=_registry(Loose())) == 2
    assert capsys.readouterr().err == (
        "rft: plugin 'Loose' (distribution rft-plugin-fake): register_commands() must map "
        "'loose' to an rft.commands.Command, got function\n")


def test_failing_add_arguments_names_the_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"], registry=_registry(Conflicting())) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith("rft: plugin 'Conflicting' (distribution rft-plugin-fake): command "
                          "'conflict': add_arguments() raised ArgumentError:")


def test_missing_known_command_says_what_to_install(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    assert main(["convert-verl", "run.sh"], registry=_registry()) == 2
    assert capsys.readouterr().err == (
        "rft: unknown command 'convert-verl' (it is provided by rft-plugin-convert-verl: "
        "pip install rft-plugin-convert-verl)\n")


def test_command_is_frozen() -> None:
    with pytest.raises(AttributeError):
        ECHO.help = "other"  # type: ignore[misc]


class Counting:
    """Counts the calls of two of its hooks."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def register_commands(self):
        self.calls.append("register_commands")
        return {"echo": ECHO}

    @hookimpl
    def register_reward_fns(self):
        self.calls.append("register_reward_fns")
        return {}


def test_a_registry_of_commands_calls_only_register_commands() -> None:
    """``kinds=("command",)`` (the parser's registry): the other ``register_*`` hooks are
    not called, and looking up another kind says it was not collected."""
    counting = Counting()
    registry = PluginRegistry(create_plugin_manager(autoload=False, builtins=False,
                                                    extra_plugins=[counting]),
                              kinds=("command",))
    assert registry.names("command") == ["echo"]
    assert counting.calls == ["register_commands"]
    with pytest.raises(KeyError, match="'reward_fn' was not collected"):
        registry.has("reward_fn", "x")


def test_no_builtin_plugin_registers_a_command() -> None:
    """What lets the parser's registry leave the built-in plugins out."""
    registry = PluginRegistry(create_plugin_manager(autoload=False), kinds=("command",))
    assert registry.names("command") == []


def test_help_with_a_light_command_plugin_imports_no_torch() -> None:
    """``rft --help`` with the installed rft-plugin-convert-verl only (``RFT_PLUGINS``):
    building the command list imports neither torch nor the built-in plugins. (Each
    installed plugin whose entry-point module imports torch still costs its import.)"""
    import os
    import subprocess
    import sys

    code = ("import sys\n"
            "from rft.cli import build_parser, command_registry\n"
            "parser = build_parser(command_registry())\n"
            "commands = parser._subparsers._group_actions[0].choices\n"
            "print('convert-verl' in commands, 'torch' in sys.modules,\n"
            "      any(m.startswith('rft.builtin.') for m in sys.modules))\n")
    env = {**os.environ, "RFT_PLUGINS": "rft-plugin-convert-verl"}
    env.pop("RFT_DISABLE_PLUGIN_AUTOLOAD", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    assert done.stdout.split() == ["True", "False", "False"], done.stderr[-2000:]
