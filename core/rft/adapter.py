"""LoRA adapters as they travel from the trainer to the engines (and to disk).

A weight sync with ``model.lora_configs`` moves only the adapter: an
:class:`AdapterWeights` — its :class:`LoraSpec` (rank, alpha, the modules it adapts) and
its tensors under peft's saved names — instead of the model's weights. Engines that
serve adapters take it through :meth:`rft.engines.engine.InferenceEngine.update_adapter`;
the trainer (:mod:`rft.trainer.lora`) builds it. This module sits below both.

Names are those of peft's ``adapter_model.safetensors``: the trainer's parameter name
without the adapter's name, e.g. ``base_model.model.model.layers.0.self_attn.q_proj.
lora_A.weight`` (``(r, in)``) and ``….lora_B.weight`` (``(out, r)``). The adapted layer
computes::

    y = W x + (alpha / r) · B A x

:meth:`AdapterWeights.save` / :meth:`AdapterWeights.load` read and write peft's
``save_pretrained`` folder (``adapter_config.json`` + ``adapter_model.safetensors``), which
``peft.PeftModel.from_pretrained`` and vLLM's ``LoRARequest`` load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from rft.errors import RftError
from rft.tensor_wire import NamedTensors

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class LoraSpec:
    """What an engine needs to serve an adapter besides its tensors."""

    name: str
    """Adapter name (``model.lora_configs[0].name``, else ``default``)."""
    rank: int
    """``r``: rows of ``A``, columns of ``B``."""
    alpha: int
    """Scale numerator: the update is ``(alpha / r) · B A``."""
    target_modules: tuple[str, ...]
    """The modules the adapter holds tensors for (full module names, as peft resolved
    ``target_modules`` / ``exclude_modules`` on the base model)."""
    base_model_name: str | None = None
    """The base model the adapter belongs to (written to ``adapter_config.json``)."""

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def to_plain(self) -> dict[str, Any]:
        """Plain data (checkpoints, messages)."""
        return {"name": self.name, "rank": self.rank, "alpha": self.alpha,
                "target_modules": list(self.target_modules),
                "base_model_name": self.base_model_name}

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> LoraSpec:
        return cls(name=str(plain["name"]), rank=int(plain["rank"]), alpha=int(plain["alpha"]),
                   target_modules=tuple(plain["target_modules"]),
                   base_model_name=plain.get("base_model_name"))

    def peft_config(self) -> Any:
        """The ``peft.LoraConfig`` of this adapter (no dropout, no bias)."""
        from peft import LoraConfig

        return LoraConfig(r=self.rank, lora_alpha=self.alpha,
                          target_modules=list(self.target_modules), lora_dropout=0.0,
                          bias="none", task_type="CAUSAL_LM",
                          base_model_name_or_path=self.base_model_name)


@dataclass(frozen=True)
class AdapterWeights:
    """A LoRA adapter: its spec and its tensors (peft's saved names; see the module
    docstring). Pickles its tensors as raw buffers (:class:`rft.tensor_wire.NamedTensors`)."""

    spec: LoraSpec
    tensors: NamedTensors

    @property
    def nbytes(self) -> int:
        """Bytes of the tensors: what a sync moves."""
        return sum(t.numel() * t.element_size() for _, t in self.tensors)

    def save(self, directory: str) -> str:
        """Write peft's ``save_pretrained`` folder; return ``directory``."""
        from safetensors.torch import save_file

        os.makedirs(directory, exist_ok=True)
        config = self.spec.peft_config().to_dict()
        config["target_modules"] = sorted(self.spec.target_modules)
        config["peft_type"] = str(config.get("peft_type", "LORA")).rsplit(".", 1)[-1]
        with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as handle:
            json.dump(_plain(config), handle, indent=2, sort_keys=True)
        save_file({name: t.detach().contiguous() for name, t in self.tensors},
                  os.path.join(directory, WEIGHTS_FILE), metadata={"format": "pt"})
        return directory

    @classmethod
    def load(cls, directory: str, *, key: str = "adapter", name: str | None = None
             ) -> AdapterWeights:
        """Read peft's ``save_pretrained`` folder (``adapter_model.safetensors``, else
        ``adapter_model.bin``). ``key`` names the source in the one-line error."""
        config_path = os.path.join(directory, CONFIG_FILE)
        try:
            with open(config_path, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError) as exc:
            raise RftError(f"{key}: {directory!r} is not a LoRA adapter folder (cannot read "
                           f"{CONFIG_FILE}: {exc})") from exc
        if str(config.get("peft_type", "LORA")).upper() != "LORA":
            raise RftError(f"{key}: {directory!r} holds a {config.get('peft_type')} adapter, "
                           "not LoRA")
        tensors = _read_tensors(directory, key)
        targets = config.get("target_modules") or ()
        if isinstance(targets, str):  # a regex: name the modules the tensors belong to
            targets = modules_of(tensors)
        spec = LoraSpec(name=name or "default", rank=int(config["r"]),
                        alpha=int(config.get("lora_alpha", config["r"])),
                        target_modules=tuple(sorted(targets)),
                        base_model_name=config.get("base_model_name_or_path"))
        return cls(spec, NamedTensors(sorted(tensors.items())))


def is_adapter_folder(directory: str) -> bool:
    """``directory`` holds a peft adapter (``adapter_config.json``)."""
    return os.path.isfile(os.path.join(directory, CONFIG_FILE))


def modules_of(tensors: Iterable[str] | dict[str, torch.Tensor]) -> list[str]:
    """The module names (peft's ``base_model.model.`` prefix removed) that adapter tensor
    names belong to."""
    out = set()
    for name in tensors:
        module = name.split(".lora_", 1)[0]
        out.add(module.removeprefix("base_model.model."))
    return sorted(out)


def _read_tensors(directory: str, key: str) -> dict[str, torch.Tensor]:
    path = os.path.join(directory, WEIGHTS_FILE)
    try:
        if os.path.isfile(path):
            from safetensors.torch import load_file

            return load_file(path)
        binary = os.path.join(directory, "adapter_model.bin")
        return torch.load(binary, map_location="cpu", weights_only=True)
    except Exception as exc:  # missing, truncated or foreign files
        raise RftError(f"{key}: cannot read the adapter weights in {directory!r}: "
                       f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                       ) from exc


def _plain(value: Any) -> Any:
    """JSON-able form of peft's config dict (sets → sorted lists, enums → values)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, (int, float, str, bool)):
        return value.value
    return value


__all__ = [
    "ALL_LINEAR",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "AdapterWeights",
    "LoraSpec",
    "is_adapter_folder",
    "modules_of",
]
