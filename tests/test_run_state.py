"""One versioned run state for every mode (issue #30, item 2): its layout, the one-line
refusal of a state written by another version in each mode, and the engines' seed state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures_models import arithmetic_tasks
from rft.checkpoint import save_checkpoint
from rft.cli import EXIT_USAGE, main
from rft.engines.engine import SamplingArgs
from rft.engines.external_engine import ExternalEngine
from rft.engines.hf_engine import HFEngine
from rft.errors import RftError
from rft.modes.run_state import (
    RUN_STATE_VERSION,
    RunState,
    RunStateVersionError,
    check_resumable,
)
from test_split_modes import write_config


def test_run_state_round_trips_and_reads_the_layout_before_versions(tmp_path):
    state = RunState(step=3, model_version=2, selectors=[{"index": 4}], experiences_written=12,
                     engine_seed=47, rng={"python": [1]}, eval_before={"eval/x": 0.5})
    path = str(tmp_path / "explorer_state.json")
    state.write(path)
    assert json.loads(Path(path).read_text())["version"] == RUN_STATE_VERSION
    assert RunState.read(path, "explorer state") == state
    # a checkpoint's state.json of the previous layout: no version, its checkpoint's keys
    old = {"step": 2, "model_version": 2, "selectors": [], "engine_seed": 9,
           "explorer_rng": {"torch": "x"}, "experiences_written": 8, "experiences_read": 8,
           "rng": {"numpy": 1}, "eval_before": {}, "files": {"trainer.pt": 10},
           "sha256": {"trainer.pt": "ab"}}
    read = RunState.from_dict(old, "ck/global_step_2/state.json")
    assert (read.step, read.engine_seed, read.explorer_rng, read.experiences_read,
            read.version) == (2, 9, {"torch": "x"}, 8, RUN_STATE_VERSION)
    assert read.explorer_part() == RunState(step=2, engine_seed=9,
                                            explorer_rng={"torch": "x"},
                                            experiences_written=8)


def test_a_state_of_another_version_or_with_unknown_fields_is_one_line():
    with pytest.raises(RunStateVersionError) as raised:
        RunState.from_dict({"version": 99, "step": 1}, "ck/global_step_1/state.json")
    assert str(raised.value) == (
        "ck/global_step_1/state.json: run state written by version 99, this rft reads version "
        f"{RUN_STATE_VERSION} — resume it with the rft that wrote it, or start afresh "
        "(continue_from_checkpoint: false, or another project/name)")
    with pytest.raises(RftError, match=r"^s.json: run state has unknown field\(s\) colour$"):
        RunState.from_dict({"step": 1, "colour": "red"}, "s.json")


def test_check_resumable_reads_the_newest_checkpoint_with_a_state(tmp_path):
    job = tmp_path / "job"
    save_checkpoint(str(job), 1, {"actor": {}}, {"version": 99})
    check_resumable(str(job), continuing=False)  # a fresh start reads nothing
    with pytest.raises(RunStateVersionError, match=rf"^{job}/global_step_1/state.json: run "):
        check_resumable(str(job), continuing=True)
    save_checkpoint(str(job), 2, {"actor": {}}, RunState().to_dict())
    (job / "global_step_3").mkdir()  # a folder without state.json is no checkpoint
    check_resumable(str(job), continuing=True)
    check_resumable(str(job), continuing=True, explorer_file=True)  # none written yet


@pytest.mark.parametrize("mode", ["colocate", "explore", "train", "both"])
def test_each_mode_refuses_a_state_of_another_version_in_one_line(tmp_path, tiny_model_dir,
                                                                   mode, capsys):
    """Resumed from a state written by version 99, every mode stops at once with the one
    line (exit status of a config error), and the state is left as it was."""
    tasks = arithmetic_tasks(tmp_path, 4)
    changes: dict = {"continue_from_checkpoint": True}
    if mode in ("colocate", "both"):
        changes.update(synchronizer__sync_method="memory",
                       synchronizer__wait_for_checkpoint=False)
    config = write_config(tmp_path, tiny_model_dir, tasks, mode, **changes)
    job = tmp_path / "ck" / "split" / "run"
    if mode == "explore":
        job.mkdir(parents=True)
        state = job / "explorer_state.json"
        state.write_text(json.dumps({"version": 99, "step": 1}))
    else:
        state = Path(save_checkpoint(str(job), 1, {"actor": {}}, {"version": 99})) / "state.json"
    before = state.read_text()
    assert main(["run", str(config)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == (f"rft: {state}: run state written by version 99, this rft reads version "
                   f"{RUN_STATE_VERSION} — resume it with the rft that wrote it, or start "
                   "afresh (continue_from_checkpoint: false, or another project/name)\n")
    assert state.read_text() == before


def test_engines_expose_and_restore_their_seed_state(tiny_model_dir):
    """``seed_state`` reads the next seed without using it; ``restore_seed`` sets it: an
    engine restored to another's seed state samples what the other would have."""
    first = HFEngine(str(tiny_model_dir), seed=11)
    prompts, sampling = [[1, 2, 3]], SamplingArgs(max_tokens=6)
    first.generate(prompts, sampling)
    seed = first.seed_state()
    assert (seed, first.seed_state()) == (12, 12)  # reading does not advance it
    second = HFEngine(str(tiny_model_dir), seed=0)
    second.restore_seed(seed)
    assert ([c.token_ids for group in second.generate(prompts, sampling) for c in group]
            == [c.token_ids for group in first.generate(prompts, sampling) for c in group])
    remote = ExternalEngine("http://127.0.0.1:9/v1", model_name="m", seed=5)
    remote.restore_seed(40)
    assert remote.seed_state() == 40 and remote.next_seed(SamplingArgs()) == 40
    assert remote.seed_state() == 41
