"""Shared test set-up: one thread, fixed seeds, tests/ on sys.path for helper modules."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _deterministic():
    """Every test starts from the same seeds with one torch thread."""
    random.seed(0)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        return
    torch.manual_seed(0)
    torch.set_num_threads(1)
