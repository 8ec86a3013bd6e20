"""rft's CPU platform for veRL — **rft's shim, not part of veRL**.

veRL 0.9.1 has no CPU path: on a machine without an accelerator it falls back to the
NVIDIA platform, opens an NCCL process group, builds CUDA device meshes and registers its
FSDP engines for ``cuda`` / ``npu`` only (docs/verl-adapter-investigation.md follows each
stop). :func:`activate` makes veRL's engine workers run on the CPU in one process, through
veRL's own extension points only (no edit to, and no monkey-patching of, veRL's files):

1. :class:`PlatformCPU` is registered with ``verl.plugin.platform.PlatformRegistry`` under
   ``"cpu"`` and installed with ``set_platform``: device ``cpu``, backend ``gloo``, a
   device module (:class:`CPUDeviceModule`) that answers veRL's CUDA-style memory, stream
   and RNG queries for the CPU;
2. veRL's FSDP engines are registered for device ``"cpu"`` with veRL's
   ``EngineRegistry.register`` (the language-model engine as it is; the value-model engine
   as :class:`CPUValueEngine`, which loads the critic with the model's configured attention
   instead of veRL's hard-wired FlashAttention 2), both with rft's prefix-tree packed
   ``forward_step`` (:mod:`rft_plugin_verl.packed_engine`, ``trainer.prefix_sharing``);
3. a gloo process group is opened before the worker starts (veRL skips its own
   ``cpu:gloo,<device>:<backend>`` initialisation when one exists, which on CPU would name
   the device twice).

Only ``strategy: fsdp2`` runs this way (FSDP1 needs an accelerator for
``sync_module_states``), with eager attention. The shim is used only where no CUDA device
is visible; on GPU machines veRL runs as shipped. What it fakes (memory statistics are the
process's, the "device" is the CPU) is what a CPU test of the adapter can exercise; veRL's
GPU behaviour is untested here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

CPU_PLATFORM = "cpu"
"""The name :class:`PlatformCPU` is registered under in veRL's ``PlatformRegistry``."""


def needed() -> bool:
    """Whether veRL needs this shim here: no CUDA device is visible to torch."""
    return not torch.cuda.is_available()


class CPUDeviceModule:
    """The ``torch.<device>`` module veRL's ``get_torch_device()`` returns, for the CPU.

    veRL calls CUDA-style functions on it: caches and streams (no-ops or ``torch.cpu``'s),
    RNG state (the CPU generator), memory statistics (zeros for the allocator's counters,
    the machine's memory for ``mem_get_info``). Anything else falls through to
    ``torch.cpu``.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """``(free, total)`` bytes of the machine's memory."""
        import psutil

        memory = psutil.virtual_memory()
        return int(memory.available), int(memory.total)


def _platform_class() -> type:
    """:class:`PlatformCPU`, defined against veRL's ``PlatformBase`` (imported lazily so
    that this module imports without veRL)."""
    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        """veRL platform ``cpu``: device ``cpu``, gloo, :class:`CPUDeviceModule`."""

        _module = CPUDeviceModule()

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self) -> Any:
            return self._module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return needed()

        def current_device(self) -> Any:
            # veRL moves modules to ``get_device_id()``: the CPU here
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    return PlatformCPU


_ACTIVE: list[bool] = []


def activate() -> None:
    """Register and install the CPU platform and the CPU engines (idempotent; see the
    module docstring). Call before veRL's workers are built."""
    if _ACTIVE:
        return
    from verl.plugin.platform import PlatformRegistry, set_platform

    platform_cls = PlatformRegistry.register(platform=CPU_PLATFORM)(_platform_class())
    set_platform(platform_cls())
    _register_engines()
    _ACTIVE.append(True)


def _register_engines() -> None:
    """veRL's FSDP engines under device ``cpu`` in its ``EngineRegistry``."""
    from verl.workers.engine.base import EngineRegistry

    from rft_plugin_verl import packed_engine

    registered = EngineRegistry._engines
    backends = ["fsdp", "fsdp2"]
    if CPU_PLATFORM not in registered.get("language_model", {}).get("fsdp2", {}):
        EngineRegistry.register(model_type="language_model", backend=backends,
                                device=CPU_PLATFORM)(packed_engine.lm_engine_class())
    if CPU_PLATFORM not in registered.get("value_model", {}).get("fsdp2", {}):
        EngineRegistry.register(model_type="value_model", backend=backends, device=CPU_PLATFORM)(
            packed_engine.value_engine_class(_value_engine_class()))


def _value_engine_class() -> type:
    """:class:`CPUValueEngine`: veRL's value-model FSDP engine, loading the critic with the
    attention implementation of its config (eager on CPU)."""
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithValueHead

    class CPUValueEngine(FSDPEngineWithValueHead):
        """veRL's ``load_valuehead_model`` asks for FlashAttention 2, which has no CPU
        build; this engine loads ``AutoModelForTokenClassification`` (one label, no
        dropout, as veRL does) with the model config's attention instead, its fresh
        value head drawn with the native trainer's seed
        (:data:`rft.trainer.torch_trainer.CRITIC_HEAD_SEED`)."""

        def _build_module(self) -> torch.nn.Module:
            from rft.trainer.torch_trainer import CRITIC_HEAD_SEED
            from transformers import AutoModelForTokenClassification
            from verl.models.transformers.monkey_patch import apply_monkey_patch
            from verl.utils.torch_dtypes import PrecisionType

            dtype = PrecisionType.to_dtype(self.engine_config.model_dtype or "fp32")
            config = self.model_config.hf_config
            config.num_labels = 1
            config.classifier_dropout = 0.0
            with torch.random.fork_rng(devices=[]):  # the native trainer's fresh head
                torch.manual_seed(CRITIC_HEAD_SEED)
                module = AutoModelForTokenClassification.from_pretrained(
                    self.model_config.local_path, config=config, dtype=dtype,
                    trust_remote_code=self.model_config.trust_remote_code)
            apply_monkey_patch(model=module, use_remove_padding=self.use_remove_padding,
                               ulysses_sp_size=self.ulysses_sequence_parallel_size)
            module.to(dtype)
            if self.model_config.enable_gradient_checkpointing:
                module.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False})
            return module

    return CPUValueEngine
