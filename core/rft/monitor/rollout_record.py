"""The rollout record (``monitor.rollout_record``): every sample of every k-th explore step,
whole, in the run's own folder, bounded in size.

Where: ``<job dir>/monitor/rollouts/step_<N>.jsonl``, one JSON line per sample::

    {"step": N, "taskset": "train", "task": 3, "run": 1, "eid": "N/3/1/",
     "model_version": N-1, "reward": 1.0, "reward_parts": {"accuracy": 1.0},
     "advantage": 0.71, "advantage_source": "trainer",
     "prompt": "<|im_start|>user\\n...", "response": "...",
     "tokens": ["4", "<|im_end|>"], "logprobs": [-0.2, -0.01], "entropy": null,
     "action_mask": [1, 1], "metrics": {...}, "transcript": [...] | null}

- ``prompt`` / ``response``: the token ids decoded with special tokens kept (so a chat
  template's turns, tool calls and tool results stay visible); ``tokens``: one text piece
  per response token (:func:`token_pieces`: a token holding only part of a character's
  UTF-8 bytes has an empty piece and its bytes show with the token that completes the
  character); ``action_mask``: 1 on the model's tokens, 0 on what the workflow
  put between its turns (tool results, environment observations).
- ``logprobs``: the engine's per-token log-probs when it returned them (``null`` else);
  ``entropy``: per-token entropy when the experience carries it (no engine of rft returns
  it yet: ``null``).
- ``advantage``: the sequence's advantage, the masked mean over its response tokens
  ``Σ_t A_t m_t / Σ_t m_t``: the explorer's when the algorithm computes advantages there
  (``advantage_source: "explorer"``), else the trainer's from the train step that learnt
  from the sample (``"trainer"``, :attr:`rft.trainer.base.Trainer.last_advantages`);
  ``null`` when the sample was not trained on in that step. Where the record is written
  before the trainer sees the samples (the explorer's side: modes ``both`` and
  ``explore``), a sample without the explorer's advantage has ``advantage: null`` with
  ``advantage_source: "trainer"``: computed by the trainer, later, elsewhere.
- ``transcript``: ``info["agent/transcript"]`` (agents, environments) when the workflow
  keeps one.

Who writes it (:func:`recorder_of`): mode ``colocate`` after the step's train step (the
trainer's advantages at hand); mode ``explore`` after each explore step, in its loop; mode
``both`` in the explorer actor after each explore step; mode ``serve`` (``sync_method:
memory``) after each train step, with the batch that step trained (a serve run has no
explore step: its step is the trainer's). ``train`` and ``bench`` explore nothing.

Bound: after each recorded step, the oldest step files are removed while the folder is
over ``monitor.rollout_record_max_mb`` (the newest step is always kept). A resumed run
first removes the files of the steps after its checkpoint (:meth:`RolloutRecorder.rewind`),
then records them again as it redoes them.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from rft.errors import RftError
from rft.experience import Experience
from rft.folders import make_folder

if TYPE_CHECKING:
    from rft.config.schema import MonitorConfig

log = logging.getLogger("rft.monitor.rollout_record")

RECORD_FOLDER = "rollouts"
"""Under ``<job dir>/monitor/``: one file per recorded step."""
STEP_FILE_PREFIX = "step_"


def step_file_name(step: int) -> str:
    """``step_<N>.jsonl``, zero-padded so that names sort by step."""
    return f"{STEP_FILE_PREFIX}{step:08d}.jsonl"


def step_of_file(name: str) -> int | None:
    """The step a record file holds (``None``: not a record file)."""
    if not (name.startswith(STEP_FILE_PREFIX) and name.endswith(".jsonl")):
        return None
    digits = name[len(STEP_FILE_PREFIX):-len(".jsonl")]
    return int(digits) if digits.isdigit() else None


def sequence_advantage(advantages: torch.Tensor, mask: torch.Tensor) -> float | None:
    """``Σ_t A_t m_t / Σ_t m_t`` over the response tokens ``(R,)``; ``None`` without a
    kept token."""
    kept = mask.to(advantages.dtype)  # (R,)
    total = float(kept.sum())
    return float((advantages * kept).sum()) / total if total > 0 else None


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it (tensors as lists, non-finite floats as strings)."""
    if isinstance(value, torch.Tensor):
        return _plain(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


INCOMPLETE_CHARACTER = "\ufffd"
"""What a tokenizer's decode gives for bytes that are only part of a UTF-8 character."""


def token_pieces(token_ids: list[int], decode: Callable[[list[int]], str]) -> list[str]:
    """One text piece per token: tokens are decoded in runs ``ids[start : i + 1]``; while
    a run's text ends in :data:`INCOMPLETE_CHARACTER` (a byte-level token holding part of
    a character, e.g. the first byte of an emoji) the token's piece is ``""`` and the run
    goes on, so the character appears whole with the token that completes it (or with
    the last token, as decode gives it, when the response ends mid-character)."""
    pieces: list[str] = []
    start = 0
    for i in range(len(token_ids)):
        text = decode(token_ids[start:i + 1])
        if text.endswith(INCOMPLETE_CHARACTER) and i + 1 < len(token_ids):
            pieces.append("")
            continue
        pieces.append(text)
        start = i + 1
    return pieces


def sample_row(exp: Experience, step: int, decode: Callable[[list[int]], str],
               advantage: float | None, advantage_source: str | None) -> dict[str, Any]:
    """The record line of one sample (module docstring); ``decode``: ids → text with
    special tokens kept (not called for no ids: an engine without a tokenizer leaves
    none)."""
    response_ids = exp.response_tokens.tolist()
    prompt_ids = exp.prompt_tokens.tolist()
    entropy = exp.info.get("entropy")
    parts = {k.removeprefix("reward/"): v for k, v in exp.metrics.items()
             if k.startswith("reward/")}
    return {
        "step": step, "taskset": exp.info.get("taskset"), "task": exp.eid.task,
        "run": exp.eid.run, "eid": exp.eid.uid, "model_version": exp.model_version,
        "reward": _plain(float(exp.reward)) if exp.reward is not None else None,
        "reward_parts": _plain(parts),
        "advantage": _plain(advantage), "advantage_source": advantage_source,
        "prompt": decode(prompt_ids) if prompt_ids else "",
        "response": decode(response_ids) if response_ids else "",
        "tokens": token_pieces(response_ids, decode),
        "logprobs": _plain(exp.logprobs) if exp.logprobs is not None else None,
        "entropy": _plain(entropy) if entropy is not None else None,
        "action_mask": _plain(exp.action_mask.int()) if exp.action_mask is not None else None,
        "metrics": _plain(exp.metrics),
        "transcript": _plain(exp.info.get("agent/transcript")),
    }


class RolloutRecorder:
    """Writes the rollout record of a stage (module docstring).

    :param folder: ``<job dir>/monitor/rollouts``.
    :param every: record explore steps ``k, 2k, …`` (``monitor.rollout_record_every``).
    :param max_mb: bound of the folder in MiB (``monitor.rollout_record_max_mb``).
    :param decode: token ids → text, special tokens kept.
    """

    def __init__(self, folder: str, every: int, max_mb: float,
                 decode: Callable[[list[int]], str]) -> None:
        self.folder = folder
        self.every = every
        self.max_bytes = int(max_mb * 1024 * 1024)
        self.decode = decode
        self.dropped_steps = 0

    def wants(self, step: int) -> bool:
        """Whether explore step ``step`` is recorded (every ``every``-th)."""
        return step >= 1 and step % self.every == 0

    def record(self, step: int, experiences: Sequence[Experience],
               trainer_advantages: Mapping[str, float] | None = None) -> str | None:
        """Write every sample of ``step`` (when :meth:`wants` it), then keep the bound.

        :param trainer_advantages: sequence advantage by ``eid.uid`` from the train step
            that learnt from these samples (used where the explorer computed none);
            ``None``: the record is written on the explorer's side, before any trainer
            saw the samples (their advantage, where the explorer computed none, is
            ``null`` with source ``"trainer"``).
        :return: the step's file, or ``None`` when the step is not recorded.
        :raises RftError: the file cannot be written (one line naming it).
        """
        if not self.wants(step):
            return None
        rows = []
        for exp in experiences:
            advantage: float | None = None
            source: str | None = None
            if exp.advantages is not None and exp.action_mask is not None:
                advantage, source = sequence_advantage(exp.advantages, exp.action_mask), "explorer"
            elif trainer_advantages is None:  # the trainer computes it, later
                source = "trainer"
            elif exp.eid.uid in trainer_advantages:
                advantage, source = trainer_advantages[exp.eid.uid], "trainer"
            rows.append(sample_row(exp, step, self.decode, advantage, source))
        path = os.path.join(self.folder, step_file_name(step))
        partial = f"{path}.{os.getpid()}.tmp"
        try:
            make_folder(self.folder, "monitor.rollout_record")
            with open(partial, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row) + "\n" for row in rows)
            os.replace(partial, path)
        except OSError as exc:
            raise RftError(f"monitor.rollout_record: cannot write {path}: "
                           f"{exc.strerror or exc}") from exc
        self._keep_bound(path)
        return path

    def rewind(self, step: int) -> None:
        """Remove the files of steps after ``step`` (a resumed run redoes them; ``0``: a
        run starting afresh in a job dir that holds an old record)."""
        if not os.path.isdir(self.folder):
            return
        for name in os.listdir(self.folder):
            recorded = step_of_file(name)
            if recorded is not None and recorded > step:
                os.remove(os.path.join(self.folder, name))

    def _keep_bound(self, newest: str) -> None:
        """Remove the oldest step files while the folder is over the bound."""
        files = sorted((name for name in os.listdir(self.folder)
                        if step_of_file(name) is not None), key=lambda n: step_of_file(n) or 0)
        sizes = {name: os.path.getsize(os.path.join(self.folder, name)) for name in files}
        total = sum(sizes.values())
        for name in files:
            if total <= self.max_bytes or os.path.join(self.folder, name) == newest:
                break
            os.remove(os.path.join(self.folder, name))
            total -= sizes[name]
            if self.dropped_steps == 0:
                log.warning("monitor.rollout_record_max_mb: the rollout record in %s is over "
                            "%.3g MiB; its oldest steps are dropped from now on",
                            self.folder, self.max_bytes / 1024 / 1024)
            self.dropped_steps += 1


def open_recorder(enabled: bool, job_dir: str, every: int, max_mb: float,
                  decode: Callable[[list[int]], str]) -> RolloutRecorder | None:
    """The stage's recorder under ``<job_dir>/monitor/rollouts`` (``None`` when off)."""
    if not enabled:
        return None
    return RolloutRecorder(os.path.join(job_dir, "monitor", RECORD_FOLDER), every, max_mb,
                           decode)


def recorder_of(monitor: MonitorConfig, job_dir: str, decode: Callable[[list[int]], str],
                *, explores: bool = True) -> RolloutRecorder | None:
    """The stage's recorder from ``monitor.rollout_record`` / ``rollout_record_every`` /
    ``rollout_record_max_mb`` (``None`` when off, or when the stage does not explore)."""
    return open_recorder(monitor.rollout_record and explores, job_dir,
                         monitor.rollout_record_every, monitor.rollout_record_max_mb, decode)


__all__ = ["RECORD_FOLDER", "RolloutRecorder", "open_recorder", "recorder_of", "sample_row",
           "sequence_advantage", "step_file_name", "step_of_file"]
