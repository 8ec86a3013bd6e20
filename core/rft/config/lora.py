"""``model.lora_configs``: its peft form and its validation (:func:`check_lora`, one of
:data:`rft.config.check.CHECKS`).

``target_modules`` (one string) becomes peft's argument by :func:`modules_arg`:
``all-linear`` (every linear layer but the output head), a comma-separated list of module
names (``q_proj,v_proj``: peft matches a name or a dotted suffix), or a regular expression
over full module names (peft's ``re.fullmatch``); ``exclude_modules`` takes the same forms.

Validation:
One adapter at most; peft installed; a trainer backend that trains adapters and a rollout
engine that serves them (their ``supports_lora`` / ``serves_lora`` class attributes);
weights synced in memory or through checkpoints; sane rank, alpha and dtype; and, when
``model.model_path`` is a local folder, a ``target_modules`` that matches some module of
the model (built on the meta device: no weights are read). The vLLM-only fields and
``trainer.save_hf_merged`` are warnings without LoRA.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import TYPE_CHECKING, Any

from rft.config.findings import Findings
from rft.config.plan import ModelPlan, Selected
from rft.config.schema import LoRAConfig, RftConfig

if TYPE_CHECKING:
    from torch import nn

KEY = "model.lora_configs"
ALL_LINEAR = "all-linear"
LORA_DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
_NAME_LIST = re.compile(r"^[\w.\-]+(\s*,\s*[\w.\-]+)*$")


def modules_arg(text: str | None) -> str | list[str] | None:
    """peft's ``target_modules`` / ``exclude_modules`` from rft's one string (see the module
    docstring): ``all-linear``, a list of names, or a regex."""
    if text is None:
        return None
    text = text.strip()
    if text == ALL_LINEAR:
        return ALL_LINEAR
    if _NAME_LIST.match(text):
        return [part.strip() for part in text.split(",")]
    return text


def peft_config(lora: LoRAConfig, base_model_name: str | None) -> Any:
    """The ``peft.LoraConfig`` of ``lora`` (no dropout, no bias, as veRL's actor)."""
    from peft import LoraConfig

    return LoraConfig(r=lora.lora_rank, lora_alpha=lora.lora_alpha,
                      target_modules=modules_arg(lora.target_modules),
                      exclude_modules=modules_arg(lora.exclude_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                      base_model_name_or_path=lora.base_model_name or base_model_name)


def is_no_match(exc: BaseException) -> bool:
    """peft's error for a ``target_modules`` that matches no module."""
    return "not found in the base model" in str(exc) or type(exc).__name__.startswith("NoMatch")


def no_match_message(lora: LoRAConfig, model: nn.Module) -> str:
    """One line: ``target_modules`` adapts no module of ``model`` (with the linear layers
    it could name)."""
    from torch import nn

    linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                     if isinstance(module, nn.Linear)})
    excluded = f" (after exclude_modules {lora.exclude_modules!r})" if lora.exclude_modules else ""
    return (f"{KEY}[0].target_modules: {lora.target_modules!r} matches no module of "
            f"{type(model).__name__}{excluded}; its linear layers: {', '.join(linear)}")
EXPLORING_MODES = ("colocate", "both", "explore", "bench")
"""Modes that build a rollout engine (which then serves the adapter)."""


