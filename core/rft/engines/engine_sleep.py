"""Engines that give their device memory back while a trainer on the same device steps.

In mode ``colocate`` the rollout engine and the trainer (or one trainer rank) share a
device. An engine implementing :class:`SleepMode` releases its device memory before each
train step and takes it back for the weight update that follows::

    build engine → sleep() → build trainer → wake() → explore → sleep() → train step
      → release → wake_up(("weights",)) → update_weights(new weights)
      → release → wake_up(("kv_cache",)) → explore …

(vLLM's sleep mode, as veRL's hybrid engine uses it: the KV cache is allocated again only
once the new weights are in.) *release* (:func:`release_device_cache`) runs before every
wake-up, in the process that wakes its engine (each trainer rank's, on N devices): it waits
for the device's queued work and hands the blocks PyTorch's caching allocator keeps (the
trainer's freed activations, the gathered weights just loaded) back to the device, where
the waking engine maps its memory; without it the trainer's cache and the engine together
can ask for more than the GPU has. An engine built before the trainer in the same process
sleeps while the trainer loads (:meth:`EngineSleep.sleep` then :meth:`EngineSleep.wake`).
:class:`EngineSleep` keeps that order and the engine's state.
Engines without it (``hf``), and engines whose sleep mode is off, keep their memory; on a
CPU nothing sleeps. The vLLM engine turns its sleep mode on by default on CUDA in mode
``colocate`` (:meth:`rft.engines.vllm_engine.VLLMEngine.from_config`); that GPU path has
not been run (no GPU was available).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

from rft.engines.engine import InferenceEngine, SyncWeights, load_weights

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


def release_device_cache() -> None:
    """``torch.cuda.synchronize()`` then ``torch.cuda.empty_cache()`` when this process has
    used CUDA (the memory PyTorch's allocator holds but no tensor uses goes back to the
    device); nothing otherwise."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


class EngineSleep:
    """One engine's sleep state: :meth:`sleep` before a train step, :meth:`load` after it.

    :param engine: the rollout engine; an engine that is not a :class:`SleepMode`, or
        whose ``sleep_mode`` is off, never sleeps (:meth:`load` is then
        ``update_weights``).
    :param release: run before every wake-up (default :func:`release_device_cache`).
    """

    def __init__(self, engine: InferenceEngine,
                 release: Callable[[], None] = release_device_cache) -> None:
        self.engine = engine
        self._sleeper: SleepMode | None = (
            engine if isinstance(engine, SleepMode) and engine.sleep_mode else None)
        self.enabled = self._sleeper is not None
        self.asleep = False
        self.release = release

    def wake(self) -> None:
        """Take back all the engine's device memory with the weights it held (after the
        trainer was built beside it): weights first, then the KV cache."""
        if self.asleep:
            self._wake(WEIGHTS)
            self._wake(KV_CACHE)
            self.asleep = False

    def _wake(self, tag: str) -> None:
        self.release()
        assert self._sleeper is not None  # asleep: it slept
        self._sleeper.wake_up((tag,))

    def sleep(self) -> None:
        """Release the engine's device memory (a train step follows)."""
        if self._sleeper is not None and not self.asleep:
            self._sleeper.sleep()
            self.asleep = True

    def load(self, named_tensors: SyncWeights, version: int) -> None:
        """Load new weights (or a LoRA adapter) as ``version``, waking a sleeping engine
        around it: weights first, the KV cache once they are in."""
        if self.asleep:
            self._wake(WEIGHTS)
        load_weights(self.engine, named_tensors, version)
        if self.asleep:
            self._wake(KV_CACHE)
            self.asleep = False


__all__ = ["KV_CACHE", "WEIGHTS", "EngineSleep", "SleepMode", "release_device_cache"]
