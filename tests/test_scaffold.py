"""``rft new-plugin KIND NAME``: each kind's distribution passes its own tests right after
it is written; bad input is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import rft
from rft.errors import RftError
from rft.scaffold import KINDS, core_requirement, scaffold

RFT = [str(Path(sys.executable).with_name("rft"))]


def test_the_core_requirement_is_one_minor_version():
    assert core_requirement("0.1.0") == "rft-framework>=0.1,<0.2"
    assert core_requirement("1.12.3") == "rft-framework>=1.12,<1.13"


def test_the_distribution_names_its_entry_point_and_bounded_core(tmp_path):
    root = scaffold("reward", "exact_answer", tmp_path, rft.__version__)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert root.name == project["name"] == "rft-plugin-exact-answer"
    assert project["dependencies"] == [core_requirement(rft.__version__)]
    assert project["entry-points"]["rft"] == {"exact_answer": "rft_plugin_exact_answer"}
    assert (root / "rft_plugin_exact_answer" / "__init__.py").is_file()
    assert (root / "tests" / "test_exact_answer.py").is_file()


@pytest.mark.parametrize("args, message", [
    (["new-plugin", "optimizer", "x"], "rft: new-plugin: unknown kind 'optimizer'; choose one "
                                       "of advantage, policy_loss, reward, workflow"),
    (["new-plugin", "reward", "My-Reward"], "rft: new-plugin: NAME must be a lower-case Python "
                                            "identifier (letters, digits, _), got 'My-Reward'"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    done = subprocess.run([*RFT, *args, "--dir", str(tmp_path)], capture_output=True,
                          text=True)
    assert (done.returncode, done.stderr.splitlines()) == (2, [message])


def test_an_existing_folder_is_not_overwritten(tmp_path):
    scaffold("policy_loss", "mine", tmp_path, rft.__version__)
    with pytest.raises(RftError, match="rft-plugin-mine already exists"):
        scaffold("policy_loss", "mine", tmp_path, rft.__version__)


@pytest.mark.slow
def test_every_kind_passes_its_own_tests_right_after_it_is_written(tmp_path):
    roots = []
    for kind in sorted(KINDS):
        done = subprocess.run([*RFT, "new-plugin", kind, f"my_{kind}", "--dir", str(tmp_path)],
                              capture_output=True, text=True, check=True)
        roots.append(Path(done.stdout.strip()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(r) for r in roots),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), *(str(r / "tests") for r in roots)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "9 passed" in done.stdout, done.stdout[-2000:]
