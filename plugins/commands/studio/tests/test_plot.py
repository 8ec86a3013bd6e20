"""``rft plot`` on a short quickstart-like run (the PNG, and the data it drew: the reward
rising), and the end-of-run ``curves.png`` named by the summary, through the
``register_run_artifacts`` seam (nothing without the plugin)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from recorded_runs import STEPS, RecordedRuns

from rft.errors import RftError
from rft.launcher import end_of_run_artifacts
from rft.plugins import PluginRegistry
from rft.run_artifacts import RunArtifact, write_artifacts
import rft_plugin_studio
from rft_plugin_studio.plot_command import CURVES_FILE, draw
from rft_plugin_studio.testing import blank_reason

REWARD = "rollout/reward/mean"
RFT = [str(Path(sys.executable).with_name("rft"))]


@pytest.mark.slow
def test_rft_plot_writes_the_rising_reward_curve(recorded_runs: RecordedRuns,
                                                 tmp_path: Path) -> None:
    out = tmp_path / "curves.png"
    done = subprocess.run([*RFT, "plot", str(recorded_runs.vowels), "-o", str(out)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"rft plot: {out}"
    assert out.stat().st_size > 10_000 and blank_reason(out) is None
    figure = draw(recorded_runs.vowels)  # what that command drew
    titles = [axes.get_title() for axes in figure.axes]
    assert titles[:2] == ["reward", "accuracy"] and "grad norm" in titles
    (line,) = [ln for ln in figure.axes[0].lines if ln.get_gid() == f"curve:vowels:{REWARD}"]
    steps, rewards = list(line.get_xdata()), list(line.get_ydata())
    logged = [json.loads(x)["metrics"][REWARD] for x in
              (recorded_runs.vowels / "monitor" / "explorer.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1)) and rewards == logged
    assert sum(rewards[-3:]) / 3 > sum(rewards[:2]) / 2 + 0.2, rewards  # it rises


def test_plot_metric_choice_and_one_line_errors(recorded_runs: RecordedRuns,
                                                tmp_path: Path) -> None:
    figure = draw(recorded_runs.vowels, ["actor/grad_norm", "rollout/reward/m*"])
    assert [axes.get_title() for axes in figure.axes] == ["actor/grad_norm",
                                                          "rollout/reward/m*"]
    assert {ln.get_gid() for ln in figure.axes[1].lines} == {
        f"curve:vowels:rollout/reward/{s}" for s in ("mean", "max", "min")}
    with pytest.raises(RftError, match=r"^--metric reward/meen: no run logs it") as caught:
        draw(recorded_runs.vowels, ["reward/meen"])
    assert "\n" not in str(caught.value)
    with pytest.raises(RftError, match=r": not a run folder \(it holds no monitor/"):
        draw(tmp_path)


def test_the_end_of_run_summary_names_the_curves_png(recorded_runs: RecordedRuns) -> None:
    png = recorded_runs.vowels / "monitor" / CURVES_FILE
    assert blank_reason(png) is None
    assert f"curves: {png}" in recorded_runs.stdout.splitlines()
    summary = json.loads((recorded_runs.vowels / "summary.json").read_text())
    assert summary["stages"][0]["artifacts"] == {"curves": str(png)}


def test_without_the_studio_the_run_writes_no_artefact(recorded_runs: RecordedRuns,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("RFT_DISABLE_PLUGIN_AUTOLOAD", "1")
    job = tmp_path / "job"
    shutil.copytree(recorded_runs.vowels / "monitor", job / "monitor",
                    ignore=shutil.ignore_patterns(CURVES_FILE))
    assert end_of_run_artifacts(PluginRegistry.create(), [str(job)]) == [{}]
    assert not (job / "monitor" / CURVES_FILE).exists()
    with_studio = PluginRegistry.create(extra_plugins=[rft_plugin_studio])
    assert end_of_run_artifacts(with_studio, [str(job)]) == [
        {"curves": str(job / "monitor" / CURVES_FILE)}]


def test_a_failing_artefact_is_one_warning_and_the_others_are_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def broken(job_dir: str) -> str:
        raise RftError(f"{job_dir}: cannot draw")

    def fine(job_dir: str) -> str:
        path = Path(job_dir) / "x.txt"
        path.write_text("x")
        return str(path)

    written = write_artifacts({"broken": RunArtifact(broken), "fine": RunArtifact(fine),
                               "none": RunArtifact(lambda job_dir: None)}, str(tmp_path))
    assert written == {"fine": str(tmp_path / "x.txt")}
    assert [r.getMessage() for r in caplog.records] == [
        f"run artefact broken: {tmp_path}: cannot draw"]
