"""The serve endpoint's ledger (:mod:`rft.endpoint.episodes`): recording, feedback, commit,
the cap, and every refusal as one line with its status — no model needed."""

from __future__ import annotations

from http import HTTPStatus

import pytest
import torch

from rft.endpoint.episodes import EpisodeLedger
from rft.endpoint.openai_protocol import BadRequest
from rft.experience import Experience


def candidate(version: int = 0) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2,
                      logprobs=torch.tensor([-0.5, -0.25]), model_version=version)


class Sink:
    """The buffer's write: what was released, in order."""

    def __init__(self) -> None:
        self.released: list[Experience] = []
        self.fail = False

    def __call__(self, experiences: list[Experience]) -> None:
        if self.fail:
            raise OSError("disk full")
        self.released.extend(experiences)


def refused(call, status: HTTPStatus) -> str:
    with pytest.raises(BadRequest) as caught:
        call()
    assert caught.value.status == status
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_feedback_then_commit_releases_rewarded_labelled_experiences():
    sink = Sink()
    ledger = EpisodeLedger(sink, max_pending=8)
    assert ledger.record("r1", "ep", [candidate(3), candidate(3)]) == "ep"
    assert ledger.record("r2", "ep", [candidate(4)]) == "ep"
    assert ledger.record("r3", None, [candidate()]) == "r3"  # its own episode
    ledger.feedback({"response_id": "r1", "rewards": [1.0, 0.0]})
    ledger.feedback({"response_id": "r2", "reward": 0.5})
    assert sink.released == []  # nothing before the commit
    assert ledger.commit({"episode_id": "ep"}) == {"episode_id": "ep", "responses": 2,
                                                    "experiences": 3}
    assert [e.reward for e in sink.released] == [1.0, 0.0, 0.5]
    assert [(e.eid.batch, e.eid.task, e.eid.run, e.eid.step) for e in sink.released] == [
        ("serve", "ep", 0, 0), ("serve", "ep", 1, 0), ("serve", "ep", 2, 1)]
    assert [e.info["response_id"] for e in sink.released] == ["r1", "r1", "r2"]
    assert [e.model_version for e in sink.released] == [3, 3, 4]
    assert len({e.eid.group for e in sink.released}) == 1  # one group for GRPO
    ledger.feedback({"episode_id": "r3", "reward": 1})
    ledger.commit({"response_id": "r3"})
    assert ledger.counters() == {"serve/responses_recorded": 3.0, "serve/responses_pending": 0.0,
                                 "serve/episodes_committed": 2.0,
                                 "serve/experiences_committed": 4.0,
                                 "serve/responses_dropped": 0.0}


def test_unknown_double_commit_and_late_feedback_are_refused():
    sink = Sink()
    ledger = EpisodeLedger(sink, max_pending=8)
    ledger.record("r1", None, [candidate()])
    assert "no pending response nope" in refused(
        lambda: ledger.feedback({"response_id": "nope", "reward": 1}), HTTPStatus.NOT_FOUND)
    refused(lambda: ledger.commit({"episode_id": "nope"}), HTTPStatus.NOT_FOUND)
    assert "has no reward yet" in refused(lambda: ledger.commit({"episode_id": "r1"}),
                                          HTTPStatus.CONFLICT)
    ledger.feedback({"response_id": "r1", "reward": 1})
    ledger.commit({"episode_id": "r1"})
    assert "already committed" in refused(lambda: ledger.commit({"episode_id": "r1"}),
                                          HTTPStatus.CONFLICT)
    refused(lambda: ledger.feedback({"response_id": "r1", "reward": 0}), HTTPStatus.CONFLICT)
    refused(lambda: ledger.record("r9", "r1", [candidate()]), HTTPStatus.CONFLICT)
    assert len(sink.released) == 1


