"""Fixtures of rft-plugin-workflows' tests: the tiny model as an auxiliary (judge) model,
scripted judges, and workflow classes bound to auxiliary models for ``check_workflow``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rft.experience import Experience


@pytest.fixture(scope="session")
def judge(rft_tiny_model):
    """The tiny model in its own ``hf`` engine, named ``judge`` — what
    ``explorer.auxiliary_models: [{name: judge, model_path: <tiny>, engine_type: hf}]``
    builds (``rft.rollout.auxiliary``)."""
    from rft.engines.engine import SamplingArgs
    from rft.engines.hf_engine import HFEngine
    from rft.rollout.model_wrapper import ModelWrapper

    engine = HFEngine(str(rft_tiny_model), max_model_len=2048, max_response_tokens=8, seed=1)
    return ModelWrapper(engine, SamplingArgs(temperature=1.0, max_tokens=8), name="judge")


class ScriptedJudge:
    """An auxiliary model that always replies with the given texts in turn (one per call),
    recording the conversations it was sent."""

    def __init__(self, *replies: str, name: str = "judge") -> None:
        self.replies = list(replies)
        self.name = name
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    def chat(self, messages, n: int = 1, **sampling) -> list[Experience]:
        self.calls.append((list(messages), dict(sampling)))
        text = self.replies[(len(self.calls) - 1) % len(self.replies)]
        return [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, response_text=text)
                for _ in range(n)]

    def decode(self, ids) -> str:
        return ""


@pytest.fixture
def scripted_judge():
    return ScriptedJudge


def bind_auxiliary(cls: type, *models: Any) -> type:
    """``cls`` with ``models`` as its auxiliary models (as the explorer passes them), for
    ``check_workflow``, which builds ``cls(task, model)``."""

    class Bound(cls):  # type: ignore[misc, valid-type]
        def __init__(self, task, model, auxiliary_models=None):
            super().__init__(task, model, auxiliary_models=list(models))

    Bound.__name__ = Bound.__qualname__ = cls.__name__
    return Bound


@pytest.fixture
def bind():
    return bind_auxiliary
