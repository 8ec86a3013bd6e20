"""Batched construction equals the per-row construction it replaced (issue #23).

``pad_batch`` builds its tensors with batched writes; the tests hold it to the per-row
construction, kept below as the reference: every tensor equal, dtype included, on random
batches and on the edge cases (empty responses, token-level and scalar rewards mixed,
missing rewards, partial action masks, a row without log-probs). The explorer builds the
experiences of an engine call at once (``experiences_from_completions``); they equal
``experience_from_completion`` applied to each completion.
"""

from __future__ import annotations

import random

import pytest
import torch
from rft.experience import EID, Batch, Experience, pad_batch
from rft.engines.call_batching import (
    experience_from_completion,
    experiences_from_completions,
)
from rft.engines.engine import Completion

TENSOR_FIELDS = ("input_ids", "attention_mask", "position_ids", "response_mask", "rewards",
                 "token_level_rewards", "rollout_log_prob", "advantages", "returns",
                 "teacher_log_prob")


def pad_batch_per_row(experiences: list[Experience], pad_token_id: int) -> dict[str, object]:
    """The reference: one row at a time, each tensor written where it belongs."""
    batch_size = len(experiences)
    prompt_width = max(e.prompt_length for e in experiences)
    response_width = max(max(e.response_length for e in experiences), 1)
    total = prompt_width + response_width
    input_ids = torch.full((batch_size, total), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(batch_size, total, dtype=torch.long)
    response_mask = torch.zeros(batch_size, response_width)
    token_level_rewards = torch.zeros(batch_size, response_width)
    rewards = torch.zeros(batch_size)
    for row, e in enumerate(experiences):
        start = prompt_width - e.prompt_length
        input_ids[row, start: start + e.tokens.numel()] = e.tokens
        attention_mask[row, start: start + e.tokens.numel()] = 1
        response_mask[row, : e.action_mask.numel()] = e.action_mask.float()
        if e.token_level_reward is not None:
            token_level_rewards[row, : e.response_length] = e.token_level_reward
        elif e.reward is not None and e.response_length > 0:
            rewards[row] = e.reward
            token_level_rewards[row, e.response_length - 1] = e.reward
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)

    def optional(name: str) -> torch.Tensor | None:
        values = [getattr(e, name) for e in experiences]
        if any(v is None for v in values):
            return None
        out = torch.zeros(batch_size, response_width)
        for row, v in enumerate(values):
            out[row, : v.numel()] = v
        return out

    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": position_ids, "response_mask": response_mask, "rewards": rewards,
            "token_level_rewards": token_level_rewards, "prompt_width": prompt_width,
            "rollout_log_prob": optional("logprobs"), "advantages": optional("advantages"),
            "returns": optional("returns"), "teacher_log_prob": optional("teacher_logprobs"),
            "group_ids": [e.eid.group for e in experiences]}


def assert_same(batch: Batch, reference: dict[str, object]) -> None:
    assert batch.prompt_width == reference["prompt_width"]
    assert batch.group_ids == reference["group_ids"]
    for name in TENSOR_FIELDS:
        ours, theirs = getattr(batch, name), reference[name]
        if theirs is None:
            assert ours is None, name
            continue
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, name
        assert torch.equal(ours, theirs), name


def random_batch(rng: random.Random, size: int) -> list[Experience]:
    """Rows of 0–7 prompt and 0–9 response tokens, every optional field sometimes set."""
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    all_logprobs = rng.random() < 0.8  # else one row lacks them
    with_advantages = rng.random() < 0.3
    out = []
    for i in range(size):
        prompt, response = rng.randint(0, 7), rng.randint(0, 9)
        if prompt + response == 0:
            prompt = 1
        kind = rng.choice(["scalar", "scalar", "token", "none", "int"])
        reward = {"scalar": rng.uniform(-2, 2), "int": rng.randint(-1, 1)}.get(kind)
        token_level = (torch.randn(response, generator=g, dtype=torch.float64)
                       if kind == "token" else None)
        mask = torch.rand(response, generator=g) < 0.8 if rng.random() < 0.5 else None
        logprobs = (-torch.rand(response, generator=g)
                    if all_logprobs or i != size // 2 else None)
        extra = ({"advantages": torch.randn(response, generator=g),
                  "returns": torch.randn(response, generator=g)} if with_advantages else {})
        out.append(Experience(tokens=torch.randint(0, 500, (prompt + response,), generator=g),
                              prompt_length=prompt, reward=reward, token_level_reward=token_level,
                              logprobs=logprobs, action_mask=mask,
                              eid=EID(batch=1, task=i // 3, run=i % 3), **extra))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_pad_batch_equals_the_per_row_construction(seed: int) -> None:
    rng = random.Random(seed)
    experiences = random_batch(rng, rng.choice([1, 2, 5, 17, 64]))
    pad = rng.choice([0, 7])
    assert_same(pad_batch(experiences, pad), pad_batch_per_row(experiences, pad))


def test_pad_batch_edge_cases() -> None:
    """All responses empty (the width is still 1); only token-level rewards; a teacher's
    log-probs on every row."""
    empty = [Experience(tokens=torch.tensor([5, 6, 7][: n + 1]), prompt_length=n + 1,
                        reward=1.0, eid=EID(task=n)) for n in range(3)]
    assert_same(pad_batch(empty, 0), pad_batch_per_row(empty, 0))
    tokens_only = [Experience(tokens=torch.arange(2 + n), prompt_length=2,
                              token_level_reward=torch.full((n,), 0.5 * n),
                              teacher_logprobs=-torch.ones(n), eid=EID(task=n))
                   for n in range(1, 4)]
    batch = pad_batch(tokens_only, 0)
    assert_same(batch, pad_batch_per_row(tokens_only, 0))
    assert batch.teacher_log_prob is not None and batch.rewards.abs().sum() == 0


def test_experiences_of_an_engine_call_equal_one_by_one() -> None:
    """Every field equal to the per-completion construction, truncated prompts (all-zero
    action mask) and empty responses included; each experience's tensors are its own
    length (views of one tensor per call)."""
    rng = random.Random(3)
    completions = []
    for i in range(40):
        response = [rng.randrange(500) for _ in range(rng.randint(0, 9))]
        completions.append(Completion(
            prompt_token_ids=[rng.randrange(500) for _ in range(rng.randint(1, 7))],
            token_ids=response, logprobs=-torch.rand(len(response)) if i % 5 else None,
            text=f"text {i}", finish_reason="stop" if i % 2 else "length",
            prompt_truncated=i % 7 == 3, model_version=i % 3))
    batched = experiences_from_completions(completions)
    assert len(batched) == len(completions)
    for ours, c in zip(batched, completions, strict=True):
        theirs = experience_from_completion(c)
        for name in ("tokens", "action_mask"):
            a, b = getattr(ours, name), getattr(theirs, name)
            assert a.dtype == b.dtype and torch.equal(a, b), name
        assert ours.logprobs is c.logprobs
        assert (ours.prompt_length, ours.model_version, ours.response_text, ours.info) == (
            theirs.prompt_length, theirs.model_version, theirs.response_text, theirs.info)
        assert not ours.action_mask.any() if c.prompt_truncated else ours.action_mask.all()
    assert experiences_from_completions([]) == []
