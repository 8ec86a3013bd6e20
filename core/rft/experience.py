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

from rft.tensor_wire import from_wire, to_wire


@dataclass(frozen=True)
class EID:
    """Where an experience comes from: explore step, task, and rollout within the task."""

    batch: int | str = 0
    """Explore step (or the name of an eval/offline batch)."""
    task: int | str = 0
    """Index of the task within its taskset."""
    run: int = 0
    """Rollout number of this task (0 … repeat_times-1)."""
    suffix: str = ""
    """Extra id for several experiences of one rollout (multi-turn, DPO pairs)."""

    @property
    def group(self) -> str:
        """Rollouts of the same task in the same step share a group (GRPO baseline)."""
        return f"{self.batch}/{self.task}"

    @property
    def uid(self) -> str:
        """Unique id of this experience."""
        return f"{self.batch}/{self.task}/{self.run}/{self.suffix}"


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

    def __post_init__(self) -> None:
        if self.tokens.dim() != 1:
            raise ValueError(f"Experience.tokens must be 1-D, got shape {tuple(self.tokens.shape)}")
        if not 0 <= self.prompt_length <= self.tokens.numel():
            raise ValueError(f"prompt_length {self.prompt_length} is outside 0..{self.tokens.numel()}")
        if self.action_mask is None:
            self.action_mask = torch.ones(self.response_length, dtype=torch.bool)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled state (Ray's object store, between the explorer, the buffer actor and the
        trainer): the tensor fields as raw buffers (:mod:`rft.tensor_wire`), about 15×
        faster than torch's tensor reducer for a step's experiences."""
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
    group_ids: list[str]
    """Per row, the task group (rollouts of one task in one step)."""
    experiences: list[Experience]


def _scatter_rows(values: Sequence[torch.Tensor], starts: torch.Tensor, out: torch.Tensor
                  ) -> torch.Tensor:
    """``out[b, starts[b] : starts[b] + len(values[b])] = values[b]`` for every row ``b``,
    as one indexed write; returns ``out`` ``(B, W)``."""
    lengths = torch.tensor([v.numel() for v in values])  # (B,)
    if int(lengths.sum()) == 0:
        return out
    rows = torch.repeat_interleave(torch.arange(len(values)), lengths)  # (Σ L,)
    offsets = torch.arange(int(lengths.sum())) - torch.repeat_interleave(
        lengths.cumsum(0) - lengths, lengths)  # (Σ L,) position inside each row
    out[rows, starts[rows] + offsets] = torch.cat([v.reshape(-1) for v in values]).to(out.dtype)
    return out


def _stack_optional(values: Sequence[torch.Tensor | None], width: int,
                    dtype: torch.dtype) -> torch.Tensor | None:
    if any(v is None for v in values):
        return None
    present = [v for v in values if v is not None]
    return _scatter_rows(present, torch.zeros(len(present), dtype=torch.long),
                         torch.zeros(len(present), width, dtype=dtype))  # (B, R)


def pad_batch(experiences: Sequence[Experience], pad_token_id: int) -> Batch:
    """Pack experiences into a :class:`Batch` (see its docstring for the layout)."""
    if not experiences:
        raise ValueError("cannot build a batch from zero experiences")
    batch_size = len(experiences)
    prompt_width = max(e.prompt_length for e in experiences)
    response_width = max(max(e.response_length for e in experiences), 1)
    total = prompt_width + response_width
    starts = torch.tensor([prompt_width - e.prompt_length for e in experiences])  # (B,)
    at_zero = torch.zeros(batch_size, dtype=torch.long)  # (B,)
    input_ids = _scatter_rows([e.tokens for e in experiences], starts, torch.full(
        (batch_size, total), pad_token_id, dtype=torch.long))  # (B, P+R)
    ends = starts + torch.tensor([e.tokens.numel() for e in experiences])  # (B,)
    columns = torch.arange(total)  # (P+R,)
    attention_mask = ((columns >= starts[:, None])
                      & (columns < ends[:, None])).long()  # (B, P+R)
    response_mask = _scatter_rows([e.action_mask for e in experiences], at_zero,
                                  torch.zeros(batch_size, response_width))  # (B, R)
    token_level_rewards = torch.zeros(batch_size, response_width)  # (B, R)
    rewards = torch.zeros(batch_size)  # (B,)
    for row, exp in enumerate(experiences):
        if exp.token_level_reward is not None:
            token_level_rewards[row, : exp.response_length] = exp.token_level_reward
        elif exp.reward is not None and exp.response_length > 0:
            rewards[row] = exp.reward
            token_level_rewards[row, exp.response_length - 1] = exp.reward
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
        group_ids=[e.eid.group for e in experiences],
        experiences=list(experiences),
    )
