"""LoRA (``model.lora_configs``) on the verl trainer: veRL 0.9.1's own peft path, fed and
read the way rft's native LoRA trainer (:mod:`rft.trainer.lora`) is.

- **Config** (:func:`model_values`): ``model.lora_configs[0]`` → veRL's
  ``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` / ``target_modules`` /
  ``exclude_modules`` / ``lora_adapter_path``. veRL's FSDP engine then wraps the actor
  with peft (``_build_lora_module``): the base frozen, only the adapter trainable,
  ``y = W x + (alpha / r) · B A x``; no dropout, no bias (as rft's adapter).
- **Initial adapter** (:func:`initial_adapter`): ``lora_configs[0].path`` when set;
  otherwise a fresh adapter drawn exactly as the native trainer draws it
  (:func:`rft.trainer.lora.apply_lora`: ``A`` from the seed ``INIT_SEED``, ``B = 0``) on
  the model's structure without its weights, written in peft's format to a temporary
  folder and handed to veRL as ``lora_adapter_path`` (veRL's own draw would depend on the
  process's random state): both backends start one config from the same adapter.
- **Reference model** (:class:`AdapterDisabledRef`): veRL's ``ref_in_actor`` — the
  reference log-probs are the actor's with its adapter disabled (``no_lora_adapter`` in the
  batch, as ``RayPPOTrainer._compute_ref_log_prob`` sends it): no second copy.
- **Sync** (:func:`adapter_weights`): the adapter's tensors from the engine's
  ``get_per_tensor_param(layered_summon=False, base_sync_done=True)`` (veRL's adapter-only
  export, peft's saved names) as :class:`rft.adapter.AdapterWeights`, what the native
  trainer hands the synchronizer; :func:`merged_weights`: the Hugging Face weights with
  the adapter merged in (``W + (alpha / r) · B A``).
- **Checkpoints and export**: :func:`state_options` (the ``actor`` entry holds the
  adapter only, as the native trainer's), :func:`check_adapter_state`, :func:`export`
  (peft's ``save_pretrained`` folder, ``merged/`` with ``trainer.save_hf_merged``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import torch
from rft.adapter import AdapterWeights, LoraSpec
from rft.config.lora import modules_arg
from rft.config.schema import LoRAConfig
from rft.errors import RftError
from rft.tensor_wire import NamedTensors
from rft.trainer import lora as lora_ops

MODEL = "actor_rollout_ref.model"
"""veRL's model section of the actor (and of the reference / rollout it shares)."""

AUTO_DTYPE = "auto"
"""The only ``lora_dtype`` veRL keeps: its FSDP engine casts the adapter to the base
model's dtype (float32 master weights)."""


def model_values(lora: LoRAConfig) -> dict[str, Any]:
    """veRL's ``actor_rollout_ref.model`` LoRA keys (relative) from ``lora``.
    ``lora_adapter_path`` is ``lora.path`` (``None``: the trainer sets the fresh adapter's
    folder, :func:`initial_adapter`)."""
    return {
        "lora_rank": int(lora.lora_rank),
        "lora_alpha": int(lora.lora_alpha),
        "target_modules": modules_arg(lora.target_modules),
        "exclude_modules": modules_arg(lora.exclude_modules),
        "lora_adapter_path": os.path.expanduser(lora.path) if lora.path else None,
    }


def config_problems(lora: LoRAConfig) -> list[str]:
    """What the verl trainer cannot honour in ``lora`` (one line each)."""
    problems = []
    if lora.lora_dtype != AUTO_DTYPE:
        problems.append(f"{lora_ops.KEY}.lora_dtype: the verl trainer keeps the adapter in the "
                        f"base model's dtype (veRL's FSDP engine casts it); got "
                        f"{lora.lora_dtype!r}, use auto")
    return problems


