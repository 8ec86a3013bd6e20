"""Reading a veRL launch: a shell script around ``python -m verl.trainer.main_ppo``, or a
bare list of Hydra overrides.

Two layers:

1. A small shell reader (:func:`read_commands`): ``\\``-newline continuations, comments,
   single / double quotes, backslash escapes, ``;`` ``&`` ``|`` ``&&`` ``||`` separators,
   redirections (``2>&1``, ``> log``), ``NAME=value`` / ``export NAME=value`` assignments
   and ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` / leading ``~`` expansion. A variable
   assigned earlier in the script is substituted by its value; any other variable
   (``$HOME``) becomes an OmegaConf interpolation ``${oc.env:VAR}`` (``${oc.env:VAR,default}``
   with a default), resolved when rft loads the config. ``$@``, ``$*`` and ``$1``… are
   dropped. Command substitution (``$(...)``, backquotes) cannot be evaluated and is an
   error.
2. A Hydra override reader (:func:`parse_override`): ``key=value``, ``+key=value``,
   ``++key=value``, ``~key``; values as Hydra reads them: ``null``, booleans, integers,
   floats, quoted strings, ``[a, b]`` lists, ``{k: v}`` dicts, anything else a string.

:func:`parse_launch` picks the overrides: the words after ``-m verl.…`` (or after a
``…/verl/trainer/main_*.py`` script) of the one command that launches veRL; when no
command launches veRL, every word of the input is an override (one per line, or several
on a line), and shell assignments still define variables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rft.errors import RftError


class VerlConvertError(RftError):
    """A veRL launch that cannot be read or converted; the message is one line naming the
    culprit (input line, override, veRL key)."""


# ---------------------------------------------------------------------------------------
# shell words
# ---------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_OPERATOR_CHARS = ";&|<>"
_SPECIAL_PARAMS = set("@*#?$!-0123456789")


@dataclass
class Word:
    """One shell word before expansion: literal and variable segments, and its line."""

    segments: list[tuple[str, str, str | None]] = field(default_factory=list)
    """``("lit", text, None)`` or ``("var", NAME, default_or_None)`` or
    ``("special", "@", None)``."""
    line: int = 0
    raw: str = ""
    """The word as written (for messages)."""

    def add_literal(self, text: str) -> None:
        if self.segments and self.segments[-1][0] == "lit":
            self.segments[-1] = ("lit", self.segments[-1][1] + text, None)
        else:
            self.segments.append(("lit", text, None))

    def assignment_name(self) -> str | None:
        """``NAME`` when the word is an unquoted ``NAME=...`` assignment."""
        if self.segments and self.segments[0][0] == "lit" and not self.raw.startswith(("'", '"')):
            match = _ASSIGNMENT.match(self.segments[0][1])
            if match and self.raw.startswith(match.group(0)):
                return match.group(1)
        return None

    @property
    def only_special(self) -> bool:
        return bool(self.segments) and all(s[0] == "special" for s in self.segments)


@dataclass
class Command:
    """A simple command: its words (redirections removed) and the line it starts on."""

    words: list[Word]
    line: int


@dataclass
class ShellState:
    """Variables assigned so far, and the environment variables left for OmegaConf."""

    variables: dict[str, str] = field(default_factory=dict)
    env_refs: list[str] = field(default_factory=list)

    def expand(self, word: Word) -> str:
        out: list[str] = []
        for kind, text, default in word.segments:
            if kind == "lit":
                out.append(text)
            elif kind == "var":
                if text in self.variables:
                    out.append(self.variables[text])
                else:
                    if text not in self.env_refs:
                        self.env_refs.append(text)
                    out.append("${oc.env:%s}" % text if default is None
                               else "${oc.env:%s,%s}" % (text, default))
            # "special" ($@, $1, ...) expands to nothing
        return "".join(out)


def _error(line: int, message: str) -> VerlConvertError:
    return VerlConvertError(f"line {line}: {message}")


def _read_variable(text: str, i: int, line: int, word: Word) -> int:
    """Parse the expansion starting at ``text[i] == '$'``; return the index after it."""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if nxt == "{":
        end = text.find("}", i + 2)
        if end < 0:
            raise _error(line, "unclosed '${' in shell variable")
        body = text[i + 2:end]
        match = _NAME.match(body)
        if body in _SPECIAL_PARAMS or body.isdigit():
            word.segments.append(("special", body, None))
        elif match and match.end() == len(body):
            word.segments.append(("var", body, None))
        elif match and body[match.end():match.end() + 2] in (":-", ":="):
            word.segments.append(("var", match.group(0), body[match.end() + 2:]))
        elif match and body[match.end()] in "-=":
            word.segments.append(("var", match.group(0), body[match.end() + 1:]))
        else:
            raise _error(line, f"unsupported shell expansion '${{{body}}}'")
        return end + 1
    if nxt == "(":
        raise _error(line, "command substitution '$(...)' cannot be converted; "
                     "replace it with its value")
    if nxt and nxt in _SPECIAL_PARAMS:
        word.segments.append(("special", nxt, None))
        return i + 2
    match = _NAME.match(text, i + 1)
    if match:
        word.segments.append(("var", match.group(0), None))
        return match.end()
    word.add_literal("$")
    return i + 1


def read_commands(text: str) -> list[Command]:
    """Split shell text into simple commands of unexpanded words.

    Redirections and their targets are dropped; ``;``, ``&``, ``|``, ``&&``, ``||`` and
    newlines separate commands.
    """
    commands: list[Command] = []
    words: list[Word] = []
    line = 1
    i = 0
    n = len(text)
    skip_next_word = False  # the target of a redirection

    def end_command() -> None:
        nonlocal words
        if words:
            commands.append(Command(words, words[0].line))
        words = []

    while i < n:
        ch = text[i]
        if ch == "\\" and text.startswith("\n", i + 1):  # continuation
            i += 2
            line += 1
            continue
        if ch in " \t\r":
            i += 1
            continue
        if ch == "\n":
            end_command()
            line += 1
            i += 1
            continue
        if ch == "#":  # comment: a '#' that starts a word
            while i < n and text[i] != "\n":
                i += 1
            continue
        redirection = re.match(r"\d*(>>|>&|<&|>|<)(\d+|-)?", text[i:]) if (
            ch.isdigit() or ch in "<>") else None
        if redirection and (ch in "<>" or redirection.group(1)):
            i += redirection.end()
            if redirection.group(2) is None:  # "> file": the next word is its target
                skip_next_word = True
            continue
        if ch in ";&|":
            end_command()
            i += 2 if text.startswith(("&&", "||", ";;"), i) else 1
            continue
        # a word
        word = Word(line=line)
        start = i
        at_start = True
        while i < n:
            ch = text[i]
            if ch in " \t\r\n" or ch in _OPERATOR_CHARS:
                break
            if ch == "\\":
                if text.startswith("\n", i + 1):
                    i += 2
                    line += 1
                    continue
                word.add_literal(text[i + 1:i + 2])
                i += 2
            elif ch == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise _error(line, "unclosed single quote")
                quoted = text[i + 1:end]
                line += quoted.count("\n")
                word.add_literal(quoted)
                i = end + 1
            elif ch == '"':
                i += 1
                while True:
                    if i >= n:
                        raise _error(word.line, "unclosed double quote")
                    ch = text[i]
                    if ch == '"':
                        i += 1
                        break
                    if ch == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
                        if text[i + 1] != "\n":
                            word.add_literal(text[i + 1])
                        else:
                            line += 1
                        i += 2
                    elif ch == "$":
                        i = _read_variable(text, i, line, word)
                    elif ch == "`":
                        raise _error(line, "command substitution '`...`' cannot be "
                                     "converted; replace it with its value")
                    else:
                        if ch == "\n":
                            line += 1
                        word.add_literal(ch)
                        i += 1
            elif ch == "$":
                i = _read_variable(text, i, line, word)
            elif ch == "`":
                raise _error(line, "command substitution '`...`' cannot be converted; "
                             "replace it with its value")
            elif ch == "~" and (at_start or (len(word.segments) == 1
                                             and word.segments[0][0] == "lit"
                                             and word.segments[0][1].endswith("=")
                                             and "=" not in word.segments[0][1][:-1])) \
                    and text[i + 1:i + 2] in ("/", "", " ", "\n", "\t"):
                word.segments.append(("var", "HOME", None))
                i += 1
            else:
                word.add_literal(ch)
                i += 1
            at_start = False
        word.raw = text[start:i]
        if skip_next_word:
            skip_next_word = False
            continue
        words.append(word)
    end_command()
    return commands


# ---------------------------------------------------------------------------------------
# Hydra overrides
# ---------------------------------------------------------------------------------------

_KEY = re.compile(r"(\+\+|\+|~)?([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*)(@[\w.]+)?")
_INT = re.compile(r"[+-]?\d[\d_]*")
_FLOAT = re.compile(r"[+-]?((\d[\d_]*)?\.\d[\d_]*|\d[\d_]*\.?)([eE][+-]?\d+)?|[+-]?(inf|nan)",
                    re.IGNORECASE)


@dataclass(frozen=True)
class Override:
    """One Hydra override of a veRL launch."""

    key: str
    """Dotted veRL key, without the ``+`` / ``++`` / ``~`` prefix."""
    value: Any
    """The value as Hydra reads it (``None`` for ``~key``)."""
    text: str
    """The override as it reached veRL (after shell expansion)."""
    line: int = 0
    """Input line where the override starts (0: not from a file)."""
    op: str = ""
    """``""``, ``"+"``, ``"++"`` or ``"~"`` (delete)."""

    @property
    def value_text(self) -> str:
        return self.text.split("=", 1)[1] if "=" in self.text else ""


def _scalar(text: str) -> Any:
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered == "null":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.fullmatch(stripped):
        return int(stripped.replace("_", ""))
    if _FLOAT.fullmatch(stripped) and any(c.isdigit() for c in stripped) or lowered.lstrip(
            "+-") in ("inf", "nan"):
        return float(stripped.replace("_", ""))
    return stripped


class _ValueReader:
    """Recursive-descent reader of one Hydra value."""

    def __init__(self, text: str, override: str) -> None:
        self.text = text
        self.pos = 0
        self.override = override

    def fail(self, message: str) -> VerlConvertError:
        return VerlConvertError(f"override {self.override!r}: {message}")

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def read_quoted(self) -> str:
        quote = self.text[self.pos]
        out: list[str] = []
        self.pos += 1
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\" and self.pos + 1 < len(self.text) and self.text[self.pos + 1] in (
                    quote + "\\"):
                out.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if ch == quote:
                self.pos += 1
                return "".join(out)
            out.append(ch)
            self.pos += 1
        raise self.fail(f"unclosed quote {quote}")

    def read_element(self, stops: str) -> Any:
        """A list / dict element: quoted string, nested container or bare primitive."""
        self.skip_spaces()
        if self.pos < len(self.text) and self.text[self.pos] in "'\"":
            value = self.read_quoted()
            self.skip_spaces()
            return value
        if self.pos < len(self.text) and self.text[self.pos] == "[":
            return self.read_list()
        if self.pos < len(self.text) and self.text[self.pos] == "{":
            return self.read_dict()
        start = self.pos
        depth = 0  # inside ${...}
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "$" and self.text.startswith("${", self.pos):
                depth += 1
                self.pos += 2
                continue
            if ch == "}" and depth:
                depth -= 1
            elif not depth and ch in stops:
                break
            self.pos += 1
        return _scalar(self.text[start:self.pos])

    def read_list(self) -> list[Any]:
        self.pos += 1  # [
        items: list[Any] = []
        self.skip_spaces()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return items
        while True:
            items.append(self.read_element(",]"))
            self.skip_spaces()
            if self.pos >= len(self.text):
                raise self.fail("missing ']' at the end of the list")
            ch = self.text[self.pos]
            self.pos += 1
            if ch == "]":
                return items
            if ch != ",":
                raise self.fail(f"unexpected {ch!r} in a list")

    def read_dict(self) -> dict[str, Any]:
        self.pos += 1  # {
        items: dict[str, Any] = {}
        self.skip_spaces()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return items
        while True:
            key = self.read_element(":,}")
            if not self.text.startswith(":", self.pos):
                raise self.fail("expected 'key: value' inside '{...}'")
            self.pos += 1
            items[str(key)] = self.read_element(",}")
            self.skip_spaces()
            if self.pos >= len(self.text):
                raise self.fail("missing '}' at the end of the dict")
            ch = self.text[self.pos]
            self.pos += 1
            if ch == "}":
                return items
            if ch != ",":
                raise self.fail(f"unexpected {ch!r} in a dict")

    def read_top(self) -> Any:
        text = self.text.strip()
        if not text:
            return ""
        if text[0] in "[{":
            self.text = text
            value = self.read_list() if text[0] == "[" else self.read_dict()
            if self.text[self.pos:].strip():
                raise self.fail("unexpected text after the closing bracket")
            return value
        if text[0] in "'\"" and len(text) >= 2:
            self.text = text
            value = self.read_quoted()
            if self.pos == len(text):
                return value
            raise self.fail("text after a quoted string")
        if re.fullmatch(r"[A-Za-z_]\w*\(.*\)", text, re.DOTALL):
            raise self.fail("Hydra functions (choice, range, ...) are not supported")
        depth = 0
        for pos, ch in enumerate(text):
            if text.startswith("${", pos):
                depth += 1
            elif ch == "}" and depth:
                depth -= 1
            elif ch == "," and not depth:
                raise self.fail("a comma-separated value is a Hydra sweep (multirun); "
                                "write a list as '[a,b]'")
        return _scalar(text)


def parse_value(text: str, override: str = "") -> Any:
    """A Hydra override value as Python data."""
    return _ValueReader(text, override or text).read_top()


def parse_override(text: str, line: int = 0) -> Override:
    """One ``key=value`` / ``+key=value`` / ``++key=value`` / ``~key[=value]`` override.

    :raises VerlConvertError: naming the override when it is malformed.
    """
    where = f"line {line}: " if line else ""
    match = _KEY.match(text)
    if not match or (match.end() < len(text) and text[match.end()] != "="):
        raise VerlConvertError(f"{where}{text!r} is not a Hydra override (expected "
                               "key.sub=value)")
    op, key = match.group(1) or "", match.group(2)
    if match.end() == len(text):
        if op != "~":
            raise VerlConvertError(f"{where}override {text!r} has no '=value'")
        return Override(key, None, text, line, op)
    try:
        value = parse_value(text[match.end() + 1:], text)
    except VerlConvertError as exc:
        raise VerlConvertError(f"{where}{exc}") from None
    return Override(key, value, text, line, op)


# ---------------------------------------------------------------------------------------
# a whole launch
# ---------------------------------------------------------------------------------------

_VERL_SCRIPT = re.compile(r"(^|/)verl/trainer/main_\w+\.py$")
_IGNORED_COMMANDS = {"set", "wait", "cd", "echo", "source", ".", "unset", "trap", "exit",
                     "shift", "mkdir", "pip", "huggingface-cli", "hf", "ray"}
"""Commands of a launch script that are skipped when looking for overrides."""
_HYDRA_FLAGS_WITH_VALUE = {"--config-name", "--config-path", "--config-dir", "-cn", "-cp",
                           "-cd"}


@dataclass
class ParsedLaunch:
    """The overrides of a veRL launch and what was read around them."""

    overrides: list[Override]
    kind: str
    """``"script"`` (a command launching veRL) or ``"overrides"`` (a bare list)."""
    entry_point: str | None = None
    """``verl.trainer.main_ppo`` or the script path; ``None`` for a bare list."""
    launch_line: int | None = None
    variables: dict[str, str] = field(default_factory=dict)
    """Shell variables assigned in the script (after expansion)."""
    env_refs: list[str] = field(default_factory=list)
    """Variables not assigned in the script, left as ``${oc.env:VAR}``."""
    ignored: list[tuple[int, str, str]] = field(default_factory=list)
    """``(line, text, why)`` of launch arguments that are not overrides."""


def _launch_start(words: list[str]) -> tuple[int, str] | None:
    """Index of the first override and the entry point, when the command launches veRL."""
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words) and words[i + 1].startswith("verl."):
            return i + 2, words[i + 1]
        if word.startswith("-mverl."):
            return i + 1, word[2:]
        if _VERL_SCRIPT.search(word):
            return i + 1, word
    return None


def _is_assignment_command(words: list[Word]) -> bool:
    first = 1 if words and words[0].raw in ("export", "declare", "local", "readonly") else 0
    return len(words) > first and all(w.assignment_name() for w in words[first:])


def parse_launch(text: str) -> ParsedLaunch:
    """Read a veRL launch script or a list of overrides.

    :raises VerlConvertError: a shell construct that cannot be evaluated, no or several
        veRL launches, or a malformed override — one line naming it.
    """
    text = text.replace("\r\n", "\n")
    state = ShellState()
    launches: list[tuple[int, str, list[tuple[Word, str]]]] = []  # line, entry, arguments
    listed: list[tuple[Word, str]] = []  # every word, for a bare list of overrides
    for command in read_commands(text):
        if _is_assignment_command(command.words):
            for word in command.words:
                if word.assignment_name():
                    state.variables[word.assignment_name() or ""] = (
                        state.expand(word).split("=", 1)[1])
            continue
        words = list(command.words)
        while words and words[0].assignment_name():  # PYTHONUNBUFFERED=1 python3 ...
            words.pop(0)
        expanded = [state.expand(w) for w in words]
        start = _launch_start(expanded)
        if start is not None:
            launches.append((command.line, start[1],
                             list(zip(words, expanded))[start[0]:]))
        elif words and words[0].raw not in _IGNORED_COMMANDS:
            listed.extend(zip(words, expanded))
    if len(launches) > 1:
        lines = ", ".join(str(line) for line, _, _ in launches)
        raise VerlConvertError(f"the input launches veRL {len(launches)} times (lines "
                               f"{lines}); convert one launch at a time")
    parsed = ParsedLaunch([], "script" if launches else "overrides",
                          variables=dict(state.variables))
    if launches:
        parsed.launch_line, parsed.entry_point, arguments = launches[0]
    else:
        arguments = listed
    flag_argument = False
    for word, value in arguments:
        if flag_argument:  # the value of "--config-name NAME"
            flag_argument = False
            parsed.ignored[-1] = (parsed.ignored[-1][0], f"{parsed.ignored[-1][1]} {value}",
                                  parsed.ignored[-1][2])
            continue
        if word.only_special:
            parsed.ignored.append((word.line, word.raw, "the script's own arguments"))
        elif value.startswith("-"):
            parsed.ignored.append((word.line, value, "a command-line flag, not an override "
                                   "(a --config-name other than ppo_trainer changes "
                                   "veRL's defaults)"))
            flag_argument = value in _HYDRA_FLAGS_WITH_VALUE
        elif launches or "=" in value or value.startswith("~"):
            parsed.overrides.append(parse_override(value, word.line))
        else:
            raise VerlConvertError(
                f"line {word.line}: {word.raw!r} is not a Hydra override (expected "
                "key.sub=value), and the input has no 'python -m verl...' launch")
    for override in parsed.overrides:
        for name in re.findall(r"\$\{oc\.env:(\w+)", override.text):
            if name not in parsed.env_refs:
                parsed.env_refs.append(name)
    return parsed
