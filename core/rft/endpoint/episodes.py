"""The serve endpoint's record of live responses: experience candidates, their rewards,
and the episodes a client releases to the buffer (``mode: serve``,
:mod:`rft.modes.serve`).

Every chat completion the endpoint answers in serve mode is :meth:`EpisodeLedger.record`-ed:
its choices as experiences (prompt and response tokens, the engine's log-probs, the model
version that sampled them) under the response's ``id`` (``chatcmpl-…``), in an *episode*
(the client's ``X-Rft-Episode-Id`` header; without it, an episode of its own whose id is
the response id). Then::

    POST /feedback  {"response_id": ID, "reward": R}          every choice of one response
                    {"response_id": ID, "rewards": [R0, R1]}  one reward per choice
                    {"episode_id": EP, "reward": R}           every response of the episode
    POST /commit    {"episode_id": EP}   (or {"response_id": ID}: that response's episode)

A commit hands the episode's experiences, each with its reward, to ``release`` (the
experience buffer's write) and answers only once that write is done, so a committed episode
is in the buffer. Each experience's ``eid`` is ``serve/<episode>/<n>`` (``n``: its place
in the episode; ``step``: its turn), so an episode is one group for group advantages
(GRPO: ask for ``n`` choices of one prompt and reward each); ``info["group_size"]`` is the
episode's size, so streaming batches (``synchronizer.streaming_batches``) train it whole.

Errors are one line each (:class:`~rft.endpoint.openai_protocol.BadRequest`): a body that
is not what the route takes ``400``; an id never seen (or long forgotten) ``404``; feedback
on, or a commit of, an episode already committed ``409``; a commit with a response still
without a reward ``409``; an id dropped by the cap ``410``.

Uncommitted responses are bounded (``max_pending``): recording one more drops the oldest
pending episode whole (all its responses, counted in :attr:`EpisodeLedger.dropped`).
Nothing uncommitted ever reaches ``release``, so nothing uncommitted is trained. The ids
of committed and dropped responses and episodes are remembered (up to ``4 × max_pending``
of each) to answer ``409`` / ``410`` rather than ``404``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from rft.buffer.streaming import GROUP_SIZE_INFO
from rft.endpoint.openai_protocol import BadRequest
from rft.experience import EID, Experience

EPISODE_HEADER = "x-rft-episode-id"
"""Request header naming the episode a chat completion belongs to (answered back, with
``x-rft-response-id`` and ``x-rft-model-version``)."""

SERVE_BATCH = "serve"
"""``eid.batch`` of every served experience."""

Release = Callable[[list[Experience]], None]
"""Where committed experiences go (the experience buffer's write); raising keeps the
episode pending."""


@dataclass
class _Response:
    """One recorded response: its choices' experiences and their rewards."""

    episode: str
    experiences: list[Experience]
    rewards: list[float | None]


@dataclass
class _Episode:
    responses: list[str] = field(default_factory=list)


class EpisodeLedger:
    """Pending responses and episodes of the serve endpoint (see the module docstring).

    :param release: writes committed experiences (the experience buffer).
    :param max_pending: most uncommitted responses kept; the oldest episode goes beyond.
    """

    def __init__(self, release: Release, *, max_pending: int) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.release = release
        self.max_pending = max_pending
        self._responses: OrderedDict[str, _Response] = OrderedDict()
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()
        self._gone: OrderedDict[str, str] = OrderedDict()  # id -> "committed" / "dropped"
        self._lock = threading.Lock()
        self.recorded = 0
        """Responses recorded."""
        self.committed_episodes = 0
        self.committed_experiences = 0
        self.dropped = 0
        """Uncommitted responses dropped by the cap."""

    # ---- recording ----------------------------------------------------------------------

    def record(self, response_id: str, episode_id: str | None,
               experiences: Sequence[Experience]) -> str:
        """Keep a response's experiences (one per choice) pending; return its episode id.

        :raises BadRequest: ``409`` when the episode was already committed, ``410`` when it
            was dropped (its turns are gone), ``400`` for an unusable episode id.
        """
        if episode_id is not None and not 0 < len(episode_id) <= 200:
            raise BadRequest("header X-Rft-Episode-Id: must be 1 to 200 characters",
                             EPISODE_HEADER)
        episode = episode_id or response_id
        with self._lock:
            self._check_not_gone(episode, "episode", EPISODE_HEADER)
            self._responses[response_id] = _Response(episode, list(experiences),
                                                     [None] * len(experiences))
            self._episodes.setdefault(episode, _Episode()).responses.append(response_id)
            self.recorded += 1
            while len(self._responses) > self.max_pending:
                oldest = self._responses[next(iter(self._responses))].episode
                self._forget_episode(oldest, "dropped")
        return episode

    @property
    def pending(self) -> int:
        """Uncommitted responses held."""
        with self._lock:
            return len(self._responses)

    def counters(self) -> dict[str, float]:
        """``serve/*`` metrics: recorded, pending, committed, dropped."""
        with self._lock:
            return {"serve/responses_recorded": float(self.recorded),
                    "serve/responses_pending": float(len(self._responses)),
                    "serve/episodes_committed": float(self.committed_episodes),
                    "serve/experiences_committed": float(self.committed_experiences),
                    "serve/responses_dropped": float(self.dropped)}

    # ---- routes -------------------------------------------------------------------------

    def feedback(self, body: Any) -> dict[str, Any]:
        """``POST /feedback``: rewards onto a pending response or episode."""
        fields = _fields(body, "feedback", ("response_id", "episode_id", "reward", "rewards"))
        with self._lock:
            if "episode_id" in fields:
                if "response_id" in fields or "rewards" in fields:
                    raise BadRequest("feedback: give episode_id with one reward, or "
                                     "response_id with reward / rewards", "episode_id")
                episode = self._episode(_id(fields, "episode_id"))
                reward = _reward(fields.get("reward"), "reward")
                for response_id in episode.responses:
                    response = self._responses[response_id]
                    response.rewards = [reward] * len(response.rewards)
                return {"episode_id": fields["episode_id"], "responses": len(episode.responses)}
            response_id = _id(fields, "response_id")
            response = self._response(response_id)
            if ("reward" in fields) == ("rewards" in fields):
                raise BadRequest("feedback: give one of reward (every choice) or rewards (one "
                                 "per choice)", "reward")
            if "reward" in fields:
                response.rewards = [_reward(fields["reward"], "reward")] * len(response.rewards)
            else:
                rewards = fields["rewards"]
                if not isinstance(rewards, list) or len(rewards) != len(response.rewards):
                    raise BadRequest(f"rewards: must be a list of {len(response.rewards)} "
                                     f"number(s), one per choice of {response_id}", "rewards")
                response.rewards = [_reward(r, f"rewards[{i}]") for i, r in enumerate(rewards)]
            return {"response_id": response_id, "episode_id": response.episode}

    def commit(self, body: Any) -> dict[str, Any]:
        """``POST /commit``: the episode's experiences, rewarded, to ``release``."""
        fields = _fields(body, "commit", ("episode_id", "response_id"))
        with self._lock:
            if ("episode_id" in fields) == ("response_id" in fields):
                raise BadRequest("commit: give one of episode_id or response_id", "episode_id")
            if "response_id" in fields:
                episode_id = self._response(_id(fields, "response_id")).episode
            else:
                episode_id = _id(fields, "episode_id")
            episode = self._episode(episode_id)
            experiences: list[Experience] = []
            for turn, response_id in enumerate(episode.responses):
                response = self._responses[response_id]
                rewards = [r for r in response.rewards if r is not None]
                if len(rewards) < len(response.rewards):
                    raise BadRequest(f"commit: response {response_id} of episode {episode_id} "
                                     "has no reward yet (POST /feedback first)", "episode_id",
                                     status=HTTPStatus.CONFLICT)
                for experience, reward in zip(response.experiences, rewards, strict=True):
                    experiences.append(_labelled(experience, reward, episode_id, response_id,
                                                 len(experiences), turn))
            for experience in experiences:  # the episode is one group of all of them
                experience.info[GROUP_SIZE_INFO] = len(experiences)
            try:
                self.release(experiences)
            except Exception as exc:  # noqa: BLE001 - the client is told; nothing is lost
                raise BadRequest(f"commit: the experience buffer did not take episode "
                                 f"{episode_id} ({type(exc).__name__}: {exc}); it stays "
                                 "pending, commit it again", "episode_id",
                                 status=HTTPStatus.SERVICE_UNAVAILABLE) from exc
            self._forget_episode(episode_id, "committed")
            self.committed_episodes += 1
            self.committed_experiences += len(experiences)
            return {"episode_id": episode_id, "responses": len(episode.responses),
                    "experiences": len(experiences)}

    # ---- bookkeeping (the caller holds the lock) ----------------------------------------

    def _forget_episode(self, episode_id: str, why: str) -> None:
        episode = self._episodes.pop(episode_id)
        for response_id in episode.responses:
            self._responses.pop(response_id, None)
            self._remember(response_id, why)
        self._remember(episode_id, why)
        if why == "dropped":
            self.dropped += len(episode.responses)

    def _remember(self, key: str, why: str) -> None:
        self._gone[key] = why
        self._gone.move_to_end(key)
        while len(self._gone) > 8 * self.max_pending:  # ids of responses and episodes
            self._gone.popitem(last=False)

    def _check_not_gone(self, key: str, kind: str, param: str) -> None:
        why = self._gone.get(key)
        if why == "committed":
            raise BadRequest(f"{kind} {key} is already committed", param,
                             status=HTTPStatus.CONFLICT)
        if why == "dropped":
            raise BadRequest(f"{kind} {key} was dropped uncommitted (over "
                             f"explorer.serve_max_pending={self.max_pending} pending responses)",
                             param, status=HTTPStatus.GONE)

    def _response(self, response_id: str) -> _Response:
        response = self._responses.get(response_id)
        if response is None:
            self._check_not_gone(response_id, "response", "response_id")
            raise BadRequest(f"response_id: no pending response {response_id}", "response_id",
                             status=HTTPStatus.NOT_FOUND)
        return response

    def _episode(self, episode_id: str) -> _Episode:
        episode = self._episodes.get(episode_id)
        if episode is None:
            self._check_not_gone(episode_id, "episode", "episode_id")
            raise BadRequest(f"episode_id: no pending episode {episode_id}", "episode_id",
                             status=HTTPStatus.NOT_FOUND)
        return episode


def _labelled(experience: Experience, reward: float, episode: str, response_id: str,
              index: int, turn: int) -> Experience:
    """A copy of ``experience`` with its reward and its serve ``eid`` / ``info``."""
    return dataclasses.replace(
        experience, reward=reward, eid=EID(batch=SERVE_BATCH, task=episode, run=index, step=turn),
        info={**experience.info, "response_id": response_id, "episode_id": episode})


def _fields(body: Any, route: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest(f"{route}: the body must be a JSON object with "
                         f"{' / '.join(allowed)}")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise BadRequest(f"{route}: unknown field {unknown[0]!r} (takes "
                         f"{', '.join(allowed)})", unknown[0])
    return body


def _id(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{key}: must be a non-empty string, got {value!r:.60}", key)
    return value


def _reward(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise BadRequest(f"{key}: must be a finite number, got {value!r:.60}", key)
    return float(value)


__all__ = ["EPISODE_HEADER", "SERVE_BATCH", "EpisodeLedger", "Release"]
