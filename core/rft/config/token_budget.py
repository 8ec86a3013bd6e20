"""The derived token budget of a dynamic micro-batch (``trainer.max_token_len_per_gpu``).

With ``trainer.use_dynamic_bsz`` the trainer packs each mini-batch into micro-batches of at
most ``max_token_len_per_gpu`` real tokens. Unset, Trinity-RFT derives
``⌈2 · max_model_len / sp⌉`` (two full-length sequences, ``sp`` the Ulysses degree): right
for long contexts, where it bounds the activation memory, but a trap for short ones — the
quickstart's 128 rows of ~22 tokens under ``max_model_len`` 27 became ~64 micro-batches of
2 rows, each a forward and backward of its own (the ``update_actor`` times are in
docs/benchmarks.md).

rft derives::

    rows   = ⌈mini-batch rows / trainer ranks⌉      (one rank's share of a mini-batch)
    budget = max(⌈2 · L / sp⌉, min(⌈rows · L / sp⌉, 16384))      L = model.max_model_len

so a mini-batch that fits within veRL's default budget (``ppo_max_token_len_per_gpu:
16384``) is one micro-batch, a larger one is cut into pieces of 16384 tokens (veRL's
size), and a context longer than 8192 keeps Trinity's rule. Validation's memory estimate
(:mod:`rft.config.memory_estimate`) then checks the budget against the device and names
``trainer.max_token_len_per_gpu`` when it does not fit. Derivation
(:func:`derive_budget`) fills the budget in and the run plan keeps it
(``RunPlan.token_budget``); the launcher prints :func:`budget_line` at the start of a
stage whose budget was derived.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rft.config.plan import RunPlan
    from rft.config.schema import RftConfig

VERL_DEFAULT_TOKENS = 16384
"""veRL's default ``actor.ppo_max_token_len_per_gpu``: the most a derived budget takes
beyond Trinity's ``2 · max_model_len``."""

@dataclass(frozen=True)
class TokenBudget:
    """A derived budget and what it was derived from."""

    tokens: int
    """``max_token_len_per_gpu``."""
    rows: int
    """Rows of one rank's mini-batch."""
    max_model_len: int
    """``model.max_model_len``."""
    sequence_parallel: int = 1
    """``trainer.ulysses_sequence_parallel_size``."""

    @property
    def trinity_tokens(self) -> int:
        """Trinity-RFT's rule alone: ``⌈2 · L / sp⌉``."""
        return math.ceil(2 * self.max_model_len / self.sequence_parallel)

    @property
    def max_micro_batches(self) -> int:
        """Micro-batches per mini-batch at most: ``⌈rows · L / sp / tokens⌉`` (every row
        of full length; shorter rows pack into fewer)."""
        return max(1, math.ceil(self.rows * self.max_model_len / self.sequence_parallel
                                / self.tokens))


def derived_budget(max_model_len: int, rows: int, sequence_parallel: int = 1) -> TokenBudget:
    """``max(⌈2·L/sp⌉, min(⌈rows·L/sp⌉, 16384))`` (see the module docstring).

    :param max_model_len: ``model.max_model_len`` (``L``).
    :param rows: rows of one rank's mini-batch.
    :param sequence_parallel: the Ulysses degree ``sp``.
    """
    sp = max(1, sequence_parallel)
    trinity = math.ceil(2 * max_model_len / sp)
    whole = math.ceil(max(1, rows) * max_model_len / sp)
    return TokenBudget(max(trinity, min(whole, VERL_DEFAULT_TOKENS)), max(1, rows),
                       max_model_len, sp)


def mini_batch_rows(config: Any) -> int:
    """Rows of one trainer rank's mini-batch: ``ppo_mini_batch_size × repeat_times`` from
    ``trainer.trainer_config`` (veRL's key), else ``buffer.train_batch_size``; divided
    over ``trainer.ranks``."""
    tree = config.trainer.trainer_config or {}
    mini = ((tree.get("actor_rollout_ref") or {}).get("actor") or {}).get("ppo_mini_batch_size")
    rows = (int(mini) * (config.algorithm.repeat_times or 1) if mini
            else int(config.buffer.train_batch_size or config.buffer.batch_size or 1))
    return math.ceil(rows / max(1, config.trainer.ranks or 1))


def derive_budget(config: RftConfig) -> TokenBudget | None:
    """The budget of an unset ``trainer.max_token_len_per_gpu`` (needs
    ``model.max_model_len``, ``buffer.train_batch_size`` and ``trainer.ranks``, derived
    before); ``None`` when it is set or cannot be derived. :func:`rft.config.derive.derive`
    fills it in and the run plan keeps it (:attr:`rft.config.plan.RunPlan.token_budget`)."""
    t = config.trainer
    if t.max_token_len_per_gpu is not None or not config.model.max_model_len:
        return None
    return derived_budget(config.model.max_model_len, mini_batch_rows(config),
                          t.ulysses_sequence_parallel_size)


def budget_line(plan: RunPlan) -> str | None:
    """The start-up line of a stage whose budget was derived and is used (dynamic
    micro-batches, a stage that trains); ``None`` otherwise."""
    config, budget = plan.config, plan.token_budget
    t = config.trainer
    if budget is None or not t.use_dynamic_bsz or config.mode == "explore" \
            or budget.tokens != t.max_token_len_per_gpu:
        return None
    pieces = budget.max_micro_batches
    return (f"trainer.max_token_len_per_gpu: {budget.tokens} tokens per micro-batch (derived: "
            f"max(2 x max_model_len {budget.max_model_len} = {budget.trinity_tokens}, "
            f"min({budget.rows} rows x {budget.max_model_len}, {VERL_DEFAULT_TOKENS}))); "
            f"{'1 micro-batch' if pieces == 1 else f'up to {pieces} micro-batches'} per "
            f"mini-batch of {budget.rows} rows; set it to trade speed for memory")


__all__ = ["VERL_DEFAULT_TOKENS", "TokenBudget", "budget_line", "derive_budget",
           "derived_budget", "mini_batch_rows"]
