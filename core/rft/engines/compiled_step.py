"""The ``hf`` engine's decode steps through ``torch.compile``
(``explorer.rollout_model.extra_engine_args: {compile_decode: true}``).

A decode step runs the model's own forward over one new token per row. For a small model,
or few rows, that step is mostly the dispatch of ~60 operators per layer, one after
another (projections, RMSNorm's six, rotary's dozen, the cache update, SiLU · gate): on
the CPU a hidden-64, 2-layer Qwen2 spends ~1.5 ms per step at 32 rows whatever the
arithmetic. :class:`CompiledStep` hands the same forward to ``torch.compile`` (inductor),
which fuses the elementwise operators into a few kernels. Two dimensions are dynamic,
marked on every call (:func:`mark_decode_dims`): the rows and the cache length (the
mask's last dimension, the cache tensors' third); the model's widths stay static, so the
kernels are generated for them and the guards checked before each step are fewer (on the
CPU ~35 µs less per step than ``dynamic=True``, which makes every dimension symbolic).
One compile covers every row count and cache length (sizes 0 and 1 are specialised, so a
call with a single row compiles once more). Nothing of the model is copied: it is the
model's own forward, traced.

On the CPU two more cuts of the per-step overhead:

- inductor's C++ wrapper (``cpp_wrapper``): the compiled graph calls its kernels and
  matrix products from generated C++ instead of a generated Python function (~40 calls
  per step for a 2-layer model, a few µs of Python each);
- the attention of one query per row is written as batched products inside the graph
  (:func:`rft.engines.gqa_attention.one_query_attention`) rather than SDPA's CPU kernel.

**The draw in the graph.** Where the step's sampling allows it (``T > 0``, no top-k, no
top-p: GRPO's defaults; a minimum length too), :meth:`CompiledStep.forward_and_draw` runs
the forward *and* the step's softmax, inverse-CDF draw and log-probs
(:func:`rft.engines.decode_loop.forward_and_draw`) as one graph, a second one compiled on
first use. The uniform numbers are drawn before the step from the global RNG, as the
eager loop draws them, so the tokens are the eager loop's (up to kernel rounding at a
draw's boundary). On the CPU this takes ~15 eager operators per step out of the loop:
32 rows × 32 tokens, 29.5–29.9 → 27.5–28.6 ms per ``generate`` call
(docs/benchmarks.md). Other settings run the plain compiled forward and the loop's own
filters and draw.

**Guards once per call.** Dynamo checks ~1,000 guards before each compiled call (~90 µs
of a ~900 µs CPU step of the bench's model). Within one ``generate`` call nothing they
check can change, so only a call's first decode step checks them; its later steps run
with ``skip_guard_eval_unsafe`` (:meth:`CompiledStep._run`): 26.4–27.6 → 25.0–25.9 ms
per call of 32 rows × 32 tokens.

**The prompts compiled too.** A call's prefill (each distinct prompt once, an empty
cache) runs the same forward through a third graph (:meth:`CompiledStep.prefill`), the
prompt length dynamic as well; the cache it fills is made contiguous, so the decode
graph sees the strides it always sees. On the CPU, 4 prompts of 27 tokens: 2.0–2.3 →
1.1–1.35 ms per call. A call of one prompt compiles it once more (a size of 1 is
specialised).

Dynamo keeps compiled graphs, and its limit of 8 per function, on the traced code; every
Hugging Face model's ``forward`` is one decorator's code, so two compiled engines of one
process would share that limit. Where torch has ``isolate_recompiles`` (2.13), each
:class:`CompiledStep` keeps graphs of its own.

- **Cost.** The first decode step compiles: ~20–30 s on this project's 2-core CPUs for a
  2-layer model, more for deeper ones; inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``)
  brings a later start of the same model down to seconds. A run of few steps loses.
- **Weights.** Parameters are inputs of the compiled graph, so the in-place copies of
  :meth:`~rft.engines.hf_engine.HFEngine.update_weights` and ``update_adapter`` are read
  by the next step. A replaced parameter, or LoRA layers inserted by the first adapter
  sync, fail a guard of the graph and compile it once more.
- **Numbers.** Fused kernels round differently from eager ones: log-probs agree to ~1e-6
  in float32 on the CPU, and a token whose probabilities sit on a draw's boundary may
  differ from an eager run's.
- **Failure.** When compiling fails (no C++ compiler for inductor on the CPU, an operator
  dynamo cannot trace), one warning line names the error and every later step runs eagerly.
- Not run on a GPU: there inductor emits Triton kernels, which this project has never run.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import torch
from torch import nn

from rft.engines.decode_loop import accepts_keyword, forward_and_draw
from rft.errors import first_line

log = logging.getLogger(__name__)

_ONE_STEP_AT_A_TIME = threading.Lock()
"""Held by every compiled step of the process: dynamo's stance is process-wide, so a step
that skips its guards must not overlap another engine's step (in another thread) that
needs them checked."""


def mark_decode_dims(inputs: dict[str, Any]) -> None:
    """Mark a decode step's dynamic dimensions for ``torch.compile``
    (``torch._dynamo.maybe_mark_dynamic``: a hint, specialised where the trace needs it):
    the rows (dimension 0 of every tensor input and of the cache's tensors), the mask's
    last dimension (the keys) and the cache tensors' third ``(R, kv, L, d)``, as
    ``transformers``' cache layers (``past_key_values.layers[i].keys / .values``) hold
    them. A cache of another kind is left unmarked (a new length then compiles once more,
    as automatic dynamic shapes do)."""
    mark = torch._dynamo.maybe_mark_dynamic
    for name in ("input_ids", "position_ids", "attention_mask", "uniforms"):
        tensor = inputs.get(name)
        if isinstance(tensor, torch.Tensor):
            mark(tensor, 0)
            if name == "attention_mask":
                mark(tensor, tensor.dim() - 1)
    for layer in getattr(inputs.get("past_key_values"), "layers", ()):
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor) and tensor.dim() == 4:
                mark(tensor, 0)
                mark(tensor, 2)


class CompiledStep:
    """``model.forward`` compiled, the rows and the cache length dynamic
    (:func:`mark_decode_dims`), called as the model is (keyword inputs); and
    :meth:`forward_and_draw`, the forward and the step's draw in one compiled graph. Both
    fall back to running as they are, for good, once compiling fails."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        parameter = next(model.parameters(), None)
        on_cpu = parameter is None or parameter.device.type == "cpu"
        isolated: dict[str, Any] = ({"isolate_recompiles": True}
                                    if accepts_keyword(torch.compile, "isolate_recompiles")
                                    else {})
        options: dict[str, Any] | None = {"cpp_wrapper": True} if on_cpu else None
        self._compiled = torch.compile(model.forward, options=options, **isolated)
        self._compiled_prefill = torch.compile(model.forward, options=options, **isolated)

        def step_and_draw(**inputs: Any) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
            return forward_and_draw(model, **inputs)

        self._eager_draw = step_and_draw
        self._compiled_draw = torch.compile(step_and_draw, options=options, **isolated)
        self.failure: str | None = None
        """Why the steps run eagerly (``None``: compiled)."""
        self.compiled_calls = 0
        """Decode steps a compiled graph ran (either kind; prefills not counted)."""
        self.compiled_prefills = 0
        """Prefills the compiled prompt graph ran (:meth:`prefill`)."""
        self.compiled_draws = 0
        """Of those, steps that drew in the graph (:meth:`forward_and_draw`)."""
        self.unguarded_calls = 0
        """Of the compiled steps, those that ran with dynamo's guards skipped (every step of a
        ``generate`` call after its first, :meth:`_run`)."""
        self._unguarded = unguarded_stance()
        self._last_cache: dict[int, weakref.ref[Any]] = {}  # id(compiled) → its last cache

    def __call__(self, **inputs: Any) -> Any:
        out, compiled = self._run(self._compiled, self.model, inputs)
        self.compiled_calls += compiled
        return out

    def prefill(self, **inputs: Any) -> Any:
        """A call's prompt forward (an empty cache, ``(B, P)`` inputs) through a graph of
        its own, the prompt length dynamic too; its guards are always checked (each call's
        cache is new). The cache it fills is made contiguous: inductor may return the
        keys and values as transposed views, and a decode graph traced on those strides
        would compile again at the next step, whose cache is contiguous."""
        for name in ("input_ids", "position_ids"):
            tensor = inputs.get(name)
            if isinstance(tensor, torch.Tensor) and tensor.dim() == 2:
                torch._dynamo.maybe_mark_dynamic(tensor, 1)
        out, compiled = self._run(self._compiled_prefill, self.model, inputs)
        self.compiled_prefills += compiled
        contiguous_cache(getattr(out, "past_key_values", None))
        return out

    def forward_and_draw(self, **inputs: Any
                         ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`rft.engines.decode_loop.forward_and_draw` compiled (a
        :data:`~rft.engines.decode_loop.DrawingStep`): the step's softmax, inverse-CDF draw
        and log-probs join the forward's graph instead of running as ~15 eager operators
        after it (~80 µs per step on the CPU at 32 rows)."""
        out, compiled = self._run(self._compiled_draw, self._eager_draw, inputs)
        self.compiled_calls += compiled
        self.compiled_draws += compiled
        return out

    def _run(self, compiled: Any, eager: Any, inputs: dict[str, Any]) -> tuple[Any, bool]:
        """``(compiled(**inputs), True)`` (``(eager(**inputs), False)`` once compiling
        failed).

        **Guards skipped within a call.** Before each call dynamo checks ~1,000 guards (the
        module tree, every parameter's attributes): ~90 µs of a ~900 µs CPU step of the
        bench's model. Within one ``generate`` call nothing they check can change — the
        engine's lock keeps weight and adapter syncs out, the rows stay, only the cache
        length grows and it is dynamic — so a step whose cache is the one the same graph's
        previous step extended runs under ``torch.compiler.set_stance(
        skip_guard_eval_unsafe=True)``, which checks only the guards that tell the graphs
        already compiled apart. The first step of every call checks them all (a replaced
        parameter, LoRA layers inserted, a new row count: a recompile as before). The
        stance is process-wide: the compiled steps of the process's engines run one at a
        time (:data:`_ONE_STEP_AT_A_TIME`)."""
        if self.failure is None:
            try:
                with _ONE_STEP_AT_A_TIME:
                    if self._continues_a_call(compiled, inputs.get("past_key_values")):
                        with self._unguarded:
                            out = compiled(**inputs)
                        self.unguarded_calls += 1
                    else:
                        mark_decode_dims(inputs)
                        out = compiled(**inputs)
                return out, True
            except torch._dynamo.exc.TorchDynamoException as error:
                # raised while tracing or compiling, before the graph ran: the inputs (and
                # the cache) are as they were, so the eager forward below starts afresh
                self.failure = first_line(error)
                log.warning("hf engine: compile_decode: compiling the decode step failed "
                            "(%s); decoding eagerly", self.failure)
        return eager(**inputs), False

    def _continues_a_call(self, compiled: Any, cache: Any) -> bool:
        """Whether ``cache`` is the one ``compiled``'s previous step ran with (the same
        call's next step), so the guards may be skipped; remembers it for the next step."""
        if self._unguarded is None or cache is None:
            return False
        last = self._last_cache.get(id(compiled))
        try:
            self._last_cache[id(compiled)] = weakref.ref(cache)
        except TypeError:  # a cache that takes no weak reference: guarded steps
            return False
        return last is not None and last() is cache


def contiguous_cache(cache: Any) -> None:
    """Make the key and value tensors of ``cache``'s layers (``transformers``' cache
    layers, ``.layers[i].keys / .values``) contiguous in place; another kind of cache is
    left as it is."""
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor) and not tensor.is_contiguous():
                setattr(layer, name, tensor.contiguous())


def unguarded_stance() -> Any:
    """``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` as a reusable context
    manager (made once: making one costs ~140 µs on the CPU, entering it ~4 µs); ``None``
    where torch has no such stance (before 2.6)."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None or not accepts_keyword(set_stance, "skip_guard_eval_unsafe"):
        return None
    stance = set_stance(skip_guard_eval_unsafe=True)  # making it sets the stance …
    stance.__exit__(None, None, None)  # … back to the one before; `with stance:` sets it
    return stance
