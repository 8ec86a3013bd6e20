"""Wheels of the core and every plugin distribution, and a FRESH venv with them installed
(not editable), shared by the packaging and tutorial tests (session scope).

Third-party dependencies (torch, transformers, ray, …: about 4 GB) are not installed again:
a ``.pth`` file in the fresh venv adds a "dependencies view" folder to its ``sys.path``,
holding a symlink to every entry of this project venv's site-packages EXCEPT rft's own
distributions (``rft``, ``rft_framework*``, ``rft_plugin_*``: packages and ``*.dist-info``),
the editable finders (``__editable__*``), every ``*.pth`` file, and pip / setuptools (the
fresh venv has its own). So only the wheels can provide ``rft`` there.

``new_venv`` makes such a venv with none of rft's distributions installed, for tests that
run a user's own ``pip install …`` line in it: pip there sees the view's packages as
installed, and finds everything else only in the wheels and ``build_deps`` (no index):
pytest (left out of the view, so that pip installs it with its ``pytest`` command) and
setuptools (for build isolation and the venv itself), both at this venv's versions,
downloaded once per session.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OWN_PREFIXES = ("rft", "__editable__")
"""Site-packages entries left out of the dependencies view (rft's own, editable finders)."""
FRESH_VENV_OWN = ("pip", "pip-", "setuptools", "setuptools-", "pkg_resources",
                  "_distutils_hack", "__pycache__")
"""Entries the fresh venv brings itself (its own pip and setuptools)."""


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    started = time.monotonic()
    subprocess.run([str(REPO / "scripts" / "build_wheels.sh"), str(out)], check=True,
                   capture_output=True, env={**os.environ, "PYTHON": sys.executable})
    print(f"wheels built in {time.monotonic() - started:.1f} s")
    return out


def wheel_of(wheels: Path, distribution: str) -> Path:
    found = list(wheels.glob(f"{distribution.replace('-', '_')}-*.whl"))
    assert len(found) == 1, (distribution, sorted(p.name for p in wheels.iterdir()))
    return found[0]


PIP_INSTALLS = ("pytest", "_pytest", "py.py", "pytest-")
"""View entries left out in ``new_venv``: pytest, which pip installs there (with its
``pytest`` command) from ``build_deps``."""


def dependencies_view(directory: Path, leave_out: Sequence[str] = ()) -> Path:
    """Symlinks to this venv's site-packages entries, minus rft's own, ``*.pth`` and the
    entries whose names start with one of ``leave_out``."""
    directory.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name
        if (name.startswith(OWN_PREFIXES) or name.endswith(".pth")
                or name.startswith(FRESH_VENV_OWN) or name.startswith(tuple(leave_out))):
            continue
        (directory / name).symlink_to(entry)
    return directory


def _venv_env(venv: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for key in ("RFT_PLUGINS", "RFT_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(key, None)
    return env


def _make_venv(root: Path, leave_out: Sequence[str] = ()) -> tuple[Path, Path, Path]:
    """``root/venv`` with the dependencies view on its path: (venv, python, purelib)."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    view = dependencies_view(root / "dependencies-view", leave_out)
    (purelib / "_rft_dependencies_view.pth").write_text(f"{view}\n")
    return venv, python, purelib


@pytest.fixture(scope="session")
def fresh(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A fresh venv with the wheels installed (not editable) and the dependencies view."""
    root = tmp_path_factory.mktemp("fresh")
    started = time.monotonic()
    venv, python, purelib = _make_venv(root)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", *map(str, sorted(wheels.glob("*.whl")))],
                   check=True, capture_output=True)
    print(f"fresh venv with wheels in {time.monotonic() - started:.1f} s")
    return {"venv": venv, "python": python, "purelib": purelib.resolve(),
            "env": _venv_env(venv), "cwd": root}


@pytest.fixture(scope="session")
def build_deps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of setuptools and pytest at this venv's versions (pip download, once)."""
    out = tmp_path_factory.mktemp("build-deps")
    wanted = [f"{name}=={importlib.metadata.version(name)}" for name in ("setuptools", "pytest")]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "--dest", str(out), *wanted],
                   check=True, capture_output=True)
    return out


def new_venv(root: Path, wheels: Path, build_deps: Path) -> dict:
    """A venv under ``root`` holding none of rft's distributions, whose ``pip`` installs
    from ``wheels`` and ``build_deps`` only (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``; pip's
    configuration files ignored), with this venv's setuptools: ``in_fresh`` runs a user's
    ``pip install rft-framework …`` line there as written."""
    venv, python, purelib = _make_venv(root, PIP_INSTALLS)
    env = _venv_env(venv)
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=f"{wheels} {build_deps}",
               PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "setuptools=="
                    + importlib.metadata.version("setuptools")],
                   check=True, capture_output=True, env=env)
    return {"venv": venv, "python": python, "purelib": purelib.resolve(), "env": env,
            "cwd": root}


def in_fresh(fresh: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), capture_output=True, text=True, env=fresh["env"],
                            cwd=fresh["cwd"])
    if check:
        assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-4000:])
    return result
