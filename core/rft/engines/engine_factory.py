"""Building an inference engine and its sampling defaults from a config.

Used for the rollout model (every mode) and, through a config whose rollout model is the
auxiliary one (:func:`rft.rollout.auxiliary.engine_config`), for auxiliary models.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rft.adapter import AdapterWeights
from rft.chat_template import model_chat_template
from rft.config.schema import RftConfig
from rft.engines.engine import InferenceEngine, SamplingArgs


def build_engine(config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
    """The rollout engine of a stage (an engine class may provide ``from_config``). With
    ``model.lora_configs[0].path`` it serves that adapter from the start (model version 0);
    a fresh adapter (``B = 0``) is the base model, which it serves as it is."""
    engine = _build(config, engine_cls)
    lora = config.model.lora_configs[0] if config.model.lora_configs else None
    if lora is not None and lora.path:
        adapter = AdapterWeights.load(os.path.expanduser(lora.path),
                                      key="model.lora_configs[0].path", name=lora.name)
        engine.update_adapter(adapter, version=0)
    return engine


def _build(config: RftConfig, engine_cls: type[InferenceEngine]) -> InferenceEngine:
    factory = getattr(engine_cls, "from_config", None)
    if factory is not None:
        return factory(config)
    m, rm = config.model, config.explorer.rollout_model
    rope: dict[str, Any] = {}  # model.rope_scaling / rope_theta, as the trainer loads it
    if m.rope_scaling:
        rope["rope_scaling"] = m.rope_scaling
    if m.rope_theta is not None:
        rope["rope_theta"] = m.rope_theta
    # an engine class is built from the model path and settings beyond the base's keywords
    constructor: Callable[..., InferenceEngine] = engine_cls
    return constructor(
        rm.model_path or m.model_path, dtype=rm.dtype, trust_remote_code=m.trust_remote_code,
        **rope,
        max_model_len=rm.max_model_len or m.max_model_len,
        max_prompt_tokens=rm.max_prompt_tokens or m.max_prompt_tokens,
        max_response_tokens=rm.max_response_tokens or m.max_response_tokens,
        enable_prompt_truncation=(m.enable_prompt_truncation if rm.enable_prompt_truncation is None
                                  else rm.enable_prompt_truncation),
        chat_template=model_chat_template(config),
        enable_thinking=rm.enable_thinking if rm.enable_thinking is not None else m.enable_thinking,
        seed=rm.seed,
    )


def default_sampling(config: RftConfig) -> SamplingArgs:
    """Sampling defaults from the ``model`` section, with the rollout model's overrides."""
    m, rm = config.model, config.explorer.rollout_model

    def pick(override: Any, default: Any) -> Any:
        return default if override is None else override

    return SamplingArgs(temperature=m.temperature, top_p=m.top_p, top_k=m.top_k,
                        max_tokens=pick(rm.max_response_tokens, m.max_response_tokens),
                        min_tokens=pick(rm.min_response_tokens, m.min_response_tokens),
                        repetition_penalty=pick(rm.repetition_penalty, m.repetition_penalty),
                        ignore_eos=rm.ignore_eos)
