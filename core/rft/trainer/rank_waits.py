"""Waiting for one call per rank, and naming the rank that failed.

Used by the native trainer's ranks (:mod:`rft.trainer.ranks`) and by the veRL plugin's
worker group: both run one Ray call per rank and must end with one line naming the
culprit when a rank fails.

A rank that dies (killed, out of memory, node lost) makes a collective fail on the live
ranks too (gloo's "Connection reset by peer", NCCL's "remote process exited"); Ray may
report the live rank's error first. So when a rank's call raises, the ranks still running
get :data:`DEAD_PEER_GRACE` seconds, and a rank found dead in that time is the one named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from rft.errors import ray_error_line

DEAD_PEER_GRACE = 5.0
"""Seconds the other ranks are waited for after one raised, to find a rank that died (whose
death made the collective fail there)."""


def wait_for_ranks(refs: list[Any], what: str, on: Callable[[int], str],
                   fail: Callable[[str], NoReturn]) -> list[Any]:
    """Results of one call per rank (``refs[i]`` on rank ``i``), in rank order.

    The first failure calls ``fail`` with one line: ``trainer rank R of N<on(R)> died
    during <what>: …`` for a rank whose process ended, else ``trainer rank R of N<on(R)>,
    <what>: <its error>`` (with the ranks that had not finished) when no rank was found
    dead within :data:`DEAD_PEER_GRACE` seconds. ``fail`` stops the ranks and raises.
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    world = len(refs)
    pending = {ref: rank for rank, ref in enumerate(refs)}
    results: list[Any] = [None] * world
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        for ref in ready:
            rank = pending.pop(ref)
            try:
                results[rank] = ray.get(ref)
            except RayActorError as exc:
                fail(f"trainer rank {rank} of {world}{on(rank)} died during {what}: "
                     f"{ray_error_line(exc)}")
            except RayTaskError as exc:
                cause = exc.cause if exc.cause is not None else exc
                dead, running = _dead_rank(pending)  # its death may be why this one raised
                if dead is not None:
                    dead_rank, death = dead
                    fail(f"trainer rank {dead_rank} of {world}{on(dead_rank)} died during "
                         f"{what}: {ray_error_line(death)}")
                also = ""
                if running:
                    also = (f" (rank{'s' if len(running) > 1 else ''} "
                            f"{', '.join(map(str, running))} had not finished)")
                fail(f"trainer rank {rank} of {world}{on(rank)}, {what}: "
                     f"{ray_error_line(cause)}{also}")
    return results


def _dead_rank(pending: dict[Any, int]
               ) -> tuple[tuple[int, BaseException] | None, list[int]]:
    """The first of the ``pending`` ranks found dead within :data:`DEAD_PEER_GRACE`
    seconds, with Ray's error (``None`` when each finished or raised while alive), and the
    ranks still running then."""
    import ray
    from ray.exceptions import RayActorError

    if not pending:
        return None, []
    ready, running = ray.wait(list(pending), num_returns=len(pending),
                              timeout=DEAD_PEER_GRACE)
    dead: tuple[int, BaseException] | None = None
    for ref in sorted(ready, key=lambda r: pending[r]):
        try:
            ray.get(ref)
        except RayActorError as exc:
            dead = dead or (pending[ref], exc)
        except Exception:  # noqa: BLE001 (a raising live rank: the first one is reported)
            pass
    return dead, sorted(pending[ref] for ref in running)


__all__ = ["DEAD_PEER_GRACE", "wait_for_ranks"]