def check_lora(c: RftConfig, v: Findings, trainer_type: Selected[Any] | None,
               rollout: ModelPlan | None) -> None:
    """``model.lora_configs`` against the rest of the config (see the module docstring)."""
    configs = c.model.lora_configs or []
    if not configs:
        _unused_fields(c, v)
        return
    if len(configs) > 1:
        v.problem(KEY, f"{len(configs)} adapters given; rft trains one LoRA adapter per run "
                  "(keep one entry)")
        return
    lora, key = configs[0], f"{KEY}[0]"
    if importlib.util.find_spec("peft") is None:
        v.problem(KEY, "LoRA training needs peft, which is not installed (pip install peft, "
                  "or the project's 'lora' extra)")
        return
    trainer = trainer_type.implementation if trainer_type is not None else None
    if trainer is not None and not getattr(trainer, "supports_lora", False):
        v.problem(KEY, f"trainer.trainer_type {c.trainer.trainer_type!r} does not train LoRA "
                  "adapters; use trainer_type 'torch'")
    engine = rollout.engine if rollout is not None else None
    if c.mode in EXPLORING_MODES and engine is not None and \
            not getattr(engine.implementation, "serves_lora", False):
        v.problem(KEY, f"explorer.rollout_model.engine_type {engine.name!r} cannot serve a LoRA "
                  "adapter; use 'hf' or 'vllm'")
    if c.synchronizer.sync_method == "nccl":
        v.problem(KEY, "synchronizer.sync_method 'nccl' broadcasts whole weights; with LoRA "
                  "use 'memory' (the adapter only) or 'checkpoint'")
    _adapter_fields(lora, key, v)
    if lora.path is None and not any(p.startswith(f"{key}.target_modules") for p in v.problems):
        problem = target_modules_problem(c.model.model_path, lora, c.model.trust_remote_code)
        if problem is not None:
            v.problem(f"{key}.target_modules", problem)


def _adapter_fields(lora: LoRAConfig, key: str, v: Findings) -> None:
    if lora.lora_rank < 1:
        v.problem(f"{key}.lora_rank", f"must be >= 1, got {lora.lora_rank}")
    if lora.lora_alpha <= 0:
        v.problem(f"{key}.lora_alpha", f"must be > 0, got {lora.lora_alpha}")
    if lora.lora_dtype not in LORA_DTYPES:
        v.problem(f"{key}.lora_dtype", f"unknown dtype {lora.lora_dtype!r}; use "
                  + ", ".join(LORA_DTYPES))
    for field in ("target_modules", "exclude_modules"):
        text = getattr(lora, field)
        if text is None:
            continue
        if not str(text).strip():
            v.problem(f"{key}.{field}", "is empty; use all-linear, module names or a regex")
            continue
        try:
            re.compile(text)
        except re.error as exc:
            v.problem(f"{key}.{field}", f"{text!r} is not a valid regular expression: {exc}")
    if lora.path is not None:
        path = os.path.expanduser(lora.path)
        if not os.path.isfile(os.path.join(path, "adapter_config.json")):
            v.problem(f"{key}.path", f"{lora.path!r} is not a LoRA adapter folder (no "
                      "adapter_config.json; peft's save_pretrained writes one)")


def target_modules_problem(model_path: str, lora: LoRAConfig, trust_remote_code: bool
                           ) -> str | None:
    """Why ``lora``'s ``target_modules`` (less ``exclude_modules``) adapts no module of the
    model at ``model_path``; ``None`` when it adapts some, or when the model's config is
    not a local folder this check can read (the trainer then says it when it loads)."""
    if not os.path.isfile(os.path.join(os.path.expanduser(model_path), "config.json")):
        return None
    import torch
    from peft import get_peft_model
    from transformers import AutoConfig

    from rft.multimodal.models import auto_model_class

    try:
        config = AutoConfig.from_pretrained(os.path.expanduser(model_path),
                                            trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = auto_model_class(config).from_config(config,
                                                         trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 (not loadable here: the trainer reports it)
        return None
    try:
        get_peft_model(model, peft_config(lora, model_path))
    except ValueError as exc:
        if is_no_match(exc):
            return no_match_message(lora, model).split(": ", 1)[1]
        return f"peft cannot build the adapter: {str(exc).splitlines()[0]}"
    return None


def _unused_fields(c: RftConfig, v: Findings) -> None:
    """Fields that act only with an adapter: a warning each when set without one."""
    unused: list[tuple[str, Any]] = [("model.fully_sharded_loras", c.model.fully_sharded_loras),
                                     ("model.max_cpu_loras", c.model.max_cpu_loras),
                                     ("trainer.save_hf_merged", c.trainer.save_hf_merged)]
    for key, value in unused:
        if value not in (None, False):
            v.warnings.append(f"{key}: has an effect only with model.lora_configs; ignored")


__all__ = ["ALL_LINEAR", "KEY", "check_lora", "is_no_match", "modules_arg", "no_match_message",
           "peft_config", "target_modules_problem"]