@contextlib.contextmanager
def initial_adapter(model: Any, lora: LoRAConfig | None, actor_tree: Any) -> Iterator[None]:
    """While veRL builds the actor: ``actor_tree.model.lora_adapter_path`` names the
    adapter it starts from — ``lora.path``, or a fresh adapter (see the module docstring)
    in a temporary folder removed afterwards. Nothing without LoRA.

    :param model: rft's ``model`` section (``model_path``, ``trust_remote_code``).
    :param actor_tree: veRL's ``actor_rollout_ref`` node handed to the worker.
    """
    if lora is None or lora.path:
        yield
        return
    folder = tempfile.mkdtemp(prefix="rft-verl-lora-")
    try:
        fresh_adapter(model.model_path, lora, bool(model.trust_remote_code)).save(folder)
        actor_tree.model.lora_adapter_path = folder
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fresh_adapter(model_path: str, lora: LoRAConfig, trust_remote_code: bool
                  ) -> AdapterWeights:
    """The adapter :func:`rft.trainer.lora.apply_lora` inserts into the model at
    ``model_path`` (same seed, same draws in the same module order), built on the model's
    structure only: the base is made on the meta device and given uninitialised CPU
    storage (never written, never read), so no weights are loaded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = os.path.expanduser(model_path)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                        trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise RftError(f"model.model_path: cannot read the model's structure from "
                       f"{model_path!r}: {str(exc).splitlines()[0]}") from exc
    skeleton.to_empty(device="cpu")
    adapted = lora_ops.apply_lora(skeleton, lora, base_model_name=model_path)
    spec = lora_ops.lora_spec(adapted, lora, model_path)
    adapter = lora_ops.adapter_weights(adapted, spec)
    assert adapter is not None
    return adapter


class AdapterDisabledRef:
    """The reference policy of a LoRA run on veRL (``ref_in_actor``): the actor worker's
    ``compute_log_prob`` with its adapter disabled. Stands where the trainer keeps a
    reference worker (``ref_worker``), with the one method the trainer calls."""

    def __init__(self, actor_worker: Any) -> None:
        self.actor_worker = actor_worker

    def compute_ref_log_prob(self, data: Any) -> Any:
        """veRL's ``RayPPOTrainer._compute_ref_log_prob`` with ``ref_in_actor``: the batch
        carries ``no_lora_adapter`` and goes to the actor."""
        from verl.utils import tensordict_utils as tu

        tu.assign_non_tensor(data, no_lora_adapter=True)
        return self.actor_worker.compute_log_prob(data)


def spec_of(module: torch.nn.Module, lora: LoRAConfig, model_path: str) -> LoraSpec:
    """The :class:`rft.adapter.LoraSpec` of veRL's peft actor (as peft resolved its
    target modules; the rank and alpha of the adapter veRL loaded)."""
    return lora_ops.lora_spec(module, lora, model_path)


def adapter_weights(engine: Any, spec: LoraSpec) -> AdapterWeights:
    """The adapter as CPU copies under peft's saved names (``….lora_A.weight`` ``(r, in)``,
    ``….lora_B.weight`` ``(out, r)``), from veRL's adapter-only export
    (``get_per_tensor_param(layered_summon=False, base_sync_done=True)``)."""
    params, peft_config = engine.get_per_tensor_param(layered_summon=False, base_sync_done=True)
    if peft_config is None:
        raise RftError("trainer: veRL's actor holds no LoRA adapter (model.lora_configs is set)")
    tensors = [(name, _whole(tensor).detach().to("cpu", copy=True).contiguous())
               for name, tensor in params]
    return AdapterWeights(spec, NamedTensors(tensors))


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded parameter (``DTensor``) gathered whole."""
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def merged_weights(state: Iterator[tuple[str, torch.Tensor]], keep: set[str], spec: LoraSpec
                   ) -> Iterator[tuple[str, torch.Tensor]]:
    """The actor's Hugging Face weights with the adapter merged in,
    ``W' = W + (alpha / r) · B A`` (:func:`rft.trainer.lora.merged_weights`), from the peft
    model's full ``state`` (each shared tensor once: names in ``keep``)."""
    return lora_ops.merged_weights(((n, t) for n, t in state if n in keep), spec.scale)


def adapter_names(module: torch.nn.Module) -> list[str]:
    """The actor's adapter parameters (its trainable ones), in model order."""
    return lora_ops.adapter_tensor_names(module)


def check_adapter_state(module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """A LoRA checkpoint's ``actor`` entry holds every adapter tensor of ``module``."""
    missing = [name for name in adapter_names(module) if name not in state]
    if missing:
        raise RftError(f"trainer checkpoint: the actor's adapter lacks {len(missing)} "
                       f"tensor(s), e.g. {missing[0]} (a checkpoint of another lora_configs, "
                       "or of a run without LoRA?)")


def export(module: torch.nn.Module, spec: LoraSpec, path: str, *, merged: bool,
           tokenizer_path: str | None, state: Iterator[tuple[str, torch.Tensor]],
           is_rank0: bool = True) -> None:
    """peft's ``save_pretrained`` folder at ``path`` and, with ``merged``, the merged
    model in ``path/merged`` (:func:`rft.trainer.lora.export`); ``state`` is the peft
    model's full state (tensors gathered on the CPU). With several ranks every rank calls
    it (the adapter is gathered by all) and rank 0 (``is_rank0``) writes."""
    lora_ops.export(module, spec, path, merged=merged, tokenizer_path=tokenizer_path,
                    is_rank0=is_rank0, stream=state)


__all__ = ["AdapterDisabledRef", "adapter_names", "adapter_weights", "check_adapter_state",
           "config_problems", "export", "fresh_adapter", "initial_adapter", "merged_weights",
           "model_values", "spec_of"]
