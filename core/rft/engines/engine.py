"""The inference-engine interface shared by ``hf``, ``vllm`` and other engines.

An engine turns token-id prompts into sampled completions with per-token
log-probabilities, scores given sequences (teacher forcing), and takes new weights from
the trainer. The surface is deliberately small:

=========================================  ===============================================
``generate(prompt_token_ids, sampling, n)``  ``n`` completions per prompt
``chat(messages_list, sampling, n)``        chat template, then ``generate``
``compute_logprobs(token_ids, prompt_lengths, temperature=)``
                                           log-probs of the response tokens
``update_weights(named_tensors, version)``  copy new weights in, ``model_version = version``
``update_adapter(adapter, version)``        serve a new LoRA adapter (``serves_lora``)
``model_version`` / ``tokenizer``           properties
=========================================  ===============================================

Log-probability convention
--------------------------
``Completion.logprobs[t]`` is the log-probability of the sampled token ``y_t`` under the
model's distribution **at the sampling temperature** ``T``, before any other logits
processing::

    logprobs[t] = log_softmax(z_t / T)[y_t]        z_t = model logits at step t  (V,)

— no top-k / top-p truncation, no repetition penalty, no min-tokens EOS masking. For
greedy decoding (``T = 0``) ``T = 1`` is used (raw log-probs). This is what the trainer
recomputes: veRL's and Trinity-RFT's actors divide the logits by the rollout temperature
before ``log_softmax``, so explorer log-probs can serve directly as the "old" log-probs
of the importance ratio ``exp(logp_new − logp_old)``. :meth:`InferenceEngine.compute_logprobs`
uses the same formula with its ``temperature`` argument. (vLLM V1 returns the raw,
``T = 1`` log-probs by default; its ``logprobs_mode="processed_logprobs"`` returns the
temperature-scaled ones, identical to ours when top-k / top-p are off. A vLLM engine
must use that mode, or rescale, to honour this contract.)

Prompt limits
-------------
A prompt longer than ``max_prompt_tokens`` (or than ``max_model_len − 1`` when only
that is set) is **left-truncated** to its last ``max_prompt_tokens`` tokens when
``enable_prompt_truncation`` (its completions carry ``prompt_truncated=True`` so the
caller can mask them out of the loss), and refused with a one-line
:class:`rft.errors.RftError` naming its length otherwise. The number of new tokens is
``min(max_tokens, max_model_len − prompt length)``.
"""

from __future__ import annotations

import itertools
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from rft.adapter import AdapterWeights
from rft.errors import RftError
from rft.multimodal.inputs import MultiModalInputs, VisionPrompt

CHAT_CACHE_SIZE = 4096
"""Rendered conversations an engine remembers (:meth:`InferenceEngine.apply_chat_template`)."""

FinishReason = Literal["stop", "length"]


