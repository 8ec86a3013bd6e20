"""A dense toy reward for short runs of the tiny model: the share of vowels among a
response's letters. The random tiny model scores about 0.1–0.2 and learns to raise it
within a few GRPO steps, so a test can see a curve rise without a task it could solve."""

from __future__ import annotations

from typing import Any

from rft.hooks.markers import hookimpl

VOWELS = frozenset("aeiouAEIOU")


def vowel_reward(response: str, truth: Any = None) -> dict[str, float]:
    """``{"vowels": v / l}``: ``v`` vowels among the ``l`` letters of ``response``
    (0 without letters); ``truth`` is ignored."""
    letters = [c for c in response if c.isalpha()]
    return {"vowels": sum(c in VOWELS for c in letters) / len(letters) if letters else 0.0}


class VowelRewardPlugin:
    """Registers :func:`vowel_reward` as ``vowel_reward`` (pass an instance to
    ``PluginRegistry.create(extra_plugins=[...])``)."""

    @hookimpl
    def register_reward_fns(self) -> dict[str, Any]:
        return {"vowel_reward": vowel_reward}


__all__ = ["VOWELS", "VowelRewardPlugin", "vowel_reward"]
