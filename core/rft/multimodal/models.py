"""Which transformers auto class loads a checkpoint: vision-language or text."""

from __future__ import annotations

from typing import Any


def is_vision_config(config: Any) -> bool:
    """Whether a transformers config is a vision-language model's (it has a
    ``vision_config``)."""
    return getattr(config, "vision_config", None) is not None


def auto_model_class(config: Any) -> Any:
    """``AutoModelForImageTextToText`` for a vision-language config (Qwen2-VL & co., whose
    ``…ForConditionalGeneration`` class is not an ``AutoModelForCausalLM``), else
    ``AutoModelForCausalLM``."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vision_config(config) else AutoModelForCausalLM
