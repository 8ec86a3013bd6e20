"""Weight syncs of the ``vllm`` engine: in-place reloads in chunks of whole layers, the
served LoRA adapter, and the workers' ranks of the trainer's weight-broadcast group
(``sync_method: nccl``); see :mod:`rft.engines.vllm_engine`."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from rft.adapter import AdapterWeights
from rft.engines.hf_engine import _strip_wrappers
from rft.engines.vllm_worker import (
    _join_weight_group_on_worker,
    _leave_weight_group_on_worker,
    _receive_weights_on_worker,
    _reload_weights_on_worker,
)
from rft.errors import RftError


class VLLMWeights:
    """Mixin of :class:`~rft.engines.vllm_engine.VLLMEngine`: its weight and adapter syncs."""

    llm: Any
    llm_kwargs: dict[str, Any]
    hf_config: Any
    tied_embeddings: bool
    weight_dtype: torch.dtype | None
    _lock: threading.RLock
    _param_shapes: dict[str, tuple[int, ...]]
    _packed: dict[str, list[str]]
    _model_version: int
    _lora: Any
    _lora_ids: Iterator[int]
    _lora_root: str | None
    _in_weight_group: bool

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Reload the given tensors in place (Hugging Face names), then reset the prefix
        cache. vLLM reloads whole layers: the parts of one fused layer (``q/k/v_proj``,
        ``gate/up_proj``, with their biases) must come in the same update.

        The tensors are consumed as they come (a sharded trainer gathers them one at a
        time) and sent to the workers in chunks of whole layers of about
        :attr:`sync_chunk_bytes`, cast to the engine's dtype: a sync never holds the model
        as one list, nor copies it whole to the engine-core process (vLLM's GPU default).
        A wrong name or shape stops the update there; chunks before it are loaded."""
        with self._lock:
            for chunk, retie in self._layer_chunks(named_tensors):
                self.llm.collective_rpc(_reload_weights_on_worker, args=(chunk, retie))
            if not self.llm.reset_prefix_cache():
                raise RftError("update_weights: vLLM could not reset its prefix cache")
            self._model_version = int(version)

    sync_chunk_bytes = 256 * 1024 * 1024
    """Bytes of whole layers sent to the workers per call of :meth:`update_weights`."""

    def _layer_chunks(self, named_tensors: Iterable[tuple[str, torch.Tensor]]
                      ) -> Iterator[tuple[list[tuple[str, torch.Tensor]], bool]]:
        """``(tensors, retie)``: chunks of complete vLLM layers under the loader's names, in
        the engine's dtype (``retie``: the chunk holds the tied embedding). Checks as
        :meth:`_load_plan`: known names, their shapes, whole fused layers; a tied head
        stands for the embedding when the embedding itself does not come."""
        groups: dict[str, set[str]] = {}
        for key in self._param_shapes:
            groups.setdefault(self._layer_of(key), set()).add(key)
        pending: dict[str, dict[str, torch.Tensor]] = {}
        ready: list[tuple[str, torch.Tensor]] = []
        size = 0
        head: torch.Tensor | None = None
        embed_seen = False
        dtype = self.weight_dtype

        def cast(tensor: torch.Tensor) -> torch.Tensor:
            tensor = tensor.detach()
            return tensor.to(dtype) if tensor.is_floating_point() and dtype is not None else tensor

        def take(key: str, tensor: torch.Tensor) -> None:
            nonlocal size
            layer = self._layer_of(key)
            parts = pending.setdefault(layer, {})
            parts[key] = cast(tensor)
            if groups[layer] - {"lm_head.weight"} <= set(parts):
                for item in pending.pop(layer).items():
                    ready.append(item)
                    size += item[1].numel() * item[1].element_size()

        for name, tensor in named_tensors:
            key = _strip_wrappers(name)
            expected = self._param_shapes.get(key)
            if expected is None:
                raise RftError(f"update_weights: {self.hf_config.architectures} has no "
                               f"parameter {name!r}")
            if tuple(tensor.shape) != expected:
                raise RftError(f"update_weights: {name!r} has shape {tuple(tensor.shape)}, "
                               f"the model's is {expected}")
            if self.tied_embeddings and key == "lm_head.weight":
                head = tensor if not embed_seen else None
                continue
            embed_seen = embed_seen or key == "model.embed_tokens.weight"
            take(key, tensor)
            if size >= self.sync_chunk_bytes:
                yield self._flush(ready)
                size = 0
        if head is not None and not embed_seen:
            take("model.embed_tokens.weight", head)
        for layer, parts in pending.items():
            missing = sorted(groups[layer] - set(parts) - {"lm_head.weight"})
            raise RftError(f"update_weights: vLLM reloads layer {layer!r} as a whole; "
                           f"the update lacks {', '.join(missing)}")
        if ready:
            yield self._flush(ready)

    def _flush(self, ready: list[tuple[str, torch.Tensor]]
               ) -> tuple[list[tuple[str, torch.Tensor]], bool]:
        """The chunk ``ready`` holds (emptied), and whether it re-ties the output head."""
        chunk = list(ready)
        ready.clear()
        retie = self.tied_embeddings and any(k == "model.embed_tokens.weight" for k, _ in chunk)
        return chunk, retie

    def update_adapter(self, adapter: AdapterWeights, version: int) -> None:
        """Serve ``adapter`` as ``version``: written to ``<tmp>/v<version>`` (peft's
        format), loaded as a new ``LoRARequest``; the previous one is removed."""
        from vllm.lora.request import LoRARequest

        if not self.llm_kwargs.get("enable_lora"):
            raise RftError("update_adapter: this vllm engine was built without LoRA "
                           "(model.lora_configs unset)")
        if self._lora_root is None:
            self._lora_root = tempfile.mkdtemp(prefix="rft-lora-")
        folder = adapter.save(os.path.join(self._lora_root, f"v{version}-{next(self._lora_ids)}"))
        request = LoRARequest(f"{adapter.spec.name}-{os.path.basename(folder)}",
                              int(folder.rsplit("-", 1)[1]), folder,
                              base_model_name=adapter.spec.base_model_name)
        with self._lock:
            try:
                self.llm.llm_engine.add_lora(request)
            except Exception as exc:  # vLLM's loader: unsupported modules, rank, …
                raise RftError(f"update_adapter: vLLM cannot load adapter {adapter.spec.name!r}"
                               f": {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}"
                               ) from exc
            previous, self._lora = self._lora, request
            if previous is not None:
                self.llm.llm_engine.remove_lora(previous.lora_int_id)
                shutil.rmtree(previous.lora_path, ignore_errors=True)
            if not self.llm.reset_prefix_cache():
                raise RftError("update_adapter: vLLM could not reset its prefix cache")
            self._model_version = int(version)

    def _load_plan(self, named_shapes: Sequence[tuple[str, tuple[int, ...]]]
                   ) -> list[tuple[str, int]]:
        """``(name, index)`` of each input tensor to load: wrapper prefixes stripped, names
        and shapes checked against the model, a tied head folded into the embedding, fused
        layers complete (a later tensor of the same name wins)."""
        chosen: dict[str, int] = {}
        for index, (name, shape) in enumerate(named_shapes):
            key = _strip_wrappers(name)
            expected = self._param_shapes.get(key)
            if expected is None:
                raise RftError(f"update_weights: {self.hf_config.architectures} has no "
                               f"parameter {name!r}")
            if tuple(shape) != expected:
                raise RftError(f"update_weights: {name!r} has shape {tuple(shape)}, "
                               f"the model's is {expected}")
            chosen[key] = index
        if self.tied_embeddings and "lm_head.weight" in chosen:
            head = chosen.pop("lm_head.weight")
            chosen.setdefault("model.embed_tokens.weight", head)
        groups: dict[str, set[str]] = {}
        for key in self._param_shapes:
            groups.setdefault(self._layer_of(key), set()).add(key)
        for layer in {self._layer_of(key) for key in chosen}:
            missing = sorted(groups[layer] - set(chosen) - {"lm_head.weight"})
            if missing:
                raise RftError(f"update_weights: vLLM reloads layer {layer!r} as a whole; "
                               f"the update lacks {', '.join(missing)}")
        return list(chosen.items())

    # ---- sync_method nccl: the workers are ranks of the trainer's broadcast group -------

    def weight_group_ranks(self) -> int:
        """One rank per vLLM worker (``tensor_parallel_size × pipeline_parallel_size``)."""
        return int(self.llm.llm_engine.vllm_config.parallel_config.world_size)

    def join_weight_group(self, address: Any, first_rank: int) -> None:
        """Worker ``i`` (vLLM's rank) joins the group as rank ``first_rank + i``."""
        with self._lock:  # plain values: vLLM's RPC turns dataclasses into dicts
            self.llm.collective_rpc(_join_weight_group_on_worker,
                                    args=(dataclasses.asdict(address), first_rank))
        self._in_weight_group = True

    def receive_broadcast(self, broadcast: Any, version: int) -> None:
        """Every worker receives the whole broadcast (tensor-parallel workers load their
        shard of it), reloads in place; then the prefix cache is reset."""
        spec = broadcast.spec
        plan = self._load_plan([(item.name, item.shape) for item in spec])
        with self._lock:
            self.llm.collective_rpc(_receive_weights_on_worker,
                                    args=([item.to_plain() for item in spec], plan,
                                          self.tied_embeddings))
            if not self.llm.reset_prefix_cache():
                raise RftError("update_weights: vLLM could not reset its prefix cache")
            self._model_version = int(version)

    def leave_weight_group(self) -> None:
        if self.__dict__.pop("_in_weight_group", False) and "llm" in self.__dict__:
            with self._lock:
                self.llm.collective_rpc(_leave_weight_group_on_worker)

    def _layer_of(self, name: str) -> str:
        """vLLM module holding a Hugging Face parameter (q/k/v_proj → qkv_proj, …)."""
        module = name.rpartition(".")[0]
        parent, _, leaf = module.rpartition(".")
        for fused, parts in self._packed.items():
            if leaf in parts:
                return f"{parent}.{fused}" if parent else fused
        return module
