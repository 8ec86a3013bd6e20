"""Exceptions of rft.

Every error a user can cause derives from :class:`RftError`. Its ``str()`` is one line
that names the culprit (a dotted config key, a plugin, a file and row); the CLI prints
that line alone, without a traceback, unless ``--debug`` is given.
"""

from __future__ import annotations


class RftError(Exception):
    """Base class of user-facing errors: the message is one line naming the culprit."""


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of ``exc`` (``Type`` alone for an empty
    message): how a caught error is named inside one-line messages."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def ray_error_line(exc: BaseException) -> str:
    """The line of a Ray-wrapped exception (its text holds the remote traceback) that says
    what went wrong: the traceback's last line, else the first non-blank line, else the
    exception's type."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback" in text and lines:
        return lines[-1]
    return lines[0] if lines else type(exc).__name__


class PluginError(RftError):
    """A plugin misbehaved: bad hook return value, failing import, duplicate names."""


class UnknownNameError(RftError):
    """A name given in a config is not registered for its kind."""

    def __init__(self, kind: str, name: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name


class DuplicateNameError(PluginError):
    """Two plugins registered the same name for the same kind."""


class ConfigError(RftError):
    """A config has one or more problems; each is a line ``dotted.key: what is wrong``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ServerUnavailableError(RftError):
    """A server the run depends on (an external model's API) cannot be reached, or refuses
    every request (its key, its model). Every later call would fail the same way, so the
    workflow runner stops the batch (:attr:`fatal`) instead of failing task after task; what
    finished before is kept (``bench`` writes each task's result as it finishes)."""

    fatal = True
    """Read by :func:`rft.rollout.runner.is_fatal`."""


class EngineFailedError(RftError):
    """The rollout engine failed inside a step (an exception from the inference library
    itself, not from one request): its state is lost, so every call in flight fails with
    this error and every later one at once. Fatal (:attr:`fatal`): the workflow runner
    stops the batch instead of retrying task after task against a broken engine, and the
    run ends with this one line; what was written before is kept."""

    fatal = True
    """Read by :func:`rft.rollout.runner.is_fatal`."""
