"""Evaluating a veRL launch script the way bash does, with every command stubbed.

A launch script is a bash program: variables with defaults (``${X:-"$Y"}``), command
substitution (``$(pwd)``, ``$(date +%m%d)``), arithmetic (``$((1024 * 8))``), arrays
(``"${ARGS[@]}"``), functions, loops. Rather than re-implementing a subset of bash,
:func:`evaluate_script` runs the script with bash itself in a throwaway directory and
records the argument vector of every command it would run, without running them:

- ``PATH`` holds only a directory of stubs: harmless text tools (``dirname``, ``date``,
  ``sed``, ``awk``, ``cat``, ``wc``, ...) are the real programs; launchers (``python``,
  ``python3``, ``torchrun``, ``ray``, ``nohup``, ...) and ``nvidia-smi`` are stubs that
  record their arguments; ``mkdir`` creates directories only inside the sandbox; any other
  command (``pip``, ``wget``, ``huggingface-cli``, ``rm``, ...) is recorded by bash's
  ``command_not_found_handle`` and does nothing.
- The environment is empty but for ``HOME`` (a directory in the sandbox), ``PATH`` and a
  placeholder for each variable the script reads without setting it (``$DATA_DIR`` →
  ``${oc.env:DATA_DIR}`` in the converted config). A variable read only through a
  default (``${NNODES:-1}``) is left unset, so the script's default applies.
- The sandbox mirrors the file system under a temporary root: the script runs from a copy
  at its own path (``$(dirname $0)`` works) in the current directory's mirror (``$(pwd)``
  works); the paths it builds are mapped back — the working directory to
  ``${oc.env:PWD}``, ``HOME`` to ``${oc.env:HOME}``, anything else to the real path.
- ``cd`` stays in the sandbox: an absolute directory is its mirror there, a missing one is
  created there (``cd $HOME/verl``, ``cd /workspace/verl`` work and ``$(pwd)`` maps back).
- ``source FILE`` / ``. FILE`` of a file that is not in the sandbox reads the real file
  the path mirrors (a script's ``source $(dirname $0)/common.sh``); it runs under the
  same stubs.
- The positional arguments are empty, stdin is ``/dev/null``, and the run is killed after
  :data:`TIMEOUT_S` seconds.

Bash's own redirections still happen (``> log`` writes into the sandbox; an absolute
path outside it is written where it points).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

TIMEOUT_S = 30.0
"""Longest a launch script may run under the stubs."""

REAL_TOOLS = ("awk", "basename", "bc", "cat", "cut", "date", "dirname", "echo", "env", "expr",
              "false", "gawk", "grep", "egrep", "fgrep", "head", "ls", "mawk", "nproc",
              "paste", "printf", "readlink", "realpath", "sed", "seq", "sort", "tail", "test",
              "tr", "true", "uname", "uniq", "wc", "xargs", "bash")
"""Programs that only compute text (or start another shell): the real ones are used."""

RECORDED = ("python", "python3", "python3.8", "python3.9", "python3.10", "python3.11",
            "python3.12", "python3.13", "torchrun", "ray", "uv", "deepspeed", "accelerate",
            "srun", "mpirun", "nohup", "timeout", "numactl", "stdbuf", "taskset", "pip",
            "pip3", "huggingface-cli", "hf", "wandb", "git", "wget", "curl", "sleep", "rm",
            "cp", "mv", "ln", "touch", "chmod", "kill", "pkill", "ulimit")
"""Programs replaced by a stub that records its arguments, prints nothing and succeeds
(files, so that ``exec NAME`` finds them; every other unknown command is recorded by
``command_not_found_handle``)."""

STUB_GPUS = 8
"""GPUs ``nvidia-smi`` reports under the stubs (veRL's default ``n_gpus_per_node``)."""

BASH_SET = frozenset({
    "BASH", "BASHOPTS", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0",
    "BASH_CMDS", "BASH_COMMAND", "BASH_ENV", "BASH_LINENO", "BASH_REMATCH", "BASH_SOURCE",
    "BASH_SUBSHELL", "BASH_VERSINFO", "BASH_VERSION", "COLUMNS", "DIRSTACK", "EPOCHREALTIME",
    "EPOCHSECONDS", "EUID", "FUNCNAME", "GROUPS", "HISTCMD", "HOME", "HOSTNAME", "HOSTTYPE",
    "IFS", "LINENO", "LINES", "MACHTYPE", "OLDPWD", "OPTARG", "OPTERR", "OPTIND", "OSTYPE",
    "PATH", "PIPESTATUS", "PPID", "PS1", "PS2", "PS4", "PWD", "RANDOM", "REPLY", "SECONDS",
    "SHELL", "SHELLOPTS", "SHLVL", "SRANDOM", "UID", "TMPDIR",
})
"""Variables bash sets (or the sandbox sets) itself: never given a placeholder."""


class ScriptError(Exception):
    """The script could not be evaluated; the message is one line."""


@dataclass
class Evaluation:
    """What running a script under the stubs produced."""

    commands: list[list[str]]
    """Argument vectors of the stubbed commands, in the order they ran, with sandbox paths
    and variable placeholders mapped back (see the module docstring)."""
    status: int
    """The script's exit status."""
    last_error: str
    """The last line the script wrote to stderr that is not a ``set -x`` trace."""
    env_placeholders: list[str] = field(default_factory=list)
    """Variables read without being set, given a placeholder (→ ``${oc.env:NAME}``)."""
    env_defaults: list[str] = field(default_factory=list)
    """Variables read only through a default (``${NAME:-default}``): left unset."""


_REFERENCE = re.compile(r"\$(?:\{[#!]?([A-Za-z_]\w*)(:?[-=+?]?)|([A-Za-z_]\w*))")
_ASSIGNED = re.compile(
    r"(?:^|[\s;&|({`])(?:(?:export|local|readonly|declare|typeset)\s+(?:-\w+\s+)*)?"
    r"([A-Za-z_]\w*)(?:\[[^\]\n]*\])?\+?=")
_LOOP_OR_READ = re.compile(r"\b(?:for|select)\s+([A-Za-z_]\w*)\s+in\b"
                           r"|\bread\s+(?:-\w+\s+)*((?:[A-Za-z_]\w*[ \t]*)+)")


def _code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


def read_variables(text: str) -> tuple[list[str], list[str]]:
    """``(placeholders, defaulted)`` of the variables ``text`` reads from its environment:
    those read plainly but never set in the script (they get a placeholder), and those read
    through a default (``${NAME:-...}``, ``${NAME-...}``, ``${NAME:=...}``,
    ``${NAME:+...}``) before the script sets them (the default applies)."""
    lines = _code_lines(text)
    first_set: dict[str, int] = {}
    for number, line in enumerate(lines):
        names = [m.group(1) for m in _ASSIGNED.finditer(line)]
        for match in _LOOP_OR_READ.finditer(line):
            names += (match.group(1) or match.group(2) or "").split()
        for name in names:
            first_set.setdefault(name, number)
    plain: list[str] = []
    defaulted: list[str] = []
    for number, line in enumerate(lines):
        for match in _REFERENCE.finditer(line):
            name = match.group(1) or match.group(3)
            if name in BASH_SET:
                continue
            if (match.group(2) or "") not in ("", ":"):
                if number <= first_set.get(name, number) and name not in defaulted:
                    defaulted.append(name)
            elif name not in first_set and name not in plain:
                plain.append(name)
    return plain, [name for name in defaulted if name not in plain]


_NVIDIA_SMI = """#!{bash}
# stub: reports {gpus} GPUs
printf '%s\\0' "$(( $# + 1 ))" nvidia-smi "$@" >> "$__RFT_CONVERT_LOG"
for arg in "$@"; do
  case "$arg" in
    -L|--list-gpus) for i in $(seq 0 {last}); do echo "GPU $i: stub GPU (UUID: GPU-$i)"; done; exit 0;;
    --query-gpu=*) for i in $(seq 0 {last}); do echo "$i"; done; exit 0;;
  esac
done
exit 0
"""

_RECORDER = """#!{bash}
printf '%s\\0' "$(( $# + 1 ))" "${{0##*/}}" "$@" >> "$__RFT_CONVERT_LOG"
exit 0
"""

_MKDIR = """#!{bash}
# stub: creates directories inside the sandbox only
for arg in "$@"; do
  case "$arg" in -*) continue;; esac
  path=$({realpath} -m -- "$arg")
  case "$path/" in "$__RFT_CONVERT_ROOT"/*) {mkdir} -p -- "$path";; esac
done
exit 0
"""

_TEE = """#!{bash}
# stub: copies stdin to stdout, writes no file
exec {cat}
"""

_PRELUDE = """command_not_found_handle() {
  printf '%s\\0' "$#" "$@" >> "$__RFT_CONVERT_LOG"
  return 0
}
__rft_source() {
  local file="$1"
  shift
  if [ -n "$file" ] && [ ! -e "$file" ]; then
    local abs="$file"
    case "$file" in /*) ;; *) abs="$PWD/$file";; esac
    local real="${abs#"$__RFT_CONVERT_ROOT"}"
    if [ "$real" != "$abs" ] && [ -f "$real" ]; then file="$real"; fi
  fi
  # a machine's environment file that is not here (an accelerator toolkit's set_env.sh):
  # its variables cannot be known; the launch is read without them
  if [ -n "$file" ] && [ ! -e "$file" ] && [ -z "${file##/*}" ]; then return 0; fi
  builtin source "$file" "$@"
}
ulimit() { return 0; }
source() { __rft_source "$@"; }
.() { __rft_source "$@"; }
cd() {
  local options=() target
  while [ $# -gt 1 ]; do options+=("$1"); shift; done
  target="${1-$HOME}"
  case "$target" in
    -) builtin cd "${options[@]}" -; return;;
    /*) case "$target/" in "$__RFT_CONVERT_ROOT"/*) ;; *) target="$__RFT_CONVERT_ROOT$target";; esac;;
  esac
  [ -d "$target" ] || mkdir -p -- "$target"
  builtin cd "${options[@]}" -- "$target" || return
  case "$PWD/" in "$__RFT_CONVERT_ROOT"/*) ;; *) builtin cd "$__RFT_CONVERT_ROOT";; esac
}
export -f command_not_found_handle __rft_source source . cd ulimit
"""


def _bash() -> str:
    found = shutil.which("bash")
    if found is None:
        raise ScriptError("bash is needed to evaluate a launch script, and it is not on PATH")
    return found


def _make_sandbox(root: Path, bash: str) -> Path:
    """The stub directory (``PATH``) under ``root``."""
    bin_dir = root / ".rft-bin"
    bin_dir.mkdir()
    for tool in REAL_TOOLS:
        real = shutil.which(tool)
        if real is not None:
            (bin_dir / tool).symlink_to(real)
    (bin_dir / "sh").symlink_to(bash)
    recorder = bin_dir / ".recorder"
    recorder.write_text(_RECORDER.format(bash=bash))
    recorder.chmod(0o755)
    for name in RECORDED:
        (bin_dir / name).symlink_to(recorder)
    special = {
        "nvidia-smi": _NVIDIA_SMI.format(bash=bash, gpus=STUB_GPUS, last=STUB_GPUS - 1),
        "mkdir": _MKDIR.format(bash=bash, realpath=shutil.which("realpath") or "realpath",
                               mkdir=shutil.which("mkdir") or "mkdir"),
        "tee": _TEE.format(bash=bash, cat=shutil.which("cat") or "cat"),
    }
    for name, text in special.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return bin_dir


def _read_log(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    parts = path.read_bytes().decode("utf-8", "replace").split("\0")
    commands: list[list[str]] = []
    i = 0
    while i < len(parts) - 1:
        try:
            count = int(parts[i])
        except ValueError:  # a torn record: skip to the end
            break
        commands.append(parts[i + 1:i + 1 + count])
        i += 1 + count
    return commands


class _PathMap:
    """Maps sandbox paths and placeholders in recorded arguments back (module docstring):
    the working directory's mirror → ``${oc.env:PWD}``, the sandbox's ``HOME`` →
    ``${oc.env:HOME}``, any other path of the sandbox → the real path it mirrors, a
    variable's placeholder → ``${oc.env:NAME}``."""

    def __init__(self, root: Path, home: Path, cwd: Path, placeholders: dict[str, str]) -> None:
        end = r"(?=/|$|[^\w.\-])"
        pairs = [(str(cwd), "${oc.env:PWD}"), (str(home), "${oc.env:HOME}")]
        self.prefixes = [(re.compile(re.escape(prefix) + end), replacement)
                         for prefix, replacement in sorted(pairs, key=lambda p: -len(p[0]))]
        self.root = re.compile(re.escape(str(root)) + r"(?=(/?))" + end)
        self.placeholders = placeholders

    def __call__(self, text: str) -> str:
        for pattern, replacement in self.prefixes:
            text = pattern.sub(_constant(replacement), text)
        text = self.root.sub(lambda m: "" if m.group(1) else "/", text)
        for marker, name in self.placeholders.items():
            text = text.replace(marker, f"${{oc.env:{name}}}")
        return text


def evaluate_script(text: str, script_path: str | os.PathLike[str] | None = None,
                    timeout: float | None = None) -> Evaluation:
    """Run ``text`` with bash under the stubs; return the commands it ran.

    :param script_path: where the script lives (``$0`` and ``$(dirname $0)`` follow it);
        ``None``: a script in the current directory.
    :param timeout: seconds; ``None``: :data:`TIMEOUT_S`.
    :raises ScriptError: no bash, or the script ran past ``timeout`` (one line).
    """
    timeout = TIMEOUT_S if timeout is None else timeout
    bash = _bash()
    real_cwd = os.path.realpath(os.getcwd())
    if script_path is not None:
        real_script = os.path.realpath(os.fspath(script_path))
    else:
        real_script = os.path.join(real_cwd, "launch.sh")
    placeholders_for, defaulted = read_variables(text)
    nonce = secrets.token_hex(4)
    markers = {f"rftenv{nonce}{name}{nonce}x": name for name in placeholders_for}
    with tempfile.TemporaryDirectory(prefix="rft-convert-verl-") as tmp:
        root = Path(os.path.realpath(tmp)) / "root"
        root.mkdir()
        home = root / ".rft-home"
        home.mkdir()
        cwd = Path(str(root) + real_cwd)
        cwd.mkdir(parents=True, exist_ok=True)
        script = Path(str(root) + real_script)
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(text.replace("\r\n", "\n"), encoding="utf-8")
        bin_dir = _make_sandbox(Path(tmp), bash)
        prelude = Path(tmp) / "prelude.sh"
        prelude.write_text(_PRELUDE)
        log = Path(tmp) / "commands.log"
        scratch = Path(tmp) / "tmp"
        scratch.mkdir()
        env = {"HOME": str(home), "PATH": str(bin_dir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "TMPDIR": str(scratch), "BASH_ENV": str(prelude),
               "__RFT_CONVERT_LOG": str(log), "__RFT_CONVERT_ROOT": str(root)}
        env.update({name: marker for marker, name in markers.items()})
        try:
            process = subprocess.Popen(
                [bash, "--noprofile", "--norc", str(script)], cwd=cwd, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                start_new_session=True)
        except OSError as exc:
            raise ScriptError(f"cannot run bash: {exc.strerror}") from None
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise ScriptError(f"the script did not finish within {timeout:g} s under the "
                              "stubs (a loop waiting for something?)") from None
        mapping = _PathMap(root, home, cwd, markers)
        commands = [[mapping(arg) for arg in argv] for argv in _read_log(log)]
        errors = [line for line in stderr.decode("utf-8", "replace").splitlines()
                  if line.strip() and not line.startswith("+")]
        last_error = (mapping(errors[-1].replace(str(script), PurePosixPath(real_script).name))
                      if errors else "")
        last_error = re.sub(r"\$\{oc\.env:(\w+)\}", r"$\1", last_error)
    return Evaluation(commands, process.returncode, last_error, placeholders_for, defaulted)


__all__ = ["TIMEOUT_S", "Evaluation", "ScriptError", "evaluate_script", "read_variables"]


def _constant(replacement: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement function returning ``replacement`` as it is (no
    backslash or group processing, unlike a replacement string)."""
    return lambda _match: replacement
