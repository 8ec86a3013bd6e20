"""The ``hf`` engine: transformers models (CPU by default), the logprob reference.

Prompts of one call are left-padded into one batch (in chunks of ``max_batch_size``
prompts). Tokens are drawn by :mod:`rft.engines.decode_loop` (a plain KV-cache loop over
the model's own forward and the same logits as ``generate``, faster): each distinct prompt
of the chunk is prefilled once and its ``transformers`` cache expanded over its samples
(``n`` per occurrence), which then decode as one batch. With a repetition penalty (which
the loop does not cover), or a transformers without the cache API it needs
(:func:`~rft.engines.decode_loop.missing_cache_api`, logged once), ``generate`` draws
them, each prompt repeated ``n`` times. On the CPU a model with ``sdpa`` attention gets
:mod:`rft.engines.gqa_attention` (the same attention without copying grouped key / value
heads; bit for bit the same logits); ``compile_decode`` runs the decode steps through
``torch.compile`` (:mod:`rft.engines.compiled_step`). Each call seeds
torch's RNG (inside ``torch.random.fork_rng``, so the caller's RNG is untouched) with
:meth:`InferenceEngine.next_seed`, hence a call with the same seed, prompts and weights
returns the same tokens. Per-token log-probs are computed from the *raw* logits of each
step as ``log_softmax(z_t / T)[y_t]`` (by the decode loop at each step, as
``z_t[y_t] / T − logsumexp(z_t / T)``; from ``generate``'s kept logits otherwise) — the
convention of :mod:`rft.engines.engine`, which :meth:`HFEngine.compute_logprobs`
reproduces by teacher forcing.

LoRA (:meth:`HFEngine.update_adapter`): the adapter's layers are inserted into the model
in place with peft (``inject_adapter_in_model``, once) and each sync copies the adapter's
tensors into them, so the engine computes what the trainer's peft model computes,
``W x + (alpha / r) · B A x``, with the base weights untouched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from rft.adapter import AdapterWeights, LoraSpec
from rft.errors import RftError
from rft.multimodal.inputs import (MultiModalInputs, VisionPrompt, forward_inputs,
                                   join_inputs, vision_token_ids)
from rft.engines import call_rng, decode_loop, gqa_attention
from rft.engines.compiled_step import CompiledStep
from rft.engines.engine import (Completion, FinishReason, InferenceEngine, PreparedPrompt,
                                SamplingArgs)
from rft.rope import apply_rope

log = logging.getLogger("rft.engines.hf_engine")

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


@dataclass
class HFEngineArgs:
    """``hf``-specific settings (``explorer.rollout_model.extra_engine_args``)."""

    device: str = "cpu"
    """Torch device of the model (``cpu``, ``cuda``, ``cuda:1``, …)."""
    max_batch_size: int | None = None
    """Most prompts per ``generate`` / forward call (× ``n`` rows); ``None``: all at once."""
    attn_implementation: str | None = None
    """transformers attention backend (``sdpa``, ``eager``); ``None``: its default. On the
    CPU, ``sdpa`` runs as :mod:`rft.engines.gqa_attention` (the same attention, without
    copying grouped key / value heads)."""
    compile_decode: bool = False
    """Run the decode steps through ``torch.compile`` (:mod:`rft.engines.compiled_step`):
    on the CPU ~1.5–2× faster decode steps for small models or few rows, for one compile of
    ~20–30 s at the first decode; falls back to eager decoding, with one warning line,
    when compiling fails. Not run on a GPU."""


def resolve_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """``"auto"`` is float32 on CPU and bfloat16 elsewhere; names map to torch dtypes."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    if dtype not in _DTYPES:
        raise RftError(f"hf engine: unknown dtype {dtype!r}; use one of auto, "
                       + ", ".join(sorted(_DTYPES)))
    return _DTYPES[dtype]


@dataclass(frozen=True)
class _Cut:
    """Where a generated row ends (:meth:`HFEngine._cut`)."""

    end: int
    """Tokens kept."""
    finish: FinishReason
    stop_reason: int | str | None
    text: str | None
    """The text before a stop string that cut the row, else ``None`` (detokenised)."""


