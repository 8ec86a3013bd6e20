"""``wait_for_ranks`` names the rank that died, not the live rank whose collective failed
because of it (real Ray actors; the death is a real process exit)."""

from __future__ import annotations

import os
import time
from typing import Any, NoReturn

import pytest
from rft.errors import RftError, ray_error_line
from rft.trainer.rank_waits import wait_for_ranks


@pytest.fixture(scope="module")
def rank_actors() -> Any:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             namespace="rft-rank-waits", runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})

    @ray.remote(num_cpus=0, max_restarts=0)
    class Rank:
        def pid(self) -> int:
            return os.getpid()

        def act(self, outcome: str, after_s: float) -> str:
            time.sleep(after_s)
            if outcome == "raise":
                raise RuntimeError("Read error [127.0.0.1]:36506: Connection reset by peer")
            if outcome == "die":
                os._exit(9)
            return outcome

    yield Rank
    ray.shutdown()


def wait_on(rank_cls: Any, outcomes: list[tuple[str, float]]) -> tuple[str, list[int]]:
    """The failure line of one call per fresh rank actor, and the ranks' pids."""
    import ray

    ranks = [rank_cls.remote() for _ in outcomes]
    pids = ray.get([rank.pid.remote() for rank in ranks])
    refs = [rank.act.remote(outcome, after) for rank, (outcome, after) in zip(ranks, outcomes)]

    def on(rank: int) -> str:
        return f" (pid {pids[rank]})"

    def fail(message: str) -> NoReturn:
        for rank in ranks:
            ray.kill(rank)
        raise RftError(message)

    with pytest.raises(RftError) as caught:
        wait_for_ranks(refs, "train step 3", on, fail)
    return str(caught.value), pids


def test_a_rank_that_dies_after_its_peer_raised_is_the_one_named(rank_actors: Any) -> None:
    message, pids = wait_on(rank_actors, [("raise", 0.0), ("die", 0.5)])
    assert message.startswith(f"trainer rank 1 of 2 (pid {pids[1]}) died during train step 3: ")
    assert "\n" not in message


def test_a_raising_rank_is_named_with_its_error_when_no_peer_died(rank_actors: Any) -> None:
    message, pids = wait_on(rank_actors, [("raise", 0.0), ("done", 0.5)])
    assert message == (f"trainer rank 0 of 2 (pid {pids[0]}), train step 3: "
                       "Read error [127.0.0.1]:36506: Connection reset by peer")


def test_ray_error_line_takes_a_tracebacks_last_line() -> None:
    traceback = "Traceback (most recent call last):\n  x\nValueError: bad"
    assert ray_error_line(RuntimeError(traceback)) == "ValueError: bad"
    assert ray_error_line(RuntimeError("\n  one\ntwo")) == "one"
    assert ray_error_line(RuntimeError("")) == "RuntimeError"


def test_the_ranks_still_running_after_the_grace_are_listed(rank_actors: Any,
                                                            monkeypatch: Any) -> None:
    import rft.trainer.rank_waits as rank_waits

    monkeypatch.setattr(rank_waits, "DEAD_PEER_GRACE", 1.0)
    message, pids = wait_on(rank_actors, [("done", 30.0), ("raise", 0.0), ("done", 0.2)])
    assert message == (f"trainer rank 1 of 3 (pid {pids[1]}), train step 3: Read error "
                       "[127.0.0.1]:36506: Connection reset by peer (rank 0 had not finished)")
