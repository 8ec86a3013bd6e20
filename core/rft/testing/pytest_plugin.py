"""rft's pytest plugin for plugin authors (entry point ``pytest11: rft``).

Loaded by pytest in every environment where ``rft-framework`` is installed; it imports
nothing heavy at load time (no torch, hypothesis or transformers: each fixture imports
what it needs), so a test session without the ``testing`` extra still starts.

Fixtures (prefixed ``rft_`` so they never clash with a project's own):

``rft_tiny_model`` (session)
    directory of a tiny random Qwen2 + ChatML tokenizer
    (:func:`rft.testing.tiny_model.build_tiny_model`), built once per session.
``rft_tiny_taskset``
    a JSONL taskset of 8 arithmetic rows ``{"question": "3+1=", "answer": "4"}``.
``rft_model`` (session)
    a :class:`~rft.rollout.model_wrapper.ModelWrapper` over the ``hf`` engine on the
    tiny model, for :func:`rft.testing.checks.check_workflow`.
``rft_run``
    ``rft_run(overrides=None, *, plugins=(), steps=2) -> RunOutcome``: a colocate GRPO
    run on the tiny model and taskset (:func:`rft.testing.runs.run_tiny`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rft.rollout.model_wrapper import ModelWrapper
    from rft.testing.runs import RunOutcome


@pytest.fixture(scope="session")
def rft_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the tiny random Qwen2 model + tokenizer (seed 0), built once."""
    from rft.testing.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("rft_tiny_model"), seed=0)


@pytest.fixture
def rft_tiny_taskset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL taskset: 8 rows ``{"question": "i+1=", "answer": "i+1"}``."""
    from rft.testing.runs import write_taskset

    return write_taskset(tmp_path_factory.mktemp("rft_taskset") / "tasks.jsonl")


@pytest.fixture(scope="session")
def rft_model(rft_tiny_model: Path) -> ModelWrapper:
    """The tiny model behind the ``hf`` engine (fp32, seed 0, at most 8 new tokens)."""
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.rollout.model_wrapper import ModelWrapper

    engine = HFEngine(str(rft_tiny_model), max_model_len=256, max_response_tokens=8, seed=0)
    return ModelWrapper(engine, SamplingArgs(temperature=1.0, max_tokens=8))


@pytest.fixture
def rft_run(rft_tiny_model: Path, rft_tiny_taskset: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Callable[..., RunOutcome]:
    """``rft_run(overrides=None, *, plugins=(), steps=2) -> RunOutcome``.

    Runs a colocate GRPO config on the tiny model and taskset (``hf`` engine, fp32,
    ``jsonl`` monitor; :func:`rft.testing.runs.tiny_run_config`) with ``overrides``
    merged in (nested dict, or dotted keys such as ``"algorithm.policy_loss_fn"``), and
    ``plugins`` (modules or objects with ``@hookimpl`` methods) registered besides the
    installed ones. Each call runs in a fresh directory.
    """
    from rft.testing.runs import run_tiny

    def run(overrides: Mapping[str, Any] | None = None, *, plugins: Sequence[object] = (),
            steps: int = 2) -> RunOutcome:
        return run_tiny(rft_tiny_model, rft_tiny_taskset, tmp_path_factory.mktemp("rft_run"),
                        overrides, plugins=plugins, steps=steps)

    return run
