"""Reading a veRL launch: a shell script around ``python -m verl.trainer.main_ppo``, or a
bare list of Hydra overrides.

- A **launch script** (any text with ``-m verl.…`` or ``…/verl/trainer/main_*.py``) is
  evaluated by bash itself with every command stubbed
  (:func:`~rft_plugin_convert_verl.shell.evaluate_script`): the argument vector of the
  command that launches veRL is read as bash built it — variables and their defaults,
  ``$(...)``, ``$((...))``, arrays, functions, loops. :func:`parse_launch` then reads
  the ``--config-name`` / ``--config-path`` flags and the overrides.
- A **bare list of overrides** (one per line, or several on a line) is read by a small
  shell reader (:func:`read_commands`): quotes, ``\\`` continuations, comments,
  ``NAME=value`` assignments and ``$VAR`` / ``${VAR:-default}``; a variable not assigned
  in the list becomes an OmegaConf interpolation ``${oc.env:VAR}``. Command substitution
  is an error there (only a script is evaluated).
- **Hydra overrides** (:func:`parse_override`): ``key=value``, ``+key=value``,
  ``++key=value``, ``~key``; values as Hydra reads them: ``null``, booleans, integers,
  floats, quoted strings, ``[a, b]`` lists, ``{k: v}`` dicts, anything else a string.
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
                    continue
                if text not in self.env_refs:
                    self.env_refs.append(text)
                if default is None:
                    out.append(f"${{oc.env:{text}}}")
                else:
                    argument = _resolver_argument(self.expand_text(default, word.line))
                    out.append(f"${{oc.env:{text},{argument}}}")
            # "special" ($@, $1, ...) expands to nothing
        return "".join(out)

    def expand_text(self, text: str, line: int) -> str:
        """A default's text (``"${Y}/train.parquet"``) read as one shell word."""
        commands = read_commands(text) if text.strip() else []
        words = [w for command in commands for w in command.words]
        return " ".join(self.expand(w) for w in words)


