"""rft.host_memory: glibc keeps tensor-sized freed blocks for reuse (no mmap / munmap and
no heap trim per step, the page faults behind ~30 ms of system time per GRPO bench step),
unless the user tuned or replaced the allocator."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rft import host_memory

# A fresh process: malloc an 8 MiB block, write it, free it; report the bytes glibc holds
# in mmapped blocks while it is live (grown by the block: it was mmapped) and the free
# memory kept at the heap's top afterwards (the block, unless trimmed or unmapped).
_PROBE = textwrap.dedent("""
    import ctypes, sys
    if sys.argv[1] == "retain":
        from rft.host_memory import retain_freed_memory
        assert retain_freed_memory()
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size = 8 << 20
    mapped_before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    mapped = libc.mallinfo2().hblkhd - mapped_before
    libc.free(block)
    print(mapped, libc.mallinfo2().keepcost)
""")


def _probe(mode: str) -> tuple[int, int]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux")
def test_freed_tensor_sized_blocks_stay_in_the_heap() -> None:
    size = 8 << 20
    mapped, kept = _probe("default")  # glibc's own thresholds: a fresh mmap, unmapped on free
    assert mapped >= size and kept < size
    mapped, kept = _probe("retain")  # from the heap, and kept there for the next step
    assert mapped == 0 and kept >= size


@pytest.mark.parametrize("variable, value, reason", [
    ("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "LD_PRELOAD has jemalloc"),
    ("MALLOC_TRIM_THRESHOLD_", "0", "MALLOC_TRIM_THRESHOLD_ is set"),
])
def test_the_users_allocator_choice_is_left_alone(monkeypatch: pytest.MonkeyPatch,
                                                  variable: str, value: str,
                                                  reason: str) -> None:
    monkeypatch.setattr(host_memory, "_applied", False)
    monkeypatch.setenv(variable, value)
    assert host_memory.user_choice() == reason
    assert host_memory.retain_freed_memory() is False