class HFEngine(InferenceEngine):
    """Inference with ``transformers`` ``AutoModelForCausalLM.generate``.

    :param model_path: local directory (or hub id) of the checkpoint and its tokenizer.
    :param dtype: ``auto`` / ``float32`` / ``bfloat16`` / ``float16``. ``float32`` on CPU
        reproduces the trainer's log-probs to ~1e-6.
    :param device, max_batch_size, attn_implementation, compile_decode: see
        :class:`HFEngineArgs`.
    :param trust_remote_code: allow modelling code shipped with the checkpoint.
    :param rope_scaling, rope_theta: ``model.rope_scaling`` / ``model.rope_theta``
        overrides of the checkpoint's config (:mod:`rft.rope`).
    :param engine_kwargs: the prompt / template / seed settings of
        :class:`~rft.engines.engine.InferenceEngine`.
    """

    Args = HFEngineArgs
    serves_lora = True

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str | torch.dtype = "float32",
        device: str = "cpu",
        max_batch_size: int | None = None,
        attn_implementation: str | None = None,
        compile_decode: bool = False,
        trust_remote_code: bool = False,
        rope_scaling: dict[str, Any] | None = None,
        rope_theta: float | None = None,
        **engine_kwargs: Any,
    ) -> None:
        from transformers import AutoConfig, AutoTokenizer

        from rft.multimodal.models import auto_model_class, is_vision_config
        from rft.multimodal.processor import load_processor

        super().__init__(**engine_kwargs)
        self.model_path = str(model_path)
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_path,
                                                        trust_remote_code=trust_remote_code)
        if self.chat_template is not None:
            self._tokenizer.chat_template = self.chat_template
        load_kwargs: dict[str, Any] = {"dtype": resolve_dtype(dtype, device),
                                       "trust_remote_code": trust_remote_code}
        if attn_implementation is not None:
            load_kwargs["attn_implementation"] = attn_implementation
        config = AutoConfig.from_pretrained(self.model_path, trust_remote_code=trust_remote_code)
        if rope_scaling or rope_theta is not None:  # model.rope_scaling / rope_theta
            load_kwargs["config"] = config
            apply_rope(config, rope_scaling, rope_theta)
        self._processor: Any = None
        """The processor of a vision-language model (``None`` for a text model)."""
        if is_vision_config(config):
            self._processor = load_processor(self.model_path)
        # the class is chosen at run time (the checkpoint's architecture), and transformers'
        # decorated methods (to, generate) do not type-check on the auto class
        self.model: Any = cast(Any, auto_model_class(config).from_pretrained(self.model_path,
                                                                             **load_kwargs))
        self.model.to(self.device).eval()
        gqa_attention.use_gqa_attention(self.model)  # CPU sdpa without copied kv heads
        self.step_forward: CompiledStep | None = (CompiledStep(self.model) if compile_decode
                                                  else None)
        """The decode steps' compiled forward (``compile_decode``; ``None``: the model)."""
        self.eos_token_ids = self._collect_eos_ids()
        self.pad_token_id = self._pick_pad_id()
        self._lock = threading.RLock()
        self._adapter: LoraSpec | None = None
        """The LoRA adapter inserted into the model (``None``: none)."""
        missing = decode_loop.missing_cache_api()
        self.shares_prompts = missing is None
        """Whether sampling goes through :mod:`rft.engines.decode_loop` (each prompt
        prefilled once, its cache expanded over the ``n`` samples); ``False`` when the
        installed transformers lacks the cache API: ``generate``, one prefill per sample."""
        if missing is not None:
            log.warning("hf engine: %s; sampling with model.generate, one prompt "
                        "prefill per sample", missing)

    # ---- properties --------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def processor(self) -> Any:
        if self._processor is None:
            return super().processor  # raises: a text model
        return self._processor

    def accepts_images(self) -> bool:
        return self._processor is not None

    def default_max_model_len(self) -> int | None:
        config = getattr(self.model.config, "text_config", None) or self.model.config
        return getattr(config, "max_position_embeddings", None)

    def _collect_eos_ids(self) -> list[int]:
        """EOS ids of the generation config, the model config and the tokenizer."""
        ids: list[int] = []
        config = getattr(self.model.config, "text_config", None) or self.model.config
        for source in (getattr(self.model.generation_config, "eos_token_id", None),
                       getattr(config, "eos_token_id", None), self._tokenizer.eos_token_id):
            values = source if isinstance(source, (list, tuple)) else [source]
            ids.extend(int(v) for v in values if v is not None and int(v) not in ids)
        return ids

    def _pick_pad_id(self) -> int:
        for candidate in (self._tokenizer.pad_token_id,
                          getattr(self.model.generation_config, "pad_token_id", None)):
            if candidate is not None:
                return int(candidate)
        return self.eos_token_ids[0] if self.eos_token_ids else 0

    # ---- generation --------------------------------------------------------------------

    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingArgs,
                 n: int = 1) -> list[list[Completion]]:
        prepared, seed = self.start_call(prompt_token_ids, sampling, n)
        if not prepared:
            return []
        chunk = self.max_batch_size or len(prepared)
        results: list[list[Completion]] = []
        with self._lock, call_rng.seeded(self.device, seed), torch.no_grad():
            for start in range(0, len(prepared), chunk):
                results.extend(self._generate_chunk(prepared[start:start + chunk], sampling, n))
        return results

    def generate_mm(self, prompts: Sequence[VisionPrompt], sampling: SamplingArgs,
                    n: int = 1) -> list[list[Completion]]:
        """Prompts with images: one ``model.generate`` call per prompt (its ``n`` samples
        as ``num_return_sequences``, the model expanding its own vision inputs), with the
        processor's ``pixel_values`` / ``image_grid_thw`` and ``mm_token_type_ids``
        (:func:`rft.multimodal.forward_inputs`); log-probs of the sampled tokens from the
        raw step logits as for text. The vision placeholder tokens are never sampled
        (``suppress_tokens``: they stand for image features in a prompt, and a response
        holding one could not be scored); the log-probs are still those of the raw logits,
        the contract the trainer reproduces. A prompt over the limit is refused, never
        truncated (truncation would cut image tokens)."""
        if not self.accepts_images():
            return super().generate_mm(prompts, sampling, n)
        prepared, seed = self.start_call([list(p.token_ids) for p in prompts], sampling, n)
        for index, prompt in enumerate(prepared):
            if prompt.truncated:
                raise RftError(f"hf engine: prompt {index} with images has "
                               f"{len(prompts[index].token_ids)} tokens, over the prompt "
                               f"limit (model.max_prompt_tokens); it is not truncated")
        results: list[list[Completion]] = []
        with self._lock, call_rng.seeded(self.device, seed), torch.no_grad():
            for prompt, vision in zip(prepared, prompts, strict=True):
                results.append(self._generate_vision(prompt, vision.multi_modal_inputs,
                                                     sampling, n))
        return results

    def _generate_vision(self, prompt: PreparedPrompt, inputs: MultiModalInputs | None,
                         sampling: SamplingArgs, n: int) -> list[Completion]:
        greedy = sampling.temperature == 0
        input_ids = torch.tensor([prompt.token_ids], dtype=torch.long,
                                 device=self.device)  # (1, P)
        attention_mask = torch.ones_like(input_ids)  # (1, P)
        vision = forward_inputs(self.model.config, input_ids, inputs, self.device)
        config = self._generation_config(sampling, n, prompt.max_new_tokens)
        if greedy:  # one greedy row stands for the n equal ones
            config.num_return_sequences = 1
        config.suppress_tokens = vision_token_ids(self.model.config) or None
        extra: dict[str, Any] = {"tokenizer": self._tokenizer} if sampling.stop else {}
        out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                  generation_config=config, **vision, **extra)
        new_tokens = out.sequences[:, input_ids.shape[1]:]  # (n or 1, N)
        logprobs = (self._sampled_logprobs(out.logits, new_tokens, sampling.logprob_temperature)
                    if sampling.logprobs else None)  # (n or 1, N)
        picked = [0 if greedy else j for j in range(n)]
        rows = new_tokens.tolist()  # (n or 1) lists of N
        return self._completions([prompt] * n, [rows[r] for r in picked],
                                 None if logprobs is None else [logprobs[r] for r in picked],
                                 sampling, set(self.stop_token_ids(sampling)))

    def _generation_config(self, sampling: SamplingArgs, n: int, max_new_tokens: int) -> Any:
        """A complete ``GenerationConfig`` (every knob set, so the checkpoint's
        ``generation_config.json`` cannot change the sampling)."""
        from transformers import GenerationConfig

        greedy = sampling.temperature == 0
        return GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else max(sampling.top_k, 0),
            min_p=None,
            typical_p=1.0,
            repetition_penalty=sampling.repetition_penalty,
            no_repeat_ngram_size=0,
            num_beams=1,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min(sampling.min_tokens, max_new_tokens),
            num_return_sequences=n,
            eos_token_id=self.stop_token_ids(sampling),
            pad_token_id=self.pad_token_id,
            stop_strings=list(sampling.stop) or None,
            return_dict_in_generate=True,
            output_logits=True,
            output_scores=False,
            use_cache=True,
        )

    def _generate_chunk(self, prompts: list[PreparedPrompt], sampling: SamplingArgs,
                        n: int) -> list[list[Completion]]:
        interrupted: bool
        max_new = max(p.max_new_tokens for p in prompts)
        stop_ids = self.stop_token_ids(sampling)
        logprobs: torch.Tensor | None  # (B·n, N)
        if self.shares_prompts and decode_loop.covers(sampling):
            # each distinct prompt once; its KV cache is expanded over the rows that continue
            # it (row b·n + j continues prompt b; the same prompt twice in a call: one prefill)
            distinct: dict[tuple[int, ...], int] = {}
            for prompt in prompts:
                distinct.setdefault(tuple(prompt.token_ids), len(distinct))
            source = torch.tensor([distinct[tuple(p.token_ids)] for p in prompts
                                   for _ in range(n)], dtype=torch.long)  # (B·n,)
            input_ids, attention_mask = self._left_pad([list(k) for k in distinct])  # (D, P)
            settings = decode_loop.DecodeSettings(
                max_new_tokens=max_new, min_new_tokens=min(sampling.min_tokens, max_new),
                temperature=sampling.temperature, top_k=max(sampling.top_k, 0),
                top_p=sampling.top_p, stop_token_ids=stop_ids,
                pad_token_id=self.pad_token_id,
                stop_check=self._stop_string_check(sampling) if sampling.stop else None,
                interrupt=self.interrupt.is_set,
                logprob_temperature=(sampling.logprob_temperature if sampling.logprobs
                                     else None),
                keep_logits=False)  # the log-probs are taken in the loop
            compiled = self.step_forward
            decoded = decode_loop.sample_tokens(
                self.model, input_ids, attention_mask, settings, rows=source,
                step_forward=compiled,
                draw_step=None if compiled is None else compiled.forward_and_draw,
                prefill_forward=None if compiled is None else compiled.prefill)
            new_tokens, logprobs = decoded.tokens, decoded.logprobs  # (B·n, N) each
            interrupted = decoded.interrupted
        else:
            # Sampling draws n rows per prompt with num_return_sequences (prompt-major order,
            # like repeating each prompt n times); greedy rows are repeated explicitly.
            greedy = sampling.temperature == 0
            rows = [p.token_ids for p in prompts for _ in range(n if greedy else 1)]
            input_ids, attention_mask = self._left_pad(rows)  # (B, P), B·n rows when greedy
            config = self._generation_config(sampling, 1 if greedy else n, max_new)
            extra: dict[str, Any] = {"tokenizer": self._tokenizer} if sampling.stop else {}
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                      generation_config=config, **extra)
            new_tokens = out.sequences[:, input_ids.shape[1]:]  # (B·n, N)
            interrupted = False  # transformers' generate is not interruptible
            logprobs = (self._sampled_logprobs(out.logits, new_tokens,
                                               sampling.logprob_temperature)
                        if sampling.logprobs else None)  # (B·n, N)
        # rows b·n … b·n + n − 1 answer prompt b; one tolist and one batched detokenisation
        # for the whole call (not a tensor read and a tokenizer call per row)
        flat = self._completions([p for p in prompts for _ in range(n)], new_tokens.tolist(),
                                 None if logprobs is None else list(logprobs.unbind(0)),
                                 sampling, set(stop_ids))
        results = [flat[b * n:(b + 1) * n] for b in range(len(prompts))]
        if interrupted:  # rows cut short by a weight sync: neither stopped nor at the budget
            for prompt, samples in zip(prompts, results, strict=True):
                for completion in samples:
                    completion.interrupted = (completion.finish_reason == "length" and
                                              len(completion.token_ids) < prompt.max_new_tokens)
        return results

    @staticmethod
    def _sampled_logprobs(logits: Sequence[torch.Tensor], tokens: torch.Tensor,
                          temperature: float) -> torch.Tensor:
        """``log_softmax(z_t / T)[y_t]`` per step (:func:`decode_loop.chosen_logprobs`, as
        the decode loop takes them); ``logits``: ``N`` tensors ``(B·n, V)``, ``tokens``:
        ``(B·n, N)`` → ``(B·n, N)`` float32."""
        return torch.stack([decode_loop.chosen_logprobs(step.float(), tokens[:, t], temperature)
                            for t, step in enumerate(logits)], dim=1).cpu()  # (B·n, N)

    def _completions(self, prompts: Sequence[PreparedPrompt], rows: Sequence[list[int]],
                     logprobs: Sequence[torch.Tensor] | None, sampling: SamplingArgs,
                     stop_ids: set[int]) -> list[Completion]:
        """Cut each generated row (``rows[i]`` answers ``prompts[i]``; ``logprobs[i]``
        ``(N,)``) at its first stop token, stop string or budget. The texts of the rows
        not cut by a stop string are detokenised in one ``batch_decode``."""
        extra_stop_ids = set(sampling.stop_token_ids) - set(self.eos_token_ids)
        cuts = [self._cut(prompt, tokens, sampling, stop_ids, extra_stop_ids)
                for prompt, tokens in zip(prompts, rows, strict=True)]
        to_decode = [i for i, cut in enumerate(cuts) if cut.text is None]
        decoded = self._tokenizer.batch_decode(
            [rows[i][:cuts[i].end] for i in to_decode],
            skip_special_tokens=sampling.skip_special_tokens) if to_decode else []
        texts = {i: text for i, text in zip(to_decode, decoded, strict=True)}
        return [Completion(
            prompt_token_ids=list(prompt.token_ids),
            token_ids=tokens[:cut.end],
            logprobs=logprobs[i][:cut.end].clone() if logprobs is not None else None,
            text=cut.text if cut.text is not None else texts[i],
            finish_reason=cut.finish,
            prompt_truncated=prompt.truncated,
            model_version=self.model_version,
            stop_reason=cut.stop_reason,
        ) for i, (prompt, tokens, cut) in enumerate(zip(prompts, rows, cuts, strict=True))]

    def _cut(self, prompt: PreparedPrompt, tokens: list[int], sampling: SamplingArgs,
             stop_ids: set[int], extra_stop_ids: set[int]) -> _Cut:
        """Where one generated row ends: its first stop token, stop string or budget."""
        finish: FinishReason = "length"
        stop_reason: int | str | None = None
        end = len(tokens)
        for index, token in enumerate(tokens):
            if token in stop_ids:
                end, finish = index + 1, "stop"
                stop_reason = token if token in extra_stop_ids else None
                break
        text_cut: str | None = None
        if sampling.stop:
            found = self._find_stop_string(tokens[:end], sampling)
            if found is not None:
                end, text_cut, stop_reason = found
                finish = "stop"
        if end > prompt.max_new_tokens:  # this prompt's budget is below the batch's
            end, finish, stop_reason, text_cut = prompt.max_new_tokens, "length", None, None
        return _Cut(end, finish, stop_reason, text_cut)

    def _stop_string_check(self, sampling: SamplingArgs) -> Any:
        """For the decode loop: new tokens ``(B, t)`` → ``(B,)`` bool, rows whose text now
        holds one of ``sampling.stop``. A stop string that was not there a step ago ends
        in the newest token, and a string of ``L`` characters spans at most ``4·L`` byte
        tokens (UTF-8), so only the last ``4·L + 4`` tokens of each row are decoded (as
        :meth:`_find_stop_string` decodes): the cost per step does not grow with ``t``."""
        stops = [s for s in sampling.stop if s]
        window = 4 * max((len(s) for s in stops), default=0) + 4

        def check(tokens: torch.Tensor) -> torch.Tensor:
            texts = self._tokenizer.batch_decode(
                tokens[:, -window:].tolist(), skip_special_tokens=sampling.skip_special_tokens)
            return torch.tensor([any(s in text for s in stops) for text in texts])

        return check

    def _decode(self, tokens: list[int], skip_special_tokens: bool) -> str:
        """The text of ``tokens`` (one sequence: one string)."""
        text = self._tokenizer.decode(tokens, skip_special_tokens=skip_special_tokens)
        assert isinstance(text, str)
        return text

    def _find_stop_string(self, tokens: list[int],
                          sampling: SamplingArgs) -> tuple[int, str, str] | None:
        """First prefix ``tokens[:k]`` whose text contains a stop string →
        ``(k, text before the stop string, the stop string)``."""
        for k in range(1, len(tokens) + 1):
            text = self._decode(tokens[:k], sampling.skip_special_tokens)
            hits = [(text.find(s), s) for s in sampling.stop if s and s in text]
            if hits:
                position, stop = min(hits)
                return k, text[:position], stop
        return None

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-pad prompts → ``input_ids`` and ``attention_mask``, both ``(B, P)``."""
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[i, width - len(prompt):] = 1
        return input_ids.to(self.device), attention_mask.to(self.device)

    # ---- scoring -----------------------------------------------------------------------

    def compute_logprobs(self, token_ids: Sequence[Sequence[int]],
                         prompt_lengths: Sequence[int], *,
                         temperature: float = 1.0) -> list[torch.Tensor]:
        self.check_scoring_args(token_ids, prompt_lengths, temperature)
        chunk = self.max_batch_size or max(len(token_ids), 1)
        out: list[torch.Tensor] = []
        with self._lock, torch.no_grad():
            for start in range(0, len(token_ids), chunk):
                out.extend(self._score_chunk(token_ids[start:start + chunk],
                                             prompt_lengths[start:start + chunk], temperature))
        return out

    def _score_chunk(self, sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int],
                     temperature: float, vision: MultiModalInputs | None = None
                     ) -> list[torch.Tensor]:
        """Right-pad (positions stay ``0 … L−1`` as in generation), one forward pass."""
        width = max(len(s) for s in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)  # (B, L)
        for i, seq in enumerate(sequences):
            input_ids[i, :len(seq)] = torch.tensor(list(seq), dtype=torch.long)
            attention_mask[i, :len(seq)] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        extra = forward_inputs(self.model.config, input_ids, vision, self.device)
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask,
                            **extra).logits  # (B, L, V)
        log_probs = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)  # (B, L-1, V)
        per_token_logps = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (B, L-1)
        return [per_token_logps[i, p - 1:len(seq) - 1].cpu().clone()
                for i, (seq, p) in enumerate(zip(sequences, prompt_lengths))]

    def compute_logprobs_mm(self, token_ids: Sequence[Sequence[int]],
                            prompt_lengths: Sequence[int],
                            inputs: Sequence[MultiModalInputs | None], *,
                            temperature: float = 1.0) -> list[torch.Tensor]:
        """:meth:`compute_logprobs` with each sequence's vision inputs (one forward per
        chunk, the chunk's inputs joined in row order)."""
        if not self.accepts_images():
            return super().compute_logprobs_mm(token_ids, prompt_lengths, inputs,
                                               temperature=temperature)
        self.check_scoring_args(token_ids, prompt_lengths, temperature)
        if len(inputs) != len(token_ids):
            raise RftError(f"compute_logprobs_mm: {len(token_ids)} sequences but "
                           f"{len(inputs)} vision inputs")
        chunk = self.max_batch_size or max(len(token_ids), 1)
        out: list[torch.Tensor] = []
        with self._lock, torch.no_grad():
            for start in range(0, len(token_ids), chunk):
                out.extend(self._score_chunk(token_ids[start:start + chunk],
                                             prompt_lengths[start:start + chunk], temperature,
                                             join_inputs(inputs[start:start + chunk])))
        return out

    # ---- weights -----------------------------------------------------------------------

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Copy tensors in place. With tied embeddings ``lm_head.weight`` and
        ``model.embed_tokens.weight`` are one tensor: either name updates both, and the
        tie is restored should a load have split them."""
        with self._lock, torch.no_grad():
            self._copy_in(named_tensors, _strip_wrappers, "update_weights", "parameter")
            self._retie()
            self._model_version = int(version)

    def update_adapter(self, adapter: AdapterWeights, version: int) -> None:
        """Insert the adapter's layers (first call), then copy its tensors in place."""
        spec = adapter.spec
        with self._lock, torch.no_grad():
            if self._adapter is None:
                from peft import inject_adapter_in_model

                inject_adapter_in_model(spec.peft_config(), self.model, adapter_name=ADAPTER)
                self.model.eval()
                self._adapter = spec
            elif (spec.rank, spec.alpha, spec.target_modules) != (
                    self._adapter.rank, self._adapter.alpha, self._adapter.target_modules):
                raise RftError(f"update_adapter: adapter {spec.name!r} (rank {spec.rank}, "
                               f"{len(spec.target_modules)} modules) differs from the one this "
                               f"engine serves (rank {self._adapter.rank}, "
                               f"{len(self._adapter.target_modules)} modules)")
            self._copy_in(adapter.tensors, _adapter_key, "update_adapter", "adapter tensor")
            self._model_version = int(version)

    def _copy_in(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                 key_of: Callable[[str], str], what: str, noun: str) -> None:
        """Copy each tensor in place into the model's tensor ``key_of(name)`` (its device and
        dtype); a name the model lacks or a shape that differs is one line naming it."""
        targets = self.model.state_dict(keep_vars=True)
        for name, tensor in named_tensors:
            target = targets.get(key_of(name))
            if target is None:
                raise RftError(f"{what}: {type(self.model).__name__} has no {noun} {name!r}")
            if tuple(target.shape) != tuple(tensor.shape):
                raise RftError(f"{what}: {name!r} has shape {tuple(tensor.shape)}, "
                               f"the model's is {tuple(target.shape)}")
            target.copy_(tensor.detach().to(device=target.device, dtype=target.dtype))

    def _retie(self) -> None:
        if not getattr(self.model.config, "tie_word_embeddings", False):
            return
        output, inputs = self.model.get_output_embeddings(), self.model.get_input_embeddings()
        if output is not None and output.weight is not inputs.weight:
            output.weight = inputs.weight


ADAPTER = "default"
"""Name of the adapter inserted into the model (peft's ``….lora_A.default.weight``)."""


def _adapter_key(name: str) -> str:
    """The model's name of an adapter tensor from peft's saved name
    (``base_model.model.X.lora_A.weight`` → ``X.lora_A.default.weight``)."""
    name = name.removeprefix("base_model.model.")
    head, _, tail = name.rpartition(".")  # tail: weight
    return f"{head}.{ADAPTER}.{tail}"


def _strip_wrappers(name: str) -> str:
    """Drop prefixes added by DDP / FSDP / ``torch.compile`` wrappers."""
    for prefix in ("module.", "_orig_mod.", "_fsdp_wrapped_module."):
        while name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace("._fsdp_wrapped_module", "").replace("._orig_mod", "")
