"""Engines that give their device memory back while a trainer on the same device steps.

In mode ``colocate`` the rollout engine and the trainer (or one trainer rank) share a
device. An engine implementing :class:`SleepMode` releases its device memory before each
train step and takes it back for the weight update that follows::

    explore → sleep() → train step → wake_up(("weights",)) → update_weights(new weights)
            → wake_up(("kv_cache",)) → explore …

(vLLM's sleep mode, as veRL's hybrid engine uses it: the KV cache is allocated again only
once the new weights are in.) :class:`EngineSleep` keeps that order and the engine's state.
Engines without it (``hf``), and engines whose sleep mode is off, keep their memory; on a
CPU nothing sleeps. The vLLM engine turns its sleep mode on by default on CUDA in mode
``colocate`` (:meth:`rft.explorer.vllm_engine.VLLMEngine.from_config`); that GPU path has
not been run (no GPU was available).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from rft.explorer.engine import InferenceEngine, SyncWeights, load_weights

WEIGHTS = "weights"
"""``wake_up`` tag: the model weights."""
KV_CACHE = "kv_cache"
"""``wake_up`` tag: the KV cache."""


@runtime_checkable
class SleepMode(Protocol):
    """An engine that can release its device memory between explore steps."""

    @property
    def sleep_mode(self) -> bool:
        """``sleep`` frees device memory (e.g. vLLM built with ``enable_sleep_mode``)."""

    def sleep(self) -> None:
        """Release the device memory of the weights and the KV cache until ``wake_up``."""

    def wake_up(self, tags: tuple[str, ...] | None = None) -> None:
        """Take back the memory of ``tags`` (:data:`WEIGHTS`, :data:`KV_CACHE`; ``None``:
        all)."""


class EngineSleep:
    """One engine's sleep state: :meth:`sleep` before a train step, :meth:`load` after it.

    :param engine: the rollout engine; an engine that is not a :class:`SleepMode`, or
        whose ``sleep_mode`` is off, never sleeps (:meth:`load` is then
        ``update_weights``).
    """

    def __init__(self, engine: InferenceEngine) -> None:
        self.engine = engine
        self.enabled = isinstance(engine, SleepMode) and bool(engine.sleep_mode)
        self.asleep = False

    def sleep(self) -> None:
        """Release the engine's device memory (a train step follows)."""
        if self.enabled and not self.asleep:
            self.engine.sleep()  # type: ignore[attr-defined]
            self.asleep = True

    def load(self, named_tensors: SyncWeights, version: int) -> None:
        """Load new weights (or a LoRA adapter) as ``version``, waking a sleeping engine
        around it: weights first, the KV cache once they are in."""
        if self.asleep:
            self.engine.wake_up((WEIGHTS,))  # type: ignore[attr-defined]
        load_weights(self.engine, named_tensors, version)
        if self.asleep:
            self.engine.wake_up((KV_CACHE,))  # type: ignore[attr-defined]
            self.asleep = False


__all__ = ["KV_CACHE", "WEIGHTS", "EngineSleep", "SleepMode"]
