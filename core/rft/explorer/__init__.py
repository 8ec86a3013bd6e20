"""The explorer side: inference engines (``hf``, later ``vllm`` / ``openai``) and what
drives them. See :mod:`rft.explorer.engine` for the engine interface."""

from rft.explorer.engine import Completion, InferenceEngine, SamplingArgs

__all__ = ["Completion", "InferenceEngine", "SamplingArgs"]