@pytest.mark.parametrize("body, culprit", [
    ([1, 2], "JSON object"),
    ({"response_id": "r1", "reward": 1, "extra": 2}, "unknown field 'extra'"),
    ({"response_id": "r1", "reward": "high"}, "reward: must be a finite number"),
    ({"response_id": "r1", "reward": float("nan")}, "reward: must be a finite number"),
    ({"response_id": "r1", "reward": True}, "reward: must be a finite number"),
    ({"response_id": "r1"}, "give one of reward"),
    ({"response_id": "r1", "rewards": [1, 2, 3]}, "rewards: must be a list of 1"),
    ({"response_id": 7, "reward": 1}, "response_id: must be a non-empty string"),
    ({"episode_id": "r1", "response_id": "r1", "reward": 1}, "give episode_id with one reward"),
])
def test_garbage_feedback_is_one_400_line(body, culprit):
    ledger = EpisodeLedger(Sink(), max_pending=8)
    ledger.record("r1", None, [candidate()])
    assert culprit in refused(lambda: ledger.feedback(body), HTTPStatus.BAD_REQUEST)
    assert ledger.pending == 1


def test_cap_drops_the_oldest_episode_whole_and_counts_it():
    sink = Sink()
    ledger = EpisodeLedger(sink, max_pending=3)
    ledger.record("a1", "A", [candidate()])
    ledger.record("b1", "B", [candidate()])
    ledger.record("a2", "A", [candidate()])
    ledger.record("c1", "C", [candidate()])  # 4 > 3: episode A (2 responses) goes
    assert ledger.pending == 2 and ledger.dropped == 2
    assert "dropped uncommitted" in refused(
        lambda: ledger.feedback({"response_id": "a2", "reward": 1}), HTTPStatus.GONE)
    refused(lambda: ledger.commit({"episode_id": "A"}), HTTPStatus.GONE)
    ledger.feedback({"episode_id": "B", "reward": 1})
    ledger.commit({"episode_id": "B"})
    assert [e.info["episode_id"] for e in sink.released] == ["B"]  # never the dropped


def test_a_failed_buffer_write_keeps_the_episode_pending():
    sink = Sink()
    ledger = EpisodeLedger(sink, max_pending=4)
    ledger.record("r1", None, [candidate()])
    ledger.feedback({"response_id": "r1", "reward": 1})
    sink.fail = True
    assert "did not take episode r1 (OSError: disk full)" in refused(
        lambda: ledger.commit({"episode_id": "r1"}), HTTPStatus.SERVICE_UNAVAILABLE)
    sink.fail = False
    ledger.commit({"episode_id": "r1"})
    assert len(sink.released) == 1 and ledger.committed_episodes == 1


def test_engine_gate_update_waits_for_calls_and_holds_new_ones_back():
    """A weight update starts once the engine calls in flight end; a call arriving while
    it waits goes after it (no response mixes two versions; updates are not starved)."""
    import threading

    from rft.endpoint.engine_gate import EngineGate

    gate, order = EngineGate(), []
    release_call, release_update = threading.Event(), threading.Event()

    def call(name: str, hold: threading.Event | None = None) -> None:
        with gate.calling():
            order.append(f"{name} in")
            if hold is not None:
                hold.wait(10)
            order.append(f"{name} out")

    def update() -> None:
        with gate.updating():
            order.append("update in")
            release_update.wait(10)
            order.append("update out")

    first = threading.Thread(target=call, args=("call1", release_call))
    first.start()
    while order != ["call1 in"]:
        threading.Event().wait(0.01)
    updater = threading.Thread(target=update)
    updater.start()
    threading.Event().wait(0.2)
    late = threading.Thread(target=call, args=("call2",))
    late.start()
    threading.Event().wait(0.2)
    assert order == ["call1 in"]  # the update waits for call1; call2 waits for the update
    release_call.set()
    first.join(10)
    while "update in" not in order:
        threading.Event().wait(0.01)
    threading.Event().wait(0.2)
    assert order == ["call1 in", "call1 out", "update in"]
    release_update.set()
    for thread in (updater, late):
        thread.join(10)
    assert order == ["call1 in", "call1 out", "update in", "update out", "call2 in",
                     "call2 out"]
