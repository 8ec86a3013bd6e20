"""The model an LLM-scoring operator asks: one of the models rft knows how to run.

``api_or_hf_model`` names, in this order:

1. an auxiliary model of the run (``explorer.auxiliary_models[i].name``): its own engine
   (``hf``, ``vllm``, ``external``, …) built as the explorer builds it;
2. an ``http://`` / ``https://`` URL: the ``external`` engine (an OpenAI-compatible
   server; ``model_name``: the one model the server lists unless ``model_name`` is given);
3. a local model folder: the ``hf`` engine (transformers ``generate``) on the CPU.

Anything else is one line naming the operator's ``api_or_hf_model`` key.
"""

from __future__ import annotations

import os
from typing import Any

from rft.data.task_operator import TaskOperatorContext
from rft.engines.engine import InferenceEngine
from rft.errors import RftError

CALLS = {"chat": 0}
"""Conversations sent to a scoring model in this process (tests read it: a cached rerun
sends none)."""


def spec_kind(spec: str, auxiliary_models: frozenset[str] | set[str]) -> str | None:
    """``"auxiliary"``, ``"url"`` or ``"folder"``: what ``spec`` names (see the module
    docstring); ``None``: none of them here."""
    if spec in auxiliary_models:
        return "auxiliary"
    if spec.startswith(("http://", "https://")):
        return "url"
    return "folder" if os.path.isdir(os.path.expanduser(spec)) else None


def build_scorer(spec: str, model_name: str | None, context: TaskOperatorContext | None,
                 key: str) -> InferenceEngine:
    """The engine ``spec`` names (see the module docstring)."""
    kind = spec_kind(spec, set(context.auxiliary_models) if context else set())
    if kind == "auxiliary" and context is not None:
        return context.auxiliary_models[spec].build()
    if kind == "url":
        from rft.engines.external_engine import ExternalEngine

        return ExternalEngine(spec, model_name=model_name)
    if kind == "folder":
        from rft.engines.hf_engine import HFEngine

        return HFEngine(os.path.expanduser(spec), max_prompt_tokens=1024,
                        max_response_tokens=64, enable_prompt_truncation=True)
    known = ", ".join(sorted(context.auxiliary_models)) if context else ""
    raise RftError(f"{key}: {spec!r} is neither an auxiliary model of the run "
                   f"(explorer.auxiliary_models names: {known or 'none'}), an http(s) URL of "
                   "an OpenAI-compatible server, nor a local model folder")


def ask(engine: InferenceEngine, conversations: list[list[dict[str, Any]]],
        max_tokens: int) -> list[str]:
    """Each conversation's greedy reply text."""
    from rft.engines.engine import SamplingArgs

    CALLS["chat"] += len(conversations)
    completions = engine.chat(conversations, SamplingArgs(temperature=0.0, max_tokens=max_tokens,
                                                          logprobs=False, seed=0))
    return [c[0].text for c in completions]
