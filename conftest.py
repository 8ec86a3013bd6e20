"""Test set-up for the whole repository (core tests and every plugin's tests).

One thread and fixed seeds in every test, so results reproduce exactly on 2 cores.
"""

from __future__ import annotations

import os
import random

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _deterministic():
    """Every test starts from the same seeds with one torch thread."""
    random.seed(0)
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
