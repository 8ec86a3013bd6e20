"""scripts/setup.sh's steps for the environment plugins (``--dry-run``): Java for
rft-plugin-sciworld only where none is on PATH, and fast-downward-textworld (alfworld's
PDDL engine) built without pip's build isolation before the plugins are installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JAVA_STEP = "apt-get install -y default-jre-headless"


def dry_run(path: str) -> list[str]:
    done = subprocess.run([str(REPO / "scripts" / "setup.sh"), "--dry-run"],
                          capture_output=True, text=True, check=True, timeout=120,
                          env={**os.environ, "PATH": path})
    return done.stdout.splitlines()


def path_without_java(tmp_path: Path) -> str:
    """A PATH with every command of this one except ``java``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            target = bin_dir / entry.name
            if entry.name != "java" and not target.exists() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    return str(bin_dir)


def test_java_is_installed_only_where_it_is_missing(tmp_path):
    assert JAVA_STEP not in dry_run(os.environ["PATH"])  # this machine has java
    commands = dry_run(path_without_java(tmp_path))
    assert commands[0] == JAVA_STEP


def test_fast_downward_is_built_without_isolation_before_the_plugins():
    commands = dry_run(os.environ["PATH"])
    fast_downward = commands.index(
        "pip install --no-build-isolation fast-downward-textworld==20.6.4")
    plugins = next(i for i, line in enumerate(commands) if "plugins/envs/alfworld" in line)
    assert fast_downward < plugins
