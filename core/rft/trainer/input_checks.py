"""The trainer's checks of a batch of experiences, batched (issue #23).

:func:`check_experiences` raises a one-line :class:`~rft.errors.RftError` naming the first
malformed experience (``experience <i> (eid <uid>)``) and what is wrong with it. It costs
no tensor operation per experience: shapes are compared as Python tuples, each field's
values are concatenated once and tested for NaN / inf in one call, the token ids once
against the vocabulary; the culprit is looked for only when a batched test fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rft.errors import RftError
from rft.experience import Experience


def where(index: int, experience: Experience) -> str:
    """How a message names an experience: ``experience <index> (eid <uid>)``."""
    return f"experience {index} (eid {experience.eid.uid})"


def check_experiences(experiences: Sequence[Experience], fields: Sequence[str], *,
                      rollout: bool, vocab_size: int | None) -> None:
    """Check a training batch; raise for the first experience (in batch order) that fails.

    - every tensor of ``fields`` that is set is 1-D with one value per response token;
    - a scalar ``reward`` is finite; rollouts (``rollout``) have a reward, a token-level
      reward or advantages;
    - float values of ``fields`` contain no NaN / inf;
    - token ids lie in ``[0, vocab_size)`` (when ``vocab_size`` is known).

    Shape and reward problems are reported for the lowest row that has one (and, within a
    row, in the order above and of ``fields``), then NaN / inf, then token ids.
    """
    response_lengths = [e.tokens.numel() - e.prompt_length for e in experiences]
    problems: list[tuple[int, int, str]] = []  # (row, order within the row, message)
    present: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for order, name in enumerate(fields):
        values = [(i, v) for i, e in enumerate(experiences)
                  if (v := getattr(e, name)) is not None]
        present[name] = values
        bad = next(((i, v) for i, v in values if v.shape != (response_lengths[i],)), None)
        if bad is not None:
            i, v = bad
            problems.append((i, order, (f"{name} has shape {tuple(v.shape)} but the "
                                        f"response has {response_lengths[i]} tokens")))
    bad_reward = next((i for i, e in enumerate(experiences)
                       if e.reward is not None and not math.isfinite(float(e.reward))), None)
    if bad_reward is not None:
        problems.append((bad_reward, len(fields),
                         f"reward is {experiences[bad_reward].reward}"))
    if rollout:
        rewardless = next((i for i, e in enumerate(experiences)
                           if e.reward is None and e.token_level_reward is None
                           and e.advantages is None), None)
        if rewardless is not None:
            problems.append((rewardless, len(fields) + 1, ("has no reward (reward, "
                             "token_level_reward or advantages must be set)")))
    if problems:
        i, _, message = min(problems)
        raise RftError(f"{where(i, experiences[i])}: {message}")
    _check_finite(experiences, fields, present)
    _check_vocabulary(experiences, vocab_size)


def _check_finite(experiences: Sequence[Experience], fields: Sequence[str],
                  present: dict[str, list[tuple[int, torch.Tensor]]]) -> None:
    """No NaN / inf in the float values of any field (one concatenation per field)."""
    culprits: list[tuple[int, int, str]] = []
    for order, name in enumerate(fields):
        values = present[name]
        if not values:
            continue
        joined = torch.cat([v for _, v in values])  # (Σ R,) promoted to a common dtype
        if not joined.is_floating_point() or bool(torch.isfinite(joined).all()):
            continue
        i = next(i for i, v in values if v.is_floating_point() and not torch.isfinite(v).all())
        culprits.append((i, order, name))
    if culprits:
        i, _, name = min(culprits)
        raise RftError(f"{where(i, experiences[i])}: {name} contains NaN or inf")


def _check_vocabulary(experiences: Sequence[Experience], vocab_size: int | None) -> None:
    """Token ids within ``[0, vocab_size)`` (one concatenation of the batch's tokens)."""
    if vocab_size is None or not experiences:
        return
    tokens = torch.cat([e.tokens for e in experiences])  # (Σ L,)
    if not tokens.numel() or (int(tokens.min()) >= 0 and int(tokens.max()) < vocab_size):
        return
    for i, e in enumerate(experiences):
        outside = e.tokens[(e.tokens < 0) | (e.tokens >= vocab_size)]
        if outside.numel():
            raise RftError(f"{where(i, e)}: token id {int(outside[0])} is outside the "
                           f"model's vocabulary (size {vocab_size})")


__all__ = ["check_experiences", "where"]
