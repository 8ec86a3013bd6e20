"""The console names the checkpoint a run resumed from, and says so in one line when a
finished run is run again (issue #28, item 16)."""

from __future__ import annotations

import pytest

from fixtures_models import arithmetic_tasks
from rft.config import load_config
from rft.launcher import run
from rft.modes.stage import Resumed, resume_line
from test_embedded_run import write_config


def test_resume_line_decisions():
    assert resume_line("job_grpo", Resumed(), 10) is None  # a fresh start says nothing
    assert resume_line("job_grpo", Resumed(4, checkpoint="ck/job/grpo/global_step_4"), 10) == (
        "[job_grpo] resumed from ck/job/grpo/global_step_4: step 4 of 10 done, going on at "
        "step 5")
    finished = resume_line("job", Resumed(10, checkpoint="ck/job/global_step_10"), 10)
    assert finished.startswith("[job] already finished: ck/job/global_step_10 holds step 10 "
                               "of 10; nothing to redo")
    assert "\n" not in finished


@pytest.mark.slow
def test_rerun_and_resume_print_one_line(tmp_path, tiny_model_dir, capsys):
    tasks = arithmetic_tasks(tmp_path, 4)
    config = write_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=1,
                          continue_from_checkpoint=True)
    assert run(load_config(config)) == 0
    job = tmp_path / "ck" / "e2e" / "run"
    out = capsys.readouterr().out
    assert "resumed from" not in out
    assert "[run] trainer.max_token_len_per_gpu: 544 tokens per micro-batch (derived" in out
    assert run(load_config(config)) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "already finished" in line]
    assert lines == [f"[run] already finished: {job}/global_step_1 holds step 1 of 1; nothing "
                     "to redo (a new run needs another name or continue_from_checkpoint: false)"]
    assert run(load_config(config, overrides=["buffer.total_steps=2"])) == 0
    out = capsys.readouterr().out
    assert f"[run] resumed from {job}/global_step_1: step 1 of 2 done, going on at step 2" in out
