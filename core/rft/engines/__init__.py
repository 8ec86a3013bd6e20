"""Inference engines (``hf``, ``vllm``, ``external``) and what every engine call shares:
batching of concurrent calls and parsing of replies. See :mod:`rft.engines.engine` for the
engine interface. The rollout loop that drives them is :mod:`rft.rollout`; the
OpenAI-compatible endpoint over them is :mod:`rft.endpoint`."""

from rft.engines.engine import Completion, InferenceEngine, SamplingArgs

__all__ = ["Completion", "InferenceEngine", "SamplingArgs"]
