"""Wheels of the core and every plugin distribution, and a FRESH venv with them installed
(not editable), shared by the packaging and tutorial tests (session scope).

Third-party dependencies (torch, transformers, ray, …: about 4 GB) are not installed again:
a ``.pth`` file in the fresh venv adds a "dependencies view" folder to its ``sys.path``,
holding a symlink to every entry of this project venv's site-packages EXCEPT rft's own
distributions (``rft``, ``rft_framework*``, ``rft_plugin_*``: packages and ``*.dist-info``),
the editable finders (``__editable__*``), every ``*.pth`` file, and pip / setuptools (the
fresh venv has its own). So only the wheels can provide ``rft`` there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
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


def dependencies_view(directory: Path) -> Path:
    """Symlinks to this venv's site-packages entries, minus rft's own and ``*.pth``."""
    directory.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name
        if (name.startswith(OWN_PREFIXES) or name.endswith(".pth")
                or name.startswith(FRESH_VENV_OWN)):
            continue
        (directory / name).symlink_to(entry)
    return directory


@pytest.fixture(scope="session")
def fresh(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A fresh venv with the wheels installed (not editable) and the dependencies view."""
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    view = dependencies_view(root / "dependencies-view")
    (purelib / "_rft_dependencies_view.pth").write_text(f"{view}\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", *map(str, sorted(wheels.glob("*.whl")))],
                   check=True, capture_output=True)
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for key in ("RFT_PLUGINS", "RFT_DISABLE_PLUGIN_AUTOLOAD"):
        env.pop(key, None)
    print(f"fresh venv with wheels in {time.monotonic() - started:.1f} s")
    return {"venv": venv, "python": python, "purelib": purelib.resolve(), "env": env,
            "cwd": root}


def in_fresh(fresh: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), capture_output=True, text=True, env=fresh["env"],
                            cwd=fresh["cwd"])
    if check:
        assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-4000:])
    return result
