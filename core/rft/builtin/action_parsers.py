"""Built-in action parsers (``register_action_parsers``): a model's reply → the action an
environment steps with, ``None`` when the reply holds none.

* ``raw`` — the whole reply, stripped (``None`` when empty).
* ``last_code_block`` — the content of the reply's last ```` ```…``` ```` block (a language
  tag on the opening line, as in ```` ```text ````, is dropped), stripped.
* ``action_tag`` — the content of the last ``<action>…</action>``, stripped.
* ``last_line`` — the last non-blank line, stripped.
"""

from __future__ import annotations

import re

from rft.environment import ActionParser
from rft.hookspecs import hookimpl

_CODE_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def _nonempty(text: str) -> str | None:
    text = text.strip()
    return text or None


def raw_action(reply: str) -> str | None:
    """The reply itself, stripped."""
    return _nonempty(reply)


def last_code_block_action(reply: str) -> str | None:
    """The last ```` ```…``` ```` block's content; a one-word first line followed by more
    lines is a language tag and dropped."""
    blocks = _CODE_BLOCK.findall(reply)
    if not blocks:
        return None
    block: str = blocks[-1]
    first, newline, rest = block.partition("\n")
    if newline and rest.strip() and re.fullmatch(r"[A-Za-z0-9_+-]+", first.strip()):
        block = rest
    return _nonempty(block)


def action_tag_action(reply: str) -> str | None:
    """The last ``<action>…</action>``'s content."""
    tags = _ACTION_TAG.findall(reply)
    return _nonempty(tags[-1]) if tags else None


def last_line_action(reply: str) -> str | None:
    """The last non-blank line."""
    lines = [line for line in reply.splitlines() if line.strip()]
    return _nonempty(lines[-1]) if lines else None


ACTION_PARSERS: dict[str, ActionParser] = {
    "raw": raw_action,
    "last_code_block": last_code_block_action,
    "action_tag": action_tag_action,
    "last_line": last_line_action,
}
"""The built-in parsers by name."""


@hookimpl
def register_action_parsers() -> dict[str, ActionParser]:
    return dict(ACTION_PARSERS)


__all__ = ["ACTION_PARSERS", "action_tag_action", "last_code_block_action",
           "last_line_action", "raw_action"]