@dataclass
class SamplingArgs:
    """How to sample one request (vLLM ``SamplingParams`` names)."""

    temperature: float = 1.0
    """Softmax temperature ``T``; ``0`` means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens with probability mass ≥ ``top_p``;
    ``1.0`` disables it."""
    top_k: int = -1
    """Keep the ``top_k`` most likely tokens; ``-1`` (or ``0``) disables it."""
    max_tokens: int | None = None
    """Maximum new tokens; ``None``: the engine's ``max_response_tokens``, else up to
    ``max_model_len``. Always bounded by ``max_model_len − prompt length``."""
    min_tokens: int = 0
    """Minimum new tokens before EOS / stop tokens may be sampled."""
    repetition_penalty: float = 1.0
    """CTRL-style repetition penalty (``> 1`` discourages repeats); ``1.0`` disables it."""
    seed: int | None = None
    """Seed of this call; ``None``: the engine's own deterministic sequence of seeds."""
    stop: tuple[str, ...] = ()
    """Stop strings: generation ends when one appears; the text excludes it, the token
    ids end with the token that completed it."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end generation (EOS ids of the tokenizer always do, unless
    ``ignore_eos``)."""
    ignore_eos: bool = False
    """Keep generating past EOS tokens until ``max_tokens`` (``stop`` / ``stop_token_ids``
    still end generation), as vLLM's ``ignore_eos``: for load tests and benchmarks."""
    logprobs: bool = True
    """Return per-token log-probabilities (``Completion.logprobs``)."""
    skip_special_tokens: bool = True
    """Drop special tokens (e.g. ``<|im_end|>``) from ``Completion.text``."""
    resumed_tokens: int = 0
    """Partial rollouts: the last ``resumed_tokens`` tokens of each prompt are a response
    being resumed after a weight sync (:mod:`rft.engines.partial_rollout`); they do not
    count toward ``max_prompt_tokens`` (only ``max_model_len`` bounds them)."""

    def check(self) -> None:
        """Raise a one-line :class:`RftError` for an impossible setting."""
        if self.temperature < 0:
            raise RftError(f"sampling temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise RftError(f"sampling top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise RftError(f"sampling top_k must be -1 (off) or >= 0, got {self.top_k}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise RftError(f"sampling max_tokens must be >= 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            raise RftError(f"sampling min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise RftError(f"sampling min_tokens={self.min_tokens} exceeds "
                           f"max_tokens={self.max_tokens}")
        if self.repetition_penalty <= 0:
            raise RftError(f"sampling repetition_penalty must be > 0, got "
                           f"{self.repetition_penalty}")

    @property
    def logprob_temperature(self) -> float:
        """Temperature of the reported log-probs: ``T``, or ``1`` for greedy decoding."""
        return self.temperature if self.temperature > 0 else 1.0


@dataclass
class Completion:
    """One sampled response to one prompt."""

    prompt_token_ids: list[int]
    """The prompt as the model saw it (after any left truncation)."""
    token_ids: list[int]
    """Generated ids; ends with the EOS / stop token when ``finish_reason == "stop"``."""
    logprobs: torch.Tensor | None
    """(R,) float32: ``log_softmax(z_t / T)[token_ids[t]]`` (see the module docstring);
    ``None`` when not requested."""
    text: str
    """Decoded ``token_ids`` (special tokens and a matched stop string removed)."""
    finish_reason: FinishReason
    """``"stop"``: EOS, a stop token or a stop string; ``"length"``: token limit reached."""
    prompt_truncated: bool = False
    """The prompt was longer than ``max_prompt_tokens`` and was left-truncated."""
    model_version: int = 0
    """Weights version that sampled it."""
    stop_reason: int | str | None = None
    """The stop token id or stop string that ended it; ``None`` for EOS or length."""
    interrupted: bool = False
    """Generation was stopped before a stop token, a stop string or the budget because a
    weight sync asked for it (:attr:`InferenceEngine.interrupt`); ``finish_reason`` is then
    ``"length"`` and :class:`~rft.engines.partial_rollout.PartialRolloutEngine` resumes it
    with the new weights."""
    token_versions: list[int] | None = None
    """Weights version of each of ``token_ids`` when they differ (a resumed partial
    rollout); ``None``: every token is ``model_version``'s."""

    @property
    def tokens(self) -> list[int]:
        """Prompt followed by response ids."""
        return self.prompt_token_ids + self.token_ids


@dataclass
class PreparedPrompt:
    """A prompt after the length checks of :meth:`InferenceEngine.prepare_prompts`."""

    token_ids: list[int]
    truncated: bool
    max_new_tokens: int
    """New-token budget: ``min(max_tokens, max_model_len − len(token_ids))``."""


class InferenceEngine(ABC):
    """Base class of inference engines (plugins registered with ``register_engines``).

    Subclasses implement :meth:`generate`, :meth:`compute_logprobs`,
    :meth:`update_weights` and :attr:`tokenizer`; the prompt limits, the chat template and
    the seed sequence are handled here.

    :param max_model_len: maximum tokens of prompt + response; ``None``: the engine's
        model limit (:meth:`default_max_model_len`).
    :param max_prompt_tokens: maximum prompt tokens; ``None``: ``max_model_len − 1``.
    :param max_response_tokens: default ``SamplingArgs.max_tokens``.
    :param enable_prompt_truncation: left-truncate long prompts (else refuse them).
    :param chat_template: Jinja chat template overriding the tokenizer's.
    :param enable_thinking: passed to the chat template when not ``None`` (Qwen3).
    :param seed: first of the engine's per-call seeds (calls without ``SamplingArgs.seed``
        use ``seed, seed + 1, …`` in call order).
    """

    remote: ClassVar[bool] = False
    """The model runs on a server elsewhere (``external``): the engine takes conversations
    (:meth:`chat`) only — no token-id prompts, no teacher-forced scoring — needs no local
    model path, uses no device of the run, and its weights never change, so it cannot be
    the policy being trained. Validation and the modes read this flag, never the engine's
    name."""

    serves_lora: ClassVar[bool] = False
    """The engine serves LoRA adapters (:meth:`update_adapter`); validation refuses
    ``model.lora_configs`` with an engine that does not."""

    required_modules: ClassVar[tuple[str, ...]] = ()
    """Python packages the engine imports when it starts; validation refuses the engine
    where one is not installed (:attr:`install_hint` says how to get it)."""

    install_hint: ClassVar[str] = ""
    """How to install :attr:`required_modules` (one line)."""

    engine_options: ClassVar[frozenset[str]] = frozenset()
    """The engine-specific ``InferenceModelConfig`` fields it reads (of
    :data:`rft.config.host_checks.ENGINE_OPTIONS`); validation warns about one set for an
    engine that does not read it."""

    interruptible: ClassVar[bool] = False
    """The engine's :meth:`generate` watches :attr:`interrupt`: once it is set, in-flight
    rows stop at the next decode step and come back with ``Completion.interrupted`` (a
    partial rollout, resumed after the weight sync; docs/async-partial.md). An engine
    without it finishes its calls before a sync loads weights."""

    keeps_processed_logprobs: ClassVar[bool] = False
    """At ``T ≠ 1`` with top-p < 1, top-k > 0 or a repetition penalty the engine's
    ``Completion.logprobs`` are those of its processed distribution, not the contract's,
    unless ``extra_engine_args.rescore_full_vocabulary`` (``vllm``); validation refuses
    ``trainer_config.torch.use_rollout_logprobs`` then."""

    def __init__(
        self,
        *,
        max_model_len: int | None = None,
        max_prompt_tokens: int | None = None,
        max_response_tokens: int | None = None,
        enable_prompt_truncation: bool = True,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
        seed: int = 42,
    ) -> None:
        self.max_model_len = max_model_len
        self.max_prompt_tokens = max_prompt_tokens
        self.max_response_tokens = max_response_tokens
        self.enable_prompt_truncation = enable_prompt_truncation
        self.chat_template = chat_template
        self.enable_thinking = enable_thinking
        self.seed = seed
        self._model_version = 0
        self.interrupt = threading.Event()
        """Set by a weight sync of partial rollouts: an :attr:`interruptible` engine stops
        its in-flight rows at the next decode step."""
        self.partial_rollouts = False
        """Its calls may be interrupted (set by
        :class:`~rft.engines.partial_rollout.PartialRolloutEngine`): an engine that must run
        its calls differently to be interruptible (``vllm``: one request per sample,
        stepped here) does so only then."""
        self._seeds = itertools.count(seed)
        self._seed_lock = threading.Lock()
        self._chat_cache: dict[tuple[str, bool], list[int]] = {}
        self.eos_token_ids: list[int] = []
        """Token ids that end a response (engines fill it from their model and tokenizer)."""

    # ---- to implement ------------------------------------------------------------------

    @property
    @abstractmethod
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of the served model."""

    @abstractmethod
    def generate(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingArgs,
                 n: int = 1) -> list[list[Completion]]:
        """Sample ``n`` completions for each prompt.

        :param prompt_token_ids: ``B`` prompts as token ids (no padding).
        :param sampling: sampling settings of this call.
        :param n: completions per prompt.
        :return: ``B`` lists of ``n`` :class:`Completion`, in prompt order.
        :raises RftError: a prompt is too long and truncation is disabled.
        """

    @abstractmethod
    def compute_logprobs(self, token_ids: Sequence[Sequence[int]],
                         prompt_lengths: Sequence[int], *,
                         temperature: float = 1.0) -> list[torch.Tensor]:
        """Teacher-forced log-probs of the response tokens of each sequence.

        For sequence ``x`` with prompt length ``P`` and length ``L``::

            out[t] = log_softmax(z_{P+t-1} / temperature)[x_{P+t}]     t = 0 … L-P-1

        where ``z_i`` are the logits after reading ``x_0 … x_i``.

        :return: one float32 tensor ``(L_i − P_i,)`` per sequence.
        """

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]],
                       version: int) -> None:
        """Copy ``(name, tensor)`` pairs (Hugging Face parameter names) into the model and
        set :attr:`model_version` to ``version``. Missing names keep their values;
        unknown names or shapes raise :class:`RftError`."""

    # ---- images (vision-language models; docs/multimodal.md) ----------------------------

    def accepts_images(self) -> bool:
        """Whether the engine serves a vision-language model and implements
        :meth:`generate_mm` and :meth:`compute_logprobs_mm` (prompts with images)."""
        return False

    @property
    def processor(self) -> Any:
        """The served model's processor (:func:`rft.multimodal.processor.load_processor`);
        engines that take images set it."""
        raise RftError(f"{type(self).__name__} takes no images (no processor); use an engine "
                       f"that does (hf) with a vision-language model")

    def render_mm(self, messages: Sequence[dict[str, Any]], images: Sequence[Any], *,
                  add_generation_prompt: bool = True) -> VisionPrompt:
        """One conversation with ``images`` (RGB PIL images, in placeholder order) as a
        :class:`~rft.multimodal.VisionPrompt`: the processor's chat template and expansion
        (:func:`rft.multimodal.processor.render_prompt`)."""
        from rft.multimodal.processor import render_prompt

        ids, inputs = render_prompt(self.processor, messages, images,
                                    add_generation_prompt=add_generation_prompt)
        return VisionPrompt(tuple(ids), inputs, tuple(images))

    def generate_mm(self, prompts: Sequence[VisionPrompt], sampling: SamplingArgs,
                    n: int = 1) -> list[list[Completion]]:
        """:meth:`generate` for prompts with images (:attr:`accepts_images` engines)."""
        raise RftError(f"{type(self).__name__} takes no images; use the hf engine with a "
                       f"vision-language model (docs/multimodal.md)")

    def compute_logprobs_mm(self, token_ids: Sequence[Sequence[int]],
                            prompt_lengths: Sequence[int],
                            inputs: Sequence[MultiModalInputs | None], *,
                            temperature: float = 1.0) -> list[torch.Tensor]:
        """:meth:`compute_logprobs` of sequences with their vision inputs (``inputs[i]``
        for sequence ``i``, ``None`` for a text one)."""
        raise RftError(f"{type(self).__name__} takes no images; use the hf engine with a "
                       f"vision-language model (docs/multimodal.md)")

    def update_adapter(self, adapter: AdapterWeights, version: int) -> None:
        """Serve the base model with ``adapter`` (a LoRA adapter: its spec and tensors, see
        :mod:`rft.adapter`) from now on, replacing any earlier adapter, and set
        :attr:`model_version` to ``version``. The base weights are left as they are.
        Engines with :attr:`serves_lora` implement it; the default refuses."""
        raise RftError(f"{type(self).__name__} cannot serve LoRA adapters "
                       "(model.lora_configs); use the hf or vllm engine")

    # ---- shared behaviour --------------------------------------------------------------

    @property
    def model_version(self) -> int:
        """Version of the weights currently served (``0``: the initial checkpoint)."""
        return self._model_version

    def default_max_model_len(self) -> int | None:
        """The model's own context limit, used when ``max_model_len`` is ``None``."""
        return None

    def chat(self, messages_list: Sequence[Sequence[dict[str, Any]]], sampling: SamplingArgs,
             n: int = 1) -> list[list[Completion]]:
        """Apply the chat template (with the generation prompt) to each conversation, then
        :meth:`generate`. ``messages_list``: ``B`` lists of ``{"role", "content"}``."""
        return self.generate([self.apply_chat_template(m) for m in messages_list], sampling, n)

    def apply_chat_template(self, messages: Sequence[dict[str, Any]], *,
                            add_generation_prompt: bool = True,
                            tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """Token ids of one conversation rendered by the chat template, with the tools
        (OpenAI function specs) the template offers the model when given (remembered for
        the last :data:`CHAT_CACHE_SIZE` conversations: tasks repeat every epoch)."""
        key = (json.dumps([list(messages), tools], sort_keys=True, default=str),
               add_generation_prompt)
        cached = self._chat_cache.get(key)
        if cached is None:
            cached = self._render_chat(messages, add_generation_prompt, tools)
            with self._seed_lock:
                if len(self._chat_cache) >= CHAT_CACHE_SIZE:
                    self._chat_cache.pop(next(iter(self._chat_cache)))
                self._chat_cache[key] = cached
        return list(cached)

    def _render_chat(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool,
                     tools: Sequence[dict[str, Any]] | None) -> list[int]:
        text = render_text(self, messages, add_generation_prompt=add_generation_prompt,
                           tools=tools)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def start_call(self, prompt_token_ids: Sequence[Sequence[int]], sampling: SamplingArgs,
                   n: int) -> tuple[list[PreparedPrompt], int]:
        """Check a :meth:`generate` call and prepare it: its prompts (limits applied) and
        its seed. Raises a one-line :class:`RftError` for bad arguments."""
        sampling.check()
        if n < 1:
            raise RftError(f"generate: n must be >= 1, got {n}")
        prepared = self.prepare_prompts(prompt_token_ids, sampling)
        return prepared, (self.next_seed(sampling) if prepared else 0)

    def stop_token_ids(self, sampling: SamplingArgs, *, ignore_eos: bool = False) -> list[int]:
        """Token ids that end a response: the engine's ``eos_token_ids`` (unless
        ``sampling.ignore_eos`` or ``ignore_eos``), then the extra ``stop_token_ids``."""
        eos = [] if ignore_eos or sampling.ignore_eos else list(self.eos_token_ids)
        return eos + [t for t in sampling.stop_token_ids if t not in eos]

    @staticmethod
    def check_scoring_args(token_ids: Sequence[Sequence[int]], prompt_lengths: Sequence[int],
                           temperature: float) -> None:
        """One-line :class:`RftError` for bad :meth:`compute_logprobs` arguments."""
        if len(token_ids) != len(prompt_lengths):
            raise RftError(f"compute_logprobs: {len(token_ids)} sequences but "
                           f"{len(prompt_lengths)} prompt lengths")
        if temperature <= 0:
            raise RftError(f"compute_logprobs: temperature must be > 0, got {temperature}")
        for i, (ids, p) in enumerate(zip(token_ids, prompt_lengths)):
            if not 1 <= p <= len(ids):
                raise RftError(f"compute_logprobs: sequence {i} has prompt length {p} "
                               f"outside [1, {len(ids)}]")

    def next_seed(self, sampling: SamplingArgs) -> int:
        """The seed of a call: ``sampling.seed``, else the next of the engine's seeds."""
        if sampling.seed is not None:
            return sampling.seed
        with self._seed_lock:
            return next(self._seeds)

    def seed_state(self) -> int:
        """The seed the next call without ``sampling.seed`` will use (what a run state
        records; the sequence is left where it was)."""
        with self._seed_lock:
            following = next(self._seeds)
            self._seeds = itertools.count(following)
        return following

    def restore_seed(self, seed: int) -> None:
        """Make ``seed`` (a :meth:`seed_state`) the next call's seed: a resumed run samples
        with the seeds the uninterrupted one would have used."""
        with self._seed_lock:
            self._seeds = itertools.count(int(seed))

    def prompt_limit(self, resumed_tokens: int = 0) -> int | None:
        """Most prompt tokens allowed: ``max_prompt_tokens`` (plus ``resumed_tokens``, a
        resumed response's part of the prompt), bounded by ``max_model_len − 1`` (room for
        one new token)."""
        limits = ([self.max_prompt_tokens + resumed_tokens]
                  if self.max_prompt_tokens is not None else [])
        model_len = self.effective_max_model_len()
        if model_len is not None:
            limits.append(model_len - 1)
        return min(limits) if limits else None

    def effective_max_model_len(self) -> int | None:
        """``max_model_len``, else the model's own limit (``None``: unbounded)."""
        if self.max_model_len is not None:
            return self.max_model_len
        return self.default_max_model_len()

    def prepare_prompts(self, prompt_token_ids: Sequence[Sequence[int]],
                        sampling: SamplingArgs) -> list[PreparedPrompt]:
        """Apply the prompt limit (left truncation or refusal) and compute each prompt's
        new-token budget."""
        model_len = self.effective_max_model_len()
        requested = (sampling.max_tokens if sampling.max_tokens is not None
                     else self.max_response_tokens)
        prepared: list[PreparedPrompt] = []
        for index, prompt in enumerate(prompt_token_ids):
            ids = [int(t) for t in prompt]
            if not ids:
                raise RftError(f"prompt {index} is empty: an engine needs at least one token")
            truncated = False
            limit = self.prompt_limit(sampling.resumed_tokens)
            if limit is not None and len(ids) > limit:
                if not self.enable_prompt_truncation:
                    raise RftError(
                        f"prompt {index} has {len(ids)} tokens, more than the limit of {limit} "
                        f"(max_prompt_tokens={self.max_prompt_tokens}, "
                        f"max_model_len={model_len}); raise model.max_prompt_tokens or set "
                        f"model.enable_prompt_truncation: true")
                ids, truncated = ids[-limit:], True
            budgets = [b for b in (requested,
                                   model_len - len(ids) if model_len is not None else None)
                       if b is not None]
            if not budgets:
                raise RftError("no response length limit: set model.max_response_tokens, "
                               "model.max_model_len or SamplingArgs.max_tokens")
            prepared.append(PreparedPrompt(ids, truncated, max(1, min(budgets))))
        return prepared


SyncWeights = Iterable[tuple[str, torch.Tensor]] | AdapterWeights
"""What a weight sync hands an engine: whole weights (Hugging Face names), or a LoRA
adapter when the trainer trains one."""


def load_weights(engine: InferenceEngine, weights: SyncWeights, version: int) -> None:
    """``engine.update_adapter`` for an adapter, else ``engine.update_weights``."""
    if isinstance(weights, AdapterWeights):
        engine.update_adapter(weights, version)
    else:
        engine.update_weights(weights, version=version)


def render_text(engine: InferenceEngine, messages: Sequence[dict[str, Any]], *,
                add_generation_prompt: bool, tools: Sequence[dict[str, Any]] | None = None
                ) -> str:
    """The conversation as text through the engine's chat template and settings (with the
    tools offered to the model, when given)."""
    kwargs: dict[str, Any] = {}
    if engine.enable_thinking is not None:
        kwargs["enable_thinking"] = engine.enable_thinking
    if engine.chat_template is not None:
        kwargs["chat_template"] = engine.chat_template
    if tools:
        kwargs["tools"] = list(tools)
    return engine.tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs)


__all__ = ["Completion", "FinishReason", "InferenceEngine", "PreparedPrompt", "SamplingArgs",
           "SyncWeights", "load_weights", "render_text"]
