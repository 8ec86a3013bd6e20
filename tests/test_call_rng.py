"""``rft.engines.call_rng.seeded``: an engine call's draws seeded, the caller's RNG kept."""

from __future__ import annotations

import pytest
import torch

from rft.engines.call_rng import seeded

CPU = torch.device("cpu")


def test_draws_equal_those_after_torch_manual_seed() -> None:
    with seeded(CPU, 1234):
        inside = torch.rand(5)
    torch.manual_seed(1234)
    assert torch.equal(inside, torch.rand(5))


def test_the_callers_rng_state_comes_back() -> None:
    torch.manual_seed(7)
    before = torch.get_rng_state()
    with seeded(CPU, 99):
        torch.rand(3)
    assert torch.equal(torch.get_rng_state(), before)


def test_seeds_no_other_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not ``torch.manual_seed``: it also seeds every accelerator backend and, on a host
    where CUDA is not initialised, captures a stack for a lazy CUDA seeding at every call
    (~110 µs)."""
    def refuse(seed: int) -> None:
        raise AssertionError("torch.manual_seed called")

    monkeypatch.setattr(torch, "manual_seed", refuse)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", refuse)
    with seeded(CPU, 5):
        drawn = torch.rand(2)
    assert torch.equal(drawn, torch.rand(2, generator=torch.Generator().manual_seed(5)))
