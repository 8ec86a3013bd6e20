"""scripts/setup.sh --test installs the studio's browser: Debian's chromium and
chromium-driver with apt-get only where either is missing, never without --test; the
test extra holds selenium and the studio extra the plugin's web stack."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
BROWSER_STEP = "apt-get install -y chromium chromium-driver"


def _dry_run(path: str, *options: str) -> list[str]:
    done = subprocess.run([str(REPO / "scripts" / "setup.sh"), "--dry-run", *options],
                          capture_output=True, text=True, check=True, timeout=120,
                          env={**os.environ, "PATH": path})
    return done.stdout.splitlines()


def _path_without(tmp_path: Path, *missing: str) -> str:
    """A PATH with every command of this one except ``missing``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            target = bin_dir / entry.name
            if entry.name not in missing and not target.exists() \
                    and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    return str(bin_dir)


def test_the_browser_is_installed_with_test_only_where_missing(tmp_path: Path) -> None:
    without = _path_without(tmp_path, "chromedriver")
    assert BROWSER_STEP in _dry_run(without, "--test")
    assert BROWSER_STEP not in _dry_run(without)  # the plain set-up needs no browser
    assert BROWSER_STEP not in _dry_run(os.environ["PATH"], "--test")  # present here


def test_extras_name_the_studio_and_its_test_needs() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    studio = tomllib.loads((REPO / "plugins/commands/studio/pyproject.toml").read_text())
    names = {line.split(">")[0].split("=")[0] for line in extras["studio"]}
    assert "rft-plugin-studio" in names
    assert {d.split(">")[0] for d in studio["project"]["dependencies"]} - {"rft-framework"} \
        <= names
    assert any(line.startswith("selenium") for line in extras["test"])
