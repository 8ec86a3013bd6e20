"""``rft new-plugin KIND NAME``: each kind's distribution passes its own tests right after
it is written; bad input is one line."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from fixtures_packaging import in_fresh, new_venv

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


def test_the_next_line_is_the_commands_and_a_newline(tmp_path):
    done = subprocess.run([*RFT, "new-plugin", "reward", "exact", "--dir", str(tmp_path)],
                          capture_output=True, text=True, check=True)
    root = tmp_path / "rft-plugin-exact"
    assert done.stdout == f"{root}\n"
    assert done.stderr == f"next: cd {root} && pip install -e '.[test]' && pytest\n"
    assert "plugins=[" not in (root / "tests" / "test_exact.py").read_text()


@pytest.mark.slow
def test_every_kind_passes_its_own_tests_after_its_printed_commands(wheels, build_deps,
                                                                     tmp_path):
    """In one fresh venv (``fixtures_packaging.new_venv``: rft from its wheel, pip without
    an index): ``pip install rft-framework``, then per kind ``rft new-plugin KIND NAME`` and
    the commands it prints, run by bash as printed."""
    venv = new_venv(tmp_path, wheels, build_deps)
    started = time.monotonic()
    in_fresh(venv, "pip", "install", "--quiet", "rft-framework")
    for kind in sorted(KINDS):
        done = in_fresh(venv, "rft", "new-plugin", kind, f"my_{kind}", "--dir", str(tmp_path))
        root = Path(done.stdout.strip())
        assert done.stderr.startswith("next: ") and done.stderr.endswith("\n"), done.stderr
        kind_started = time.monotonic()
        ran = in_fresh(venv, "bash", "-c", "set -e; " + done.stderr[len("next: "):], check=False)
        output = ran.stdout + ran.stderr
        assert ran.returncode == 0, (kind, output[-6000:])
        passed = re.search(r"(\d+) passed", output)
        assert passed and " failed" not in output and " error" not in output, output[-3000:]
        tests = len(re.findall(r"^def test_", (root / "tests" / f"test_my_{kind}.py")
                               .read_text(), re.M))
        assert int(passed.group(1)) == tests, output[-3000:]
        installed = in_fresh(venv, "python", "-c", f"import rft_plugin_my_{kind} as m; "
                             "print(m.__file__)").stdout.strip()
        assert Path(installed).resolve().is_relative_to(root)  # the editable install
        print(f"{kind}: {time.monotonic() - kind_started:.1f} s")
    print(f"every kind in {time.monotonic() - started:.1f} s")
