"""``bench/gpu_check.py``'s smoke run on CPU with the tiny model, with ``ray`` and ``vllm``
unimportable as on the GPU image it is prepared for: every check prints its ``RESULT``
line and passes (the GPU run itself has not happened here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_smoke_run_on_cpu():
    script = ROOT / "bench" / "gpu_check.py"
    without_ray_and_vllm = (  # an import of either fails, as on the GPU image
        "import runpy, sys; sys.modules['ray'] = sys.modules['vllm'] = None; "
        f"sys.argv = [{str(script)!r}] + sys.argv[1:]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')")
    run = subprocess.run(
        [sys.executable, "-c", without_ray_and_vllm, "--device", "cpu", "--model", "tiny",
         "--steps", "2", "--rows", "4", "--prompt", "8", "--response", "8"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    names = [line.split()[1] for line in lines]
    assert names == ["import", "trainer", "fsdp2_offload", "colocate_t1", "colocate_t0.7",
                     "compile_decode", "prefix_sharing"], run.stdout + run.stderr[-2000:]
    assert all(line.split()[2] == "ok" for line in lines), "\n".join(lines)
    assert run.returncode == 0


def test_a_torch_below_the_requirement_is_refused_in_one_line():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "bench"))
    need = gpu_check.torch_needed(["pluggy>=1.5", "torch>=2.13", "vllm; extra == 'vllm'"])
    assert need == ">=2.13"
    assert gpu_check.torch_refusal("2.11.0+cu130", need) == "torch 2.11.0, rft needs torch>=2.13"
    assert gpu_check.torch_refusal("2.13.0+cpu", need) is None
    assert gpu_check.torch_refusal("2.11.0", "") is None