def _resolver_argument(text: str) -> str:
    """``text`` as an argument of an OmegaConf resolver (``${oc.env:VAR,<here>}``):
    quoted when it holds characters the grammar would read otherwise."""
    if re.fullmatch(r"[\w./\-~:@+]*(\$\{[^{}]*\}[\w./\-~:@+]*)*", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _error(line: int, message: str) -> VerlConvertError:
    return VerlConvertError(f"line {line}: {message}")


def _closing_brace(text: str, start: int, line: int) -> int:
    """Index of the ``}`` closing the ``${`` whose body starts at ``start`` (quotes and
    nested ``${...}`` skipped, as bash does)."""
    depth, i, quote = 1, start, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 2
            continue
        elif text.startswith("${", i):
            depth += 1
            i += 2
            continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _error(line, "unclosed '${' in shell variable")


def _read_variable(text: str, i: int, line: int, word: Word) -> int:
    """Parse the expansion starting at ``text[i] == '$'``; return the index after it."""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if nxt == "{":
        end = _closing_brace(text, i + 2, line)
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
            raise _error(line, f"unsupported shell expansion '${{{body}}}' in an override "
                         "list (a launch script is evaluated by bash)")
        return end + 1
    if nxt == "(":
        raise _error(line, "command substitution '$(...)' in an override list cannot be "
                     "evaluated (a launch script can: it is run by bash)")
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
            quoted = self.read_quoted()
            if self.pos == len(text):
                return quoted
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
LAUNCH_MARKER = re.compile(r"-m\s*verl\.\w|verl/trainer/main_\w+\.py")
"""Text that makes the input a launch script (evaluated with bash) rather than a bare
list of overrides."""
_IGNORED_COMMANDS = {"set", "wait", "cd", "echo", "source", ".", "unset", "trap", "exit",
                     "shift", "mkdir", "pip", "huggingface-cli", "hf", "ray"}
"""Commands of an override list that are skipped."""
_HYDRA_FLAGS_WITH_VALUE = {"--config-name", "--config-path", "--config-dir", "-cn", "-cp",
                           "-cd"}
_CONFIG_NAME_FLAGS = {"--config-name", "-cn"}
_CONFIG_PATH_FLAGS = {"--config-path", "-cp", "--config-dir", "-cd"}
SCRIPT_ARGUMENTS = ("the script's own arguments: none were given during conversion (give "
                    "rft overrides to `rft run` instead)")
"""Why ``$@`` is reported."""
_ALL_ARGUMENTS = re.compile(r"\$\{?[@*]")
_POSITIONAL = re.compile(r"\$\{?([1-9])")
_NOT_RUN = {"pip", "pip3", "huggingface-cli", "hf", "wget", "curl", "git", "rm", "cp", "mv",
            "ln", "touch", "chmod", "wandb", "kill", "pkill", "python", "python3", "ray",
            "torchrun", "bash", "sh", "uv"}
"""Recorded commands worth naming in the report when the script ran them before its
launch (they were not run)."""


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
    """Shell variables assigned in an override list (after expansion)."""
    env_refs: list[str] = field(default_factory=list)
    """Environment variables the converted values read (``${oc.env:VAR}``)."""
    ignored: list[tuple[int, str, str]] = field(default_factory=list)
    """``(line, text, why)`` of launch arguments that are not overrides."""
    notes: list[str] = field(default_factory=list)
    """What the evaluation of the script assumed (defaults used, stubbed commands)."""
    config_name: str | None = None
    """``--config-name`` of the launch, if any."""
    config_path: str | None = None
    """``--config-path`` / ``--config-dir`` of the launch, if any."""


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


def _code_lines(text: str) -> list[tuple[int, str]]:
    """``(number, line)`` of the lines that are not comments."""
    return [(number, line) for number, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]


def _line_of(lines: list[tuple[int, str]], needle: str, at_or_after: int = 0) -> int:
    """The first code line at or after ``at_or_after`` containing ``needle`` (else any
    code line containing it; 0: none)."""
    found = [number for number, line in lines if needle in line]
    later = [number for number in found if number >= at_or_after]
    return (later or found or [0])[0]


def _argument_line(lines: list[tuple[int, str]], argument: str, launch_line: int) -> int:
    key = re.match(r"[+~]*([\w.\-@/]+)", argument)
    if key is None:
        return 0
    name = key.group(1)
    pattern = re.compile(r"(?<![\w.])[+~]*" + re.escape(name) + r"(?![\w.\-])")
    found = [number for number, line in lines if pattern.search(line)]
    later = [number for number in found if number >= launch_line]
    return (later or found or [0])[0]


_FUNCTION = re.compile(r"^\s*(?:function\s+)?[\w.:-]+\s*\(\s*\)|^\s*function\s+[\w.:-]+")


def _outside_functions(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The code lines outside function bodies (where ``$@`` / ``$1`` are the script's
    own arguments)."""
    outside: list[tuple[int, str]] = []
    depth = 0
    for number, line in lines:
        if depth == 0 and _FUNCTION.match(line):
            depth = max(line.count("{") - line.count("}"), 0) or -1  # -1: "{" on next line
            continue
        if depth != 0:
            if depth == -1:
                depth = 0
            depth += line.count("{") - line.count("}")
            depth = max(depth, 0)
            continue
        outside.append((number, line))
    return outside


def _describe_difference(first: list[str], other: list[str]) -> str:
    a, b = set(first), set(other)
    changed = sorted({arg.split("=", 1)[0] for arg in (a ^ b)})
    return ", ".join(changed[:6]) + (", ..." if len(changed) > 6 else "")


def _parse_script(text: str, source_name: str, script_path: str | None) -> ParsedLaunch:
    from rft_plugin_convert_verl.shell import ScriptError, evaluate_script

    try:
        evaluation = evaluate_script(text, script_path)
    except ScriptError as exc:
        raise VerlConvertError(f"{source_name}: {exc}") from None
    launches = [(argv, found) for argv in evaluation.commands
                if (found := _launch_start(argv)) is not None]
    if not launches:
        why = f": {evaluation.last_error}" if evaluation.last_error else ""
        if evaluation.status != 0:
            raise VerlConvertError(f"{source_name}: the script stopped (exit status "
                                   f"{evaluation.status}) before it launched veRL{why}")
        raise VerlConvertError(f"{source_name}: the script, run without arguments, never "
                               f"launches veRL (python3 -m verl.trainer.main_ppo ...){why}")
    argv, (start, entry) = launches[0]
    lines = _code_lines(text)
    parsed = ParsedLaunch([], "script", entry_point=entry)
    parsed.launch_line = _line_of(lines, entry.rsplit("/", 1)[-1]) or None
    distinct = []
    for other, _ in launches:
        if other not in distinct:
            distinct.append(other)
    if len(distinct) > 1:
        parsed.notes.append(
            f"the script launches veRL {len(launches)} times with {len(distinct)} different "
            "argument lists; the first launch is converted (the others differ in "
            + "; ".join(_describe_difference(argv, other) for other in distinct[1:]) + ")")
    before = evaluation.commands[:evaluation.commands.index(argv)]
    skipped = sorted({cmd[0].rsplit("/", 1)[-1] for cmd in before if cmd
                      and cmd[0].rsplit("/", 1)[-1] in _NOT_RUN})
    if skipped:
        parsed.notes.append("commands of the script that were not run (only the launch is "
                            "read): " + ", ".join(skipped))
    if any(cmd and cmd[0].endswith("nvidia-smi") for cmd in before):
        parsed.notes.append("the script asks nvidia-smi for the GPUs: the converter's stub "
                            "reports 8 (veRL's default trainer.n_gpus_per_node)")
    if evaluation.env_defaults:
        parsed.notes.append("environment variables the script reads with a default were unset "
                            "during conversion, so the script's defaults were used: "
                            + ", ".join(evaluation.env_defaults))
    top_level = _outside_functions(lines)
    for number, text in top_level:
        if _ALL_ARGUMENTS.search(text):
            parsed.ignored.append((number, "$@", SCRIPT_ARGUMENTS))
    positional = sorted({m.group(1) for _, text in top_level
                         for m in _POSITIONAL.finditer(text)})
    if positional:
        parsed.notes.append("the script reads its positional arguments ("
                            + ", ".join(f"${n}" for n in positional) + "): they were empty "
                            "during conversion, so the script's defaults for them were used")
    arguments = argv[start:]
    pending: str | None = None  # a flag waiting for its value
    for argument in arguments:
        line = _argument_line(lines, argument, parsed.launch_line or 0)
        if pending is not None:
            _set_flag(parsed, pending, argument)
            parsed.ignored[-1] = (parsed.ignored[-1][0], f"{parsed.ignored[-1][1]} {argument}",
                                  parsed.ignored[-1][2])
            pending = None
            continue
        if argument.startswith("-"):
            flag, has_value, value = argument.partition("=")
            if flag in _CONFIG_NAME_FLAGS | _CONFIG_PATH_FLAGS:
                parsed.ignored.append((line or parsed.launch_line or 0, argument,
                                       "Hydra flag"))
                if has_value:
                    _set_flag(parsed, flag, value)
                else:
                    pending = flag
                continue
            parsed.ignored.append((line or parsed.launch_line or 0, argument,
                                   "a command-line flag, not an override"))
            pending = flag if flag in _HYDRA_FLAGS_WITH_VALUE and not has_value else None
            continue
        if not argument:
            continue
        parsed.overrides.append(parse_override(argument, line))
    # Hydra flags are reported only when their config cannot be read (see mapping)
    parsed.ignored = [entry for entry in parsed.ignored if entry[2] != "Hydra flag"]
    _collect_env_refs(parsed)
    return parsed


def _set_flag(parsed: ParsedLaunch, flag: str, value: str) -> None:
    if flag in _CONFIG_NAME_FLAGS:
        parsed.config_name = value
    elif flag in _CONFIG_PATH_FLAGS:
        parsed.config_path = value


def _collect_env_refs(parsed: ParsedLaunch) -> None:
    for override in parsed.overrides:
        for name in re.findall(r"\$\{oc\.env:(\w+)", override.text):
            if name not in parsed.env_refs:
                parsed.env_refs.append(name)


def _parse_override_list(text: str) -> ParsedLaunch:
    state = ShellState()
    listed: list[tuple[Word, str]] = []
    for command in read_commands(text):
        if _is_assignment_command(command.words):
            for word in command.words:
                if word.assignment_name():
                    state.variables[word.assignment_name() or ""] = (
                        state.expand(word).split("=", 1)[1])
            continue
        words = list(command.words)
        if words and words[0].raw not in _IGNORED_COMMANDS:
            listed.extend((word, state.expand(word)) for word in words)
    parsed = ParsedLaunch([], "overrides", variables=dict(state.variables))
    flag_argument = False
    for word, value in listed:
        if flag_argument:  # the value of "--config-name NAME"
            flag_argument = False
            _set_flag(parsed, parsed.ignored[-1][1], value)
            parsed.ignored.pop()
            continue
        if word.only_special:
            parsed.ignored.append((word.line, word.raw, "the script's own arguments"))
        elif value.startswith("-"):
            flag, has_value, flag_value = value.partition("=")
            if flag in _CONFIG_NAME_FLAGS | _CONFIG_PATH_FLAGS:
                if has_value:
                    _set_flag(parsed, flag, flag_value)
                else:
                    parsed.ignored.append((word.line, flag, "Hydra flag"))
                    flag_argument = True
                continue
            parsed.ignored.append((word.line, value, "a command-line flag, not an override"))
        elif "=" in value or value.startswith("~"):
            parsed.overrides.append(parse_override(value, word.line))
        else:
            raise VerlConvertError(
                f"line {word.line}: {word.raw!r} is not a Hydra override (expected "
                "key.sub=value), and the input has no 'python -m verl...' launch")
    _collect_env_refs(parsed)
    return parsed


def parse_launch(text: str, source_name: str = "<stdin>",
                 script_path: str | None = None) -> ParsedLaunch:
    """Read a veRL launch script or a list of overrides.

    A text that launches veRL (``-m verl.…`` or ``…/verl/trainer/main_*.py``) is run by
    bash under stubs (:mod:`~rft_plugin_convert_verl.shell`) and the arguments of its
    launch are read; any other text is a list of overrides (read by :func:`read_commands`).

    :param script_path: the script's file (its directory is ``$(dirname $0)``).
    :raises VerlConvertError: the script stops or never launches veRL, or a malformed
        override — one line naming it.
    """
    text = text.replace("\r\n", "\n")
    if LAUNCH_MARKER.search(text):
        return _parse_script(text, source_name, script_path)
    return _parse_override_list(text)
