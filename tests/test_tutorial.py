"""docs/tutorial-algorithm.md, followed as written: its ``bash`` blocks run in order, as one
script, in an empty folder, from a FRESH venv holding the wheels of rft and its plugins
(``tests/fixtures_packaging.py``: not editable; third-party packages come from a view of
the project venv instead of being downloaded again — the one step of the page the test
stands in for is its ``pip install rft-framework …`` into a fresh environment).

Scaffold → implement a policy loss → property tests (one catching a broken variant) →
build a wheel → install it → select it by name in YAML → a run whose reward rises.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial-algorithm.md"


def bash_blocks(markdown: str) -> list[str]:
    """The ```` ```bash ```` blocks of a markdown page, in order."""
    return re.findall(r"^```bash\n(.*?)^```", markdown, re.M | re.S)


def test_the_page_has_every_step():
    script = "\n".join(bash_blocks(TUTORIAL.read_text()))
    for step in ("rft new-plugin policy_loss cispo_lite", "python -m pytest",
                 "python -m build --wheel", "pip install --quiet dist/", "rft plugins",
                 "policy_loss_fn: cispo_lite", "rft run cispo_lite.yaml",
                 'assert last > first'):
        assert step in script, step


def test_the_tutorial_runs_as_written(fresh: dict, tmp_path: Path):
    script = "set -euo pipefail\n" + "\n".join(bash_blocks(TUTORIAL.read_text()))
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=fresh["env"],
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) == 3 and " failed" not in output, output[-3000:]
    assert re.search(r"^cispo_lite\s+rft-plugin-cispo-lite\s+0\.1\.0\s+policy_loss_fn: "
                     r"cispo_lite", output, re.M), output[-3000:]
    rose = re.search(r"reward: first 10 steps ([\d.]+), last 10 steps ([\d.]+)", output)
    assert rose and float(rose.group(2)) > float(rose.group(1)), output[-3000:]
    installed = subprocess.run(
        [str(fresh["python"]), "-c", "import rft_plugin_cispo_lite; "
         "print(rft_plugin_cispo_lite.__file__)"], cwd=fresh["cwd"], env=fresh["env"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert Path(installed).resolve().is_relative_to(fresh["purelib"])  # from the wheel
