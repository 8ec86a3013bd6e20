"""Run discovery, status and metric reading (:mod:`rft_plugin_studio.run_files`), and the
runs page: its routes, and in a real browser the quickstart-like run's reward curve,
overlaid runs and the redraw while a run is live."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import yaml
from recorded_runs import STEPS, RecordedRuns

from rft.testing.toy_rewards import VowelRewardPlugin
from starlette.applications import Starlette
from starlette.testclient import TestClient

from rft.config import load_config
from rft.errors import RftError
from rft.plugins import PluginRegistry
from rft_plugin_studio.app import build_app
from rft_plugin_studio.page import StudioContext
from rft_plugin_studio.run_files import (LIVE_SECONDS, discover_runs, find_run, read_curves,
                                         run_status)
from rft_plugin_studio.testing import screenshot

REWARD = "rollout/reward/mean"


def _explorer_rewards(job_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in
            (job_dir / "monitor" / "explorer.jsonl").read_text().splitlines()]
    return [(r["step"], r["metrics"][REWARD]) for r in rows if REWARD in r["metrics"]]


def test_every_run_is_found_with_its_status_and_curves(recorded_runs: RecordedRuns) -> None:
    runs = discover_runs(recorded_runs.root)
    assert sorted(r.run_id for r in runs) == ["quickstart_like/vowels", "tools/toolcall"]
    vowels = find_run(recorded_runs.root, "quickstart_like/vowels")
    assert [s.name for s in vowels.stages] == [""] and run_status(vowels) == "finished"
    curves = read_curves(vowels.stages[0])
    assert curves[REWARD] == _explorer_rewards(recorded_runs.vowels)
    assert len(curves[REWARD]) == STEPS and "actor/grad_norm" in curves
    with pytest.raises(RftError, match=r"nope/run: no run there"):
        find_run(recorded_runs.root, "nope/run")
    assert discover_runs(recorded_runs.root / "missing") == []


def test_status_running_stopped_and_multi_stage(recorded_runs: RecordedRuns,
                                                tmp_path: Path) -> None:
    copy = tmp_path / "root" / "p" / "live"
    shutil.copytree(recorded_runs.vowels, copy)
    (copy / "summary.json").unlink()  # a run that has not finished its stage
    (copy / "monitor" / "explorer.jsonl").touch()
    live = find_run(tmp_path / "root", "p/live")
    assert run_status(live) == "running"
    assert run_status(live, now=time.time() + LIVE_SECONDS + 5) == "stopped"
    # a two-stage run: <name>/<stage>/monitor, the order summary.json gives
    staged = tmp_path / "root" / "p" / "staged"
    for stage in ("sft", "grpo"):
        shutil.copytree(recorded_runs.vowels / "monitor", staged / stage / "monitor")
    (staged / "summary.json").write_text(json.dumps({"stages": [{"name": "sft"},
                                                                {"name": "grpo"}]}))
    run = find_run(tmp_path / "root", "p/staged")
    assert [s.name for s in run.stages] == ["sft", "grpo"]
    assert run.stage("grpo").folder == staged / "grpo"


def test_a_failed_run_reads_as_failed(recorded_runs: RecordedRuns, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The launcher notes a run that stopped on an error in its log file (stderr keeps its
    one ``rft:`` line); the studio reads that note."""
    from rft import launcher

    config = yaml.safe_load((recorded_runs.vowels.parent.parent.parent / "vowels" /
                             "config.yaml").read_text())
    config.update(checkpoint_root_dir=str(tmp_path), name="broken")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load_config(path, registry=PluginRegistry.create(extra_plugins=[VowelRewardPlugin()]))

    def broken(stage: Any, runtime: Any) -> Any:
        raise RftError("buffer.batch_size: something went wrong")

    monkeypatch.setitem(launcher.MODE_RUNNERS, "colocate", broken)
    capsys.readouterr()
    with pytest.raises(RftError):
        launcher.run(loaded)
    assert capsys.readouterr().err == ""  # the CLI's one `rft:` line stays the only one
    run = find_run(tmp_path, "quickstart_like/broken")
    assert run_status(run) == "failed"
    log = (tmp_path / "quickstart_like" / "broken" / "log" / "launcher.log").read_text()
    assert log.splitlines()[-1].endswith(
        "ERROR rft.launcher: run failed: buffer.batch_size: something went wrong")


def test_the_runs_routes(recorded_runs: RecordedRuns) -> None:
    client = TestClient(build_app(StudioContext(recorded_runs.root)))
    page = client.get("/runs")
    assert page.status_code == 200
    assert "quickstart_like/vowels" in page.text and "tools/toolcall" in page.text
    both = "run=quickstart_like/vowels&run=tools/toolcall"
    status = client.get(f"/runs/status.json?{both}").json()["runs"]
    assert [(r["id"], r["status"], r["last_step"]) for r in status] == [
        ("quickstart_like/vowels", "finished", STEPS), ("tools/toolcall", "finished", 1)]
    curves = client.get(f"/runs/curves.json?{both}").json()
    assert [tuple(p) for p in curves["quickstart_like/vowels"][REWARD]] == \
        _explorer_rewards(recorded_runs.vowels)
    svg = client.get(f"/runs/curves.svg?{both}")
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert f'id="curve:quickstart_like/vowels:{REWARD}"' in svg.text
    assert f'id="curve:tools/toolcall:{REWARD}"' in svg.text  # overlaid
    assert client.get("/runs?run=../../etc").status_code == 404
    assert client.get("/runs/curves.svg?run=nope").text == \
        "rft studio: run=nope: no such run under the checkpoint root"


def _wait(condition: Callable[[], Any], seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting in the browser")


def test_the_runs_page_shows_the_reward_curve_and_redraws_a_live_run(
        recorded_runs: RecordedRuns, tmp_path: Path, studio_browser: Any,
        serve_studio: Callable[[Starlette], AbstractContextManager[str]]) -> None:
    root = tmp_path / "root"
    shutil.copytree(recorded_runs.root, root)
    monitor = root / "quickstart_like" / "vowels" / "monitor"
    files = {path: path.read_text().splitlines(keepends=True)
             for path in (monitor / "explorer.jsonl", monitor / "trainer.jsonl")}
    for path, lines in files.items():
        path.write_text("".join(lines[:5]))  # the run is at step 5 ...
    (root / "quickstart_like" / "vowels" / "summary.json").unlink()
    with serve_studio(build_app(StudioContext(root))) as url:
        studio_browser.get(url + "/runs?run=quickstart_like/vowels&run=tools/toolcall")
        curve = f'#curves g[id="curve:quickstart_like/vowels:{REWARD}"]'
        _wait(lambda: studio_browser.find_elements("css selector", curve))
        assert studio_browser.find_elements(
            "css selector", f'#curves g[id="curve:tools/toolcall:{REWARD}"]')
        row = 'tr[data-run="quickstart_like/vowels"]'
        assert studio_browser.find_element("css selector", f"{row} .status").text == "running"
        assert studio_browser.find_element("css selector", f"{row} .last-step").text == "5"
        screenshot(studio_browser, tmp_path / "runs.png")
        drawn = studio_browser.find_element("id", "curves").get_attribute("data-drawn")
        time.sleep(0.05)
        for path, lines in files.items():
            path.write_text("".join(lines))  # ... and logs the next steps
        _wait(lambda: studio_browser.find_element(
            "css selector", f"{row} .last-step").text == str(STEPS))
        _wait(lambda: studio_browser.find_element("id", "curves").get_attribute(
            "data-drawn") != drawn)
        assert studio_browser.find_elements("css selector", curve)
