"""``bench`` results on disk, task by task: nothing finished is lost when a bench stops.

Each evaluated model (checkpoint ``global_step_N``, or the hosted model of an
``external`` engine as step 0) gets ``<job dir>/bench/step_<N>/<taskset>.jsonl``: a header
line naming what is evaluated, then one line per rollout as soon as its task succeeds, and
``{"complete": true}`` once every task of the taskset ran::

    {"identity": {"model": …, "taskset": …}}
    {"task": 3, "run": 0, "reward": 1.0, "metrics": {…}, "response": "4", …}
    …
    {"complete": true}

A bench that stops midway (the external model's server went down, Ctrl-C, a crash) leaves
the rollouts it finished, and ``<job dir>/bench/unfinished`` (:class:`BenchRun`). The next
bench of the same job dir (``continue_from_checkpoint: true``) then goes on from them:
for every file with the same identity — same model, same taskset settings, same sampling
— a task whose every rollout is recorded is not run again and the metrics count it from
the file (complete files too: earlier checkpoints are not evaluated again). After a bench
that finished, the next one is a new measurement: every file is written afresh. A file
with another identity is moved aside to ``<taskset>.jsonl.replaced``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

import torch

from rft.errors import RftError
from rft.experience import EID, Experience

log = logging.getLogger("rft.modes.bench")

RESULTS_DIR = "bench"
"""Folder of the job dir holding the results."""


def results_dir(job_dir: str, step: int) -> str:
    """``<job dir>/bench/step_<step>``."""
    return os.path.join(job_dir, RESULTS_DIR, f"step_{step}")


class BenchRun:
    """Whether a bench of the job dir goes on from the previous one: ``<job dir>/bench/
    unfinished`` exists from :meth:`start` until :meth:`finished`."""

    def __init__(self, job_dir: str) -> None:
        self.marker = os.path.join(job_dir, RESULTS_DIR, "unfinished")
        self.continues = os.path.exists(self.marker)
        """The previous bench did not finish: its results are gone on from."""

    def start(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.marker), exist_ok=True)
            with open(self.marker, "w", encoding="utf-8") as handle:
                handle.write("a bench of this job dir is running or stopped midway\n")
        except OSError as exc:
            raise RftError(f"bench results {self.marker}: cannot write: "
                           f"{exc.strerror or exc}") from exc

    def finished(self) -> None:
        os.remove(self.marker)


class BenchRecord:
    """The results of one evaluated model (an :class:`rft.rollout.explorer.EvalRecord`).

    :param job_dir: the run's job dir.
    :param step: the model's step (checkpoint step; 0 for a hosted model).
    :param identity: what makes results comparable, per taskset name: JSON-able data
        (the model, the taskset's settings, the sampling defaults).
    :param resume: go on from recorded results (:attr:`BenchRun.continues`); else every
        file is written afresh.
    """

    def __init__(self, job_dir: str, step: int, identity: dict[str, Any], *,
                 resume: bool) -> None:
        self.folder = results_dir(job_dir, step)
        self.identity = identity
        self.resume = resume
        self._lock = threading.Lock()
        self._files: dict[str, Any] = {}
        self._complete: set[str] = set()

    def path(self, taskset: str) -> str:
        """The results file of ``taskset``."""
        return os.path.join(self.folder, f"{taskset}.jsonl")

    def _header(self, taskset: str) -> dict[str, Any]:
        return {"identity": {"model": self.identity.get("model"),
                             "taskset": self.identity.get("tasksets", {}).get(taskset)}}

    def restore(self, taskset: str) -> list[Experience]:
        """The rollouts recorded for the same identity when resuming (module docstring); the
        file is then open for more (a fresh one when there is nothing to go on from)."""
        path = self.path(taskset)
        header = self._header(taskset)
        kept: list[Experience] = []
        resumable = False
        if os.path.exists(path):
            lines = _read_lines(path)
            same = bool(lines) and lines[0] == _plain(header)
            if same and self.resume:
                resumable = True
                kept = [_experience(line, taskset) for line in lines[1:] if "task" in line]
                if any(line.get("complete") for line in lines):
                    self._complete.add(taskset)
            elif not same:
                os.replace(path, path + ".replaced")
                log.warning("bench results %s were of another model or settings: moved to "
                            "%s.replaced", path, path)
        try:
            os.makedirs(self.folder, exist_ok=True)
            handle = open(path, "a" if resumable else "w", encoding="utf-8")  # noqa: SIM115
            if not resumable:
                handle.write(json.dumps(header, default=str) + "\n")
                handle.flush()
        except OSError as exc:
            raise RftError(f"bench results {path}: cannot write: {exc.strerror or exc}") from exc
        with self._lock:
            self._files[taskset] = handle
        if kept:
            log.info("bench of %s goes on from %d recorded rollout(s) in %s", taskset,
                     len(kept), path)
        return kept

    def add(self, taskset: str, experiences: list[Experience]) -> None:
        """Append one task's rollouts (flushed at once)."""
        lines = "".join(json.dumps(_line(exp), default=str) + "\n" for exp in experiences)
        with self._lock:
            handle = self._files[taskset]
            handle.write(lines)
            handle.flush()

    def finish(self, taskset: str) -> None:
        """Mark ``taskset`` complete and close its file."""
        with self._lock:
            handle = self._files.pop(taskset)
            if taskset not in self._complete:
                handle.write(json.dumps({"complete": True}) + "\n")
            handle.close()

    def close(self) -> None:
        """Close the files of tasksets that did not finish (kept for the next bench)."""
        with self._lock:
            for handle in self._files.values():
                handle.close()
            self._files.clear()


def read_results(path: str) -> list[dict[str, Any]]:
    """The rollout lines of a results file (header and completion mark left out)."""
    return [line for line in _read_lines(path) if "task" in line]


def _read_lines(path: str) -> list[dict[str, Any]]:
    """Every JSON line; a torn last line (a crash mid-write) is dropped."""
    out: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as handle:
        for text in handle:
            try:
                out.append(json.loads(text))
            except json.JSONDecodeError:
                break
    return out


def _plain(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists, …)."""
    return json.loads(json.dumps(value, default=str))


def _line(exp: Experience) -> dict[str, Any]:
    return {"task": exp.eid.task, "run": exp.eid.run, "reward": exp.reward,
            "metrics": exp.metrics, "response": exp.response_text,
            "response_length": exp.response_length, "model_version": exp.model_version,
            "finish_reason": exp.info.get("finish_reason")}


def _experience(line: dict[str, Any], taskset: str) -> Experience:
    """A recorded rollout as the experience evaluation metrics read (no tokens)."""
    return Experience(tokens=torch.zeros(0, dtype=torch.long), prompt_length=0,
                      reward=line.get("reward"), metrics=dict(line.get("metrics") or {}),
                      eid=EID(batch=f"eval/{taskset}", task=line["task"], run=line["run"]),
                      model_version=int(line.get("model_version") or 0),
                      response_text=line.get("response"),
                      info={"taskset": taskset, "restored": True})


__all__ = ["RESULTS_DIR", "BenchRecord", "BenchRun", "read_results", "results_dir"]
