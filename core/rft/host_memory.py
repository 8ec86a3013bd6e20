"""Keep freed host memory for reuse: glibc's malloc thresholds for tensor-sized blocks.

glibc serves a block larger than its *mmap threshold* with a fresh ``mmap`` (the
threshold starts at 128 KiB and rises by itself, up to 32 MiB, to the size of such a block
once it is freed), and hands the top of a heap back to the kernel when more than the *trim
threshold* (twice the mmap threshold) lies free there. A training step on CPU allocates
and frees the same few-MiB tensors every step (activations, logits, their gradients, the
decode loop's key / value caches) from several threads (several arenas, whose heaps are
trimmed the same way): the memory goes back to the kernel at the end of one phase and
comes back as new pages — each page a fault the kernel fills with zeros — in the next.

:func:`retain_freed_memory` fixes both thresholds (``mallopt``; what the environment
variables ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` would set at start-up):
blocks up to :data:`MMAP_THRESHOLD` come from the heaps, and up to :data:`TRIM_THRESHOLD`
of free memory stays in each heap for the next step. Measured on the GRPO bench (tiny
Qwen2, 16 prompts × 8 samples × 32 tokens, one process): system CPU time 50 → 20 ms per
step, the step's CPU time 447 → 416 ms; peak RSS 1050 → 1103 MiB.

Nothing is changed where the user chose: another allocator preloaded (``LD_PRELOAD``:
jemalloc, tcmalloc, mimalloc) or any ``MALLOC_*_`` tuning variable set; nor off glibc.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

logger = logging.getLogger(__name__)

MMAP_THRESHOLD = 32 * 1024 * 1024
"""Bytes: blocks up to this size come from the heaps (glibc's largest allowed value on
64-bit systems, ``HEAP_MAX_SIZE / 2``; the dynamic threshold's own ceiling)."""
TRIM_THRESHOLD = 256 * 1024 * 1024
"""Bytes of free memory a heap keeps at its top before handing it back to the kernel
(GRPO bench, 16 × 32: 256 MiB and 1 GiB both cut the system time 50 → 10 ms per step;
peak RSS 1103 vs 1171 MiB)."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                   "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")
_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")

_applied = False


def user_choice() -> str | None:
    """Why the allocator is left alone (the user tuned or replaced it), else ``None``."""
    for name in _USER_VARIABLES:
        if name in os.environ:
            return f"{name} is set"
    preload = os.environ.get("LD_PRELOAD", "")
    for allocator in _OTHER_ALLOCATORS:
        if allocator in preload:
            return f"LD_PRELOAD has {allocator}"
    return None


def retain_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (module docstring) in this process, once;
    ``True`` when they are set (now or before), ``False`` when left alone: not Linux with
    glibc, or :func:`user_choice`."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux") or user_choice() is not None:
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only (not musl)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
          and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    if not ok:
        logger.debug("mallopt refused the thresholds: the allocator is left as it was")
        return False
    _applied = True
    return True
