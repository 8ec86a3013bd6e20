"""The built-in action parsers: reply → action, ``None`` when the reply holds none."""

from __future__ import annotations

import pytest

from rft.builtin.action_parsers import ACTION_PARSERS
from rft.plugin_kinds import ACTION_PARSER
from rft.plugins import PluginRegistry


@pytest.mark.parametrize("name, reply, action", [
    ("raw", "  go north \n", "go north"),
    ("raw", "   ", None),
    ("last_code_block", "I think ```Left``` no, ```Down```", "Down"),
    ("last_code_block", "```text\nopen door\n```", "open door"),
    ("last_code_block", "```\nUp\n```", "Up"),
    ("last_code_block", "```go to kitchen```", "go to kitchen"),
    ("last_code_block", "Right", None),
    ("last_code_block", "``` ```", None),
    ("action_tag", "<think>hm</think><action> take key </action>", "take key"),
    ("action_tag", "<action>a</action> then <ACTION>b</ACTION>", "b"),
    ("action_tag", "take key", None),
    ("last_line", "I will move.\n\nmove west\n\n", "move west"),
    ("last_line", "\n \n", None),
])
def test_builtin_parsers(name, reply, action):
    assert ACTION_PARSERS[name](reply) == action


def test_they_are_registered_by_the_core():
    registry = PluginRegistry.create(kinds=[ACTION_PARSER])
    assert registry.names(ACTION_PARSER) == sorted(ACTION_PARSERS)
    for name, parser in ACTION_PARSERS.items():
        registration = registry.registration(ACTION_PARSER, name)
        assert registration.implementation is parser
        assert registration.distribution == "rft-framework"
