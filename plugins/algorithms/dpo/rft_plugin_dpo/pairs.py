"""DPO's batch layout: preference pairs as consecutive (chosen, rejected) rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rft.errors import RftError
from rft.experience import Experience


@dataclass(frozen=True)
class PreferencePairs:
    """Rows ``2k`` / ``2k + 1`` of a batch are the chosen / rejected response of pair
    ``k`` (a :class:`rft.algorithm.BatchLayout` with ``unit_size = 2``).

    Experiences whose ``eid.suffix`` is ``chosen`` / ``rejected`` are paired by
    ``(batch, task, run)``; without those suffixes the batch is taken as already
    alternating.
    """

    unit_size: int = 2
    """A pair is two rows."""

    def arrange(self, experiences: Sequence[Experience]) -> list[Experience]:
        """Each pair's chosen row, then its rejected row, pairs in order of appearance."""
        if not all(e.eid.suffix in ("chosen", "rejected") for e in experiences):
            if len(experiences) % 2:
                raise RftError(f"trainer: a dpo batch needs (chosen, rejected) pairs, got "
                               f"{len(experiences)} experiences")
            return list(experiences)
        pairs: dict[tuple[Any, Any, int], dict[str, Experience]] = {}
        for e in experiences:
            pair = pairs.setdefault((e.eid.batch, e.eid.task, e.eid.run), {})
            if e.eid.suffix in pair:
                raise RftError(f"experience {e.eid.uid}: two {e.eid.suffix!r} responses in one "
                               "preference pair")
            pair[e.eid.suffix] = e
        ordered: list[Experience] = []
        for key, pair in pairs.items():
            if len(pair) != 2:
                raise RftError(f"experience {'/'.join(map(str, key))}: preference pair lacks "
                               f"its {'rejected' if 'chosen' in pair else 'chosen'} response")
            ordered += [pair["chosen"], pair["rejected"]]
        return ordered
