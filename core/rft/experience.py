"""Experiences: what the explorer produces and the trainer learns from.

One :class:`Experience` is one sequence (prompt + response tokens) with what the trainer
needs: the log-probabilities the explorer sampled it with, a reward (scalar or per
token), the action mask over the response, and ids that group rollouts of the same task.
:func:`pad_batch` turns a list of experiences into dense tensors: prompts left-padded,
responses right-padded, so every response starts at the same column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from rft.multimodal.inputs import MultiModalInputs
from rft.tensor_wire import from_wire, to_wire


@dataclass(frozen=True)
class EID:
    """Where an experience comes from: explore step, task, rollout within the task, and
    step within a multi-step rollout (Trinity-RFT's ``EID`` fields)."""

    batch: int | str = 0
    """Explore step (or the name of an eval/offline batch)."""
    task: int | str = 0
    """Index of the task within its taskset."""
    run: int = 0
    """Rollout number of this task (0 … repeat_times-1)."""
    step: int = 0
    """Position of this experience in its multi-step episode (0, 1, …), set by a
    step-wise workflow; 0 for single-turn rollouts. Kept by the explorer when it numbers
    ``batch`` / ``task`` / ``run``."""
    suffix: str = ""
    """Extra id for several experiences of one rollout (multi-turn, DPO pairs)."""
    taskset: str = ""
    """The training taskset's name when the explorer reads several (``""`` with one, so
    the ids stay ``batch/task/…``): task 3 of one taskset and task 3 of another, explored
    in the same step, are two groups."""

    @property
    def task_key(self) -> str:
        """The task within its step: ``task``, or ``taskset:task`` with several tasksets."""
        return f"{self.taskset}:{self.task}" if self.taskset else str(self.task)

    @property
    def group(self) -> str:
        """Rollouts of the same task in the same step share a group (GRPO baseline)."""
        return f"{self.batch}/{self.task_key}"

    @property
    def uid(self) -> str:
        """Unique id of this experience."""
        return f"{self.batch}/{self.task_key}/{self.run}/{self.suffix}"


@dataclass
class Experience:
    """One sequence for the trainer.

    Tensors are 1-D: ``tokens`` has ``prompt_length + response_length`` ids;
    ``logprobs``, ``action_mask`` and ``token_level_reward`` cover the response only.
    """

    tokens: torch.Tensor
    """(L,) int64 prompt followed by response token ids."""
    prompt_length: int
    """Number of prompt tokens at the start of ``tokens``."""
    reward: float | None = None
    """Scalar reward of the whole response (outcome reward)."""
    token_level_reward: torch.Tensor | None = None
    """(R,) per-token rewards; when set it replaces ``reward``."""
    logprobs: torch.Tensor | None = None
    """(R,) log-probabilities of the response tokens under the policy that sampled them."""
    action_mask: torch.Tensor | None = None
    """(R,) bool, True for tokens the policy produced (False for tool/environment text)."""
    advantages: torch.Tensor | None = None
    """(R,) advantages when computed in the explorer."""
    returns: torch.Tensor | None = None
    """(R,) returns when computed in the explorer."""
    eid: EID = field(default_factory=EID)
    model_version: int = 0
    """Weights version of the explorer when it sampled this experience."""
    info: dict[str, Any] = field(default_factory=dict)
    """Free-form data from the workflow (task fields, ground truth, …)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Numbers the workflow/reward measured (reward parts, lengths, …)."""
    chosen_tokens: torch.Tensor | None = None
    """DPO: not used by rollouts; a DPO pair is two experiences with suffix chosen/rejected."""
    response_text: str | None = None
    """The response as the engine decoded it (``Completion.text``: special tokens skipped,
    cut before a stop string); ``None`` when the experience was not sampled by an engine."""
    teacher_logprobs: torch.Tensor | None = None
    """(R,) log-probabilities of the response tokens under a teacher model (on-policy
    distillation: the workflow scores each response with an auxiliary model); the trainer
    passes them to the advantage fn and the policy loss as ``teacher_log_prob``."""
    token_versions: torch.Tensor | None = None
    """(R,) int64 weights version that produced each response token; ``None``: every token
    is ``model_version``'s. Set by a partial rollout (a weight sync landed while the
    response was being generated: the tokens before it carry the old version, those after
    the new one; docs/async-partial.md) and by a multi-turn merge whose turns were sampled
    by different versions. The trainer sees it as ``rollout_version``."""
    multi_modal_inputs: MultiModalInputs | None = None
    """The processor's vision tensors of this sequence (``pixel_values`` ``(N, D)``,
    ``image_grid_thw`` ``(n, 3)``, …; :class:`rft.multimodal.MultiModalInputs`), whose
    image tokens sit in ``tokens``; ``None``: a text-only sequence. Not padded like tokens:
    a batch joins its rows' inputs in row order (:func:`rft.multimodal.join_inputs`)."""

    def __post_init__(self) -> None:
        if self.tokens.dim() != 1:
            raise ValueError(f"Experience.tokens must be 1-D, got shape {tuple(self.tokens.shape)}")
        if not 0 <= self.prompt_length <= self.tokens.numel():
            raise ValueError(f"prompt_length {self.prompt_length} is outside 0..{self.tokens.numel()}")
        if self.action_mask is None:
            self.action_mask = torch.ones(self.response_length, dtype=torch.bool)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled state (Ray's object store, between the explorer, the buffer actor and the
        trainer): the tensor fields as raw buffers (:mod:`rft.tensor_wire`), much faster
        than torch's tensor reducer for a step's experiences (docs/benchmarks.md)."""
        state = dict(self.__dict__)
        for name in _TENSOR_FIELDS:
            state[name] = to_wire(state.get(name))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in _TENSOR_FIELDS:
            state[name] = from_wire(state.get(name))
        self.__dict__.update(state)

    @property
    def response_length(self) -> int:
        return self.tokens.numel() - self.prompt_length

    @property
    def prompt_tokens(self) -> torch.Tensor:
        return self.tokens[: self.prompt_length]

    @property
    def response_tokens(self) -> torch.Tensor:
        return self.tokens[self.prompt_length:]

    def response_versions(self) -> torch.Tensor:
        """(R,) int64 version of each response token: ``token_versions``, or
        ``model_version`` everywhere when it is ``None``."""
        if self.token_versions is not None:
            return self.token_versions.to(torch.long)
        return torch.full((self.response_length,), self.model_version, dtype=torch.long)

    @property
    def oldest_version(self) -> int:
        """The oldest weights version that produced a response token (``model_version``
        when there are no per-token versions or no response tokens)."""
        if self.token_versions is None or not self.token_versions.numel():
            return self.model_version
        return int(self.token_versions.min())


_TENSOR_FIELDS = tuple(f.name for f in fields(Experience) if "torch.Tensor" in str(f.type))
"""The tensor fields of :class:`Experience` (pickled as raw buffers)."""


@dataclass
class Batch:
    """Dense tensors of a list of experiences (prompts left-padded, responses right-padded).

    With ``P`` the longest prompt and ``R`` the longest response, every sequence occupies
    columns ``[P - prompt_length, P + response_length)`` of a ``(B, P + R)`` grid.
    """

    input_ids: torch.Tensor
    """(B, P + R) token ids, ``pad_token_id`` outside each sequence."""
    attention_mask: torch.Tensor
    """(B, P + R) 1 on real tokens."""
    position_ids: torch.Tensor
    """(B, P + R) positions counted from each sequence's first real token."""
    response_mask: torch.Tensor
    """(B, R) float, 1 on response tokens the loss uses (action mask ∧ not padding)."""
    prompt_width: int
    """``P``: responses start at this column."""
    rewards: torch.Tensor
    """(B,) scalar rewards (0 where only token-level rewards were given)."""
    token_level_rewards: torch.Tensor
    """(B, R) rewards per response token; a scalar reward sits on the last response token."""
    rollout_log_prob: torch.Tensor | None
    """(B, R) the inference engine's log-probs at sampling time (``Experience.logprobs``;
    veRL's ``rollout_log_probs``), or ``None`` if any experience lacks them."""
    advantages: torch.Tensor | None
    """(B, R) explorer-side advantages, or ``None``."""
    returns: torch.Tensor | None
    """(B, R) explorer-side returns, or ``None``."""
    teacher_log_prob: torch.Tensor | None
    """(B, R) a teacher model's log-probs (``Experience.teacher_logprobs``), or ``None`` if
    any experience lacks them."""
    group_ids: list[str]
    """Per row, the task group (rollouts of one task in one step)."""
    experiences: list[Experience]
    rollout_version: torch.Tensor | None = None
    """(B, R) int64 weights version that produced each response token
    (:meth:`Experience.response_versions`: ``token_versions``, else the row's
    ``model_version``); ``-1`` on padding columns. A trainer's staleness and off-policy
    corrections read it (``current_version − rollout_version`` is a token's lag)."""

    @property
    def multi_modal_inputs(self) -> list[MultiModalInputs | None]:
        """Per row, the experience's vision inputs (``None`` for text rows)."""
        return [e.multi_modal_inputs for e in self.experiences]


def _row_spans(starts: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``(B, W)`` bool: row ``b`` is true on columns ``[starts[b], starts[b] + lengths[b])``."""
    columns = torch.arange(width)  # (W,)
    return (columns >= starts[:, None]) & (columns < (starts + lengths)[:, None])  # (B, W)


def _fill_rows(values: Sequence[torch.Tensor], spans: torch.Tensor, out: torch.Tensor
               ) -> torch.Tensor:
    """``out[b, span of row b] = values[b]`` for every row, as one masked write: a boolean
    mask's true cells, in row-major order, are the 1-D ``values`` concatenated. Returns
    ``out`` ``(B, W)``."""
    out[spans] = torch.cat(list(values)).to(out.dtype)  # (Σ L,) into the spans
    return out


def _numels(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """``(B,)`` elements of each tensor."""
    return torch.tensor([v.numel() for v in values], dtype=torch.long)


def _stack_optional(values: Sequence[torch.Tensor | None], width: int,
                    dtype: torch.dtype) -> torch.Tensor | None:
    """``(B, R)`` the 1-D ``values`` left-aligned and zero-padded, or ``None`` if any is
    ``None``."""
    if any(v is None for v in values):
        return None
    present = [v for v in values if v is not None]
    spans = _row_spans(torch.zeros(len(present), dtype=torch.long), _numels(present), width)
    return _fill_rows(present, spans, torch.zeros(len(present), width, dtype=dtype))


def _token_level_rewards(experiences: Sequence[Experience], response_lengths: torch.Tensor,
                         width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rewards (B,), token_level_rewards (B, R))``: a row's ``token_level_reward``
    where given (its scalar reward then 0), else its scalar ``reward`` on the last response
    token (and in ``rewards``); 0 without a reward or without response tokens. Batched:
    one masked write for the token-level rows, one indexed write for the scalar ones."""
    batch_size = len(experiences)
    token_level = torch.zeros(batch_size, width)  # (B, R)
    token_rows = [i for i, e in enumerate(experiences) if e.token_level_reward is not None]
    if token_rows:
        given = [r for e in experiences if (r := e.token_level_reward) is not None]
        index = torch.tensor(token_rows, dtype=torch.long)  # (b,)
        spans = _row_spans(torch.zeros(len(given), dtype=torch.long), _numels(given), width)
        token_level[index] = _fill_rows(given, spans, torch.zeros(len(given), width))
    lengths = response_lengths.tolist()
    scalars = [float(e.reward) if e.token_level_reward is None and e.reward is not None
               and length > 0 else None for e, length in zip(experiences, lengths)]
    rewards = torch.tensor([0.0 if r is None else r for r in scalars],
                           dtype=torch.float32)  # (B,)
    rows = torch.tensor([i for i, r in enumerate(scalars) if r is not None],
                        dtype=torch.long)  # (b,)
    if rows.numel():
        token_level[rows, response_lengths[rows] - 1] = rewards[rows]
    return rewards, token_level


def pad_batch(experiences: Sequence[Experience], pad_token_id: int) -> Batch:
    """Pack experiences into a :class:`Batch` (see its docstring for the layout)."""
    if not experiences:
        raise ValueError("cannot build a batch from zero experiences")
    batch_size = len(experiences)
    tokens = [e.tokens for e in experiences]
    lengths = _numels(tokens)  # (B,) prompt + response
    prompt_lengths = torch.tensor([e.prompt_length for e in experiences],
                                  dtype=torch.long)  # (B,)
    response_lengths = lengths - prompt_lengths  # (B,)
    prompt_width = int(prompt_lengths.max())
    response_width = max(int(response_lengths.max()), 1)
    total = prompt_width + response_width
    starts = prompt_width - prompt_lengths  # (B,)
    real = _row_spans(starts, lengths, total)  # (B, P+R)
    input_ids = _fill_rows(tokens, real, torch.full((batch_size, total), pad_token_id,
                                                    dtype=torch.long))  # (B, P+R)
    attention_mask = real.long()  # (B, P+R)
    action_masks: list[torch.Tensor] = []
    for e in experiences:
        assert e.action_mask is not None  # filled by Experience.__post_init__
        action_masks.append(e.action_mask)
    response_mask = _fill_rows(action_masks, _row_spans(
        torch.zeros(batch_size, dtype=torch.long), _numels(action_masks), response_width),
        torch.zeros(batch_size, response_width))  # (B, R)
    rewards, token_level_rewards = _token_level_rewards(experiences, response_lengths,
                                                        response_width)  # (B,), (B, R)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, P+R)
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_mask=response_mask,
        prompt_width=prompt_width,
        rewards=rewards,
        token_level_rewards=token_level_rewards,
        rollout_log_prob=_stack_optional([e.logprobs for e in experiences], response_width,
                                         torch.float32),
        advantages=_stack_optional([e.advantages for e in experiences], response_width,
                                   torch.float32),
        returns=_stack_optional([e.returns for e in experiences], response_width,
                                torch.float32),
        teacher_log_prob=_stack_optional([e.teacher_logprobs for e in experiences],
                                         response_width, torch.float32),
        group_ids=[e.eid.group for e in experiences],
        experiences=list(experiences),
        rollout_version=_rollout_versions(experiences, response_lengths, response_width),
    )


def _rollout_versions(experiences: Sequence[Experience], response_lengths: torch.Tensor,
                      width: int) -> torch.Tensor:
    """``(B, R)`` int64 per-token weights versions, ``-1`` on padding: the rows' scalar
    ``model_version`` broadcast over their responses, then the rows with ``token_versions``
    written over them (one masked write each way)."""
    batch_size = len(experiences)
    versions = torch.tensor([e.model_version for e in experiences], dtype=torch.long)  # (B,)
    spans = _row_spans(torch.zeros(batch_size, dtype=torch.long), response_lengths, width)
    out = torch.where(spans, versions[:, None], torch.full((batch_size, width), -1,
                                                           dtype=torch.long))  # (B, R)
    rows = [i for i, e in enumerate(experiences) if e.token_versions is not None]
    if rows:
        given = [v for e in experiences if (v := e.token_versions) is not None]
        index = torch.tensor(rows, dtype=torch.long)  # (b,)
        given_spans = _row_spans(torch.zeros(len(given), dtype=torch.long), _numels(given),
                                 width)  # (b, R)
        out[index] = _fill_rows(given, given_spans, out[index].clone())
    return out
