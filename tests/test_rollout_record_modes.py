"""The rollout record (``monitor.rollout_record``, :mod:`rft.monitor.rollout_record`) in
the modes that explore outside ``colocate``: ``explore`` (written in its loop), ``both``
(written in the explorer actor, read back by the studio's rollouts page) and ``serve``
(the batch of each k-th train step). Each: the recorded steps hold every sample of the
step (batch × repeat) with the rewards the monitors logged, the other steps no file, and
a fresh start or a resume forgets the record of the steps it (re)does."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rft.buffer.storage import open_storage
from rft.config import build_stages, load_config
from rft.experience import EID, Experience
from rft.launcher import run
from rft.monitor.rollout_record import RolloutRecorder, step_file_name
from rft.plugins import PluginRegistry
from rft.testing.runs import TextRewardPlugin, apply_overrides, tiny_run_config, write_taskset

RECORD_EVERY = 2


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _logged(job_dir: Path, role: str) -> dict[int, dict[str, float]]:
    """``<job dir>/monitor/<role>.jsonl``: metrics by step (the last line of a step)."""
    lines = (job_dir / "monitor" / f"{role}.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["step"]: r["metrics"] for r in map(json.loads, lines)}


def _plant(folder: Path, step: int) -> Path:
    """A step file left by an earlier run (a crash, a longer run in the same job dir)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / step_file_name(step)
    path.write_text('{"step": %d, "stale": true}\n' % step, encoding="utf-8")
    return path


def _config(root: Path, model: Path, steps: int, **overrides: Any) -> Path:
    """The tiny GRPO run (2 tasks × ``algorithm.repeat_times`` rollouts a step, the
    ``text_reward`` that varies with the sampled text), the record every 2nd step."""
    config = apply_overrides(tiny_run_config(model, write_taskset(root / "tasks.jsonl"), root,
                                             steps), {
        "buffer.explorer_input.taskset.default_reward_fn_type": "text_reward",
        "monitor.rollout_record": True, "monitor.rollout_record_every": RECORD_EVERY,
        **overrides})
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _run(path: Path) -> Path:
    loaded = load_config(path, registry=PluginRegistry.create(extra_plugins=[TextRewardPlugin()]))
    assert run(loaded) == 0
    return Path(loaded.stages[-1].plan.job_dir)


def _check_step(rows: list[dict[str, Any]], step: int, samples: int,
                logged_mean: float) -> None:
    """Every sample of the step, once, with the rewards whose mean the monitor logged."""
    assert len(rows) == samples
    assert {r["step"] for r in rows} == {step}
    assert len({(r["task"], r["run"]) for r in rows}) == samples  # none twice
    assert sum(r["reward"] for r in rows) / samples == pytest.approx(logged_mean)
    for row in rows:
        assert row["prompt"].startswith("<|im_start|>") and row["response"]
        assert len(row["tokens"]) == len(row["logprobs"]) == len(row["action_mask"])


# ---- the decision: whose advantage a line carries ---------------------------------------


def _experience(task: int, advantages: torch.Tensor | None) -> Experience:
    tokens = torch.arange(6) % 50  # (6,): 4 prompt + 2 response tokens
    return Experience(tokens=tokens, prompt_length=4, reward=1.0, advantages=advantages,
                      action_mask=torch.tensor([True, True]), eid=EID(batch=2, task=task))


def test_the_explorer_side_record_says_the_trainer_computes_the_advantage(tmp_path: Path
                                                                          ) -> None:
    recorder = RolloutRecorder(str(tmp_path), every=1, max_mb=1.0, decode=str)
    own = _experience(0, torch.tensor([0.5, 1.5]))  # an explorer-side operator set it
    later = _experience(1, None)
    path = recorder.record(2, [own, later])  # explorer side: no trainer has seen them
    assert path is not None
    rows = _rows(Path(path))
    assert [(r["advantage"], r["advantage_source"]) for r in rows] == [
        (1.0, "explorer"), (None, "trainer")]
    # colocate: the trainer's, and null for a sample its step did not train on
    recorder.record(3, [later, _experience(2, None)], {later.eid.uid: -0.25})
    rows = _rows(tmp_path / step_file_name(3))
    assert [(r["advantage"], r["advantage_source"]) for r in rows] == [
        (-0.25, "trainer"), (None, None)]


def test_only_serve_without_an_in_process_trainer_warns(tmp_path: Path,
                                                        tiny_model_dir: Path) -> None:
    base = apply_overrides(tiny_run_config(tiny_model_dir, write_taskset(tmp_path / "t.jsonl"),
                                           tmp_path), {"monitor.rollout_record": True})
    registry = PluginRegistry.create()
    sql = {"name": "exp", "storage_type": "sql", "path": str(tmp_path / "exp.db")}
    warned = {}
    for mode, changes in [("colocate", {}), ("both", {}),
                          ("explore", {"buffer.trainer_input.experience_buffer": sql,
                                       "synchronizer.sync_method": "checkpoint"}),
                          ("serve", {"buffer.trainer_input.experience_buffer": sql}),
                          ("serve", {"buffer.trainer_input.experience_buffer": sql,
                                     "synchronizer.sync_method": "checkpoint"})]:
        loaded = build_stages(apply_overrides(base, {"mode": mode, **changes}), registry)
        warned[(mode, loaded.stages[0].config.synchronizer.sync_method)] = [
            w for w in loaded.warnings if w.startswith("monitor.rollout_record")]
    assert warned == {
        ("colocate", "memory"): [], ("both", "memory"): [], ("explore", "checkpoint"): [],
        ("serve", "memory"): [],
        ("serve", "checkpoint"): [
            "monitor.rollout_record: mode 'serve' with synchronizer.sync_method 'checkpoint' "
            "records nothing (its steps are trained by the separate train process, which "
            "explores nothing); sync_method 'memory' records the batch of every "
            "rollout_record_every-th step"]}


# ---- mode explore -------------------------------------------------------------------------


def test_mode_explore_records_every_kth_step_and_forgets_what_it_redoes(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    torch.set_num_threads(1)
    buffer = tmp_path / "exp.jsonl"
    # multi_step_grpo: its operator (step_wise_grpo) computes the advantages in the explorer
    config = _config(tmp_path, tiny_model_dir, 4, **{
        "mode": "explore", "algorithm.algorithm_type": "multi_step_grpo",
        "algorithm.repeat_times": 3, "synchronizer.sync_method": "checkpoint",
        "buffer.trainer_input.experience_buffer": {"name": "exp", "storage_type": "file",
                                                   "path": str(buffer)}})
    folder = tmp_path / "checkpoints" / "rft_run" / "run" / "monitor" / "rollouts"
    _plant(folder, 6)  # an older, longer run's: a fresh start forgets it
    job_dir = _run(config)
    assert sorted(os.listdir(folder)) == [step_file_name(2), step_file_name(4)]
    storage = open_storage("file", "exp", str(buffer))
    try:
        written = storage.read(storage.available(), timeout=0.0)
    finally:
        storage.close()
    explorer = _logged(job_dir, "explorer")
    for step in (2, 4):
        rows = _rows(folder / step_file_name(step))
        _check_step(rows, step, 2 * 3, explorer[step]["rollout/reward/mean"])
        # exactly what the explorer wrote to the buffer that step, with its advantages
        buffered = {e.eid.uid: e for e in written if e.eid.batch == step}
        assert {r["eid"]: r["reward"] for r in rows} == pytest.approx(
            {uid: e.reward for uid, e in buffered.items()})
        assert {r["eid"]: r["advantage"] for r in rows} == pytest.approx(
            {uid: float(e.advantages[e.action_mask].mean()) for uid, e in buffered.items()})
        assert {r["advantage_source"] for r in rows} == {"explorer"}
        for task in {r["task"] for r in rows}:  # GRPO in the explorer: standardised per task
            group = [r["advantage"] for r in rows if r["task"] == task]
            assert len(group) == 3 and sum(group) == pytest.approx(0.0, abs=1e-5)
        assert any(r["advantage"] != 0 for r in rows)
    # resumed (explorer_state.json: step 4, the stage done): steps after 4 are forgotten,
    # the steps it does not redo kept as they were
    kept = {step: (folder / step_file_name(step)).read_bytes() for step in (2, 4)}
    _plant(folder, 9)
    _run(config)
    assert {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))} == {
        step_file_name(step): data for step, data in kept.items()}


# ---- mode both (Ray actors), read back by the studio -------------------------------------


@pytest.mark.slow
def test_mode_both_records_in_the_explorer_actor_and_the_studio_reads_it(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    from rft_plugin_studio.app import build_app
    from rft_plugin_studio.page import StudioContext
    from rft_plugin_studio.run_files import find_run, read_record, record_steps
    from starlette.testclient import TestClient

    torch.set_num_threads(1)
    config = _config(tmp_path, tiny_model_dir, 2, **{
        "mode": "both", "cluster.ray_address": "local", "trainer.save_interval": 0})
    root = tmp_path / "checkpoints"
    folder = root / "rft_run" / "run" / "monitor" / "rollouts"
    _plant(folder, 4)  # an older run's: the actor forgets it on a fresh start
    job_dir = _run(config)
    assert os.listdir(folder) == [step_file_name(2)]  # step 1: not a 2nd step, no file
    rows = _rows(folder / step_file_name(2))
    _check_step(rows, 2, 2 * 2, _logged(job_dir, "explorer")[2]["rollout/reward/mean"])
    assert {r["model_version"] for r in rows} == {1}  # sampled after train step 1's sync
    assert {(r["advantage"], r["advantage_source"]) for r in rows} == {(None, "trainer")}
    # the studio's rollouts page reads it
    stage = find_run(root, "rft_run/run").stages[0]
    assert record_steps(stage) == [2] and read_record(stage, 2) == rows
    page = TestClient(build_app(StudioContext(root))).get("/rollouts?run=rft_run/run&step=2")
    assert page.status_code == 200
    assert page.text.count("computed by the trainer") == len(rows)


# ---- mode serve -------------------------------------------------------------------------


def test_mode_serve_records_the_batch_of_every_kth_train_step(tmp_path: Path,
                                                              tiny_model_dir: Path) -> None:
    from test_serve_mode import Served, buffer_rows, play_episode, write_config

    folder = tmp_path / "ck" / "serve" / "run" / "monitor" / "rollouts"
    _plant(folder, 4)  # an older run's: a fresh start forgets it
    served = Served(write_config(tmp_path, tiny_model_dir, buffer__total_steps=2,
                                 monitor__rollout_record=True,
                                 monitor__rollout_record_every=RECORD_EVERY))
    assert served.run is not None
    for episode in range(4):  # 2 episodes × 2 choices per step; the run ends after step 2
        play_episode(served)
        if episode == 1:  # the second batch is committed after step 1 trained
            deadline = time.monotonic() + 60
            while served.run.step < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
    served.thread.join(120)
    served.stop()
    assert os.listdir(folder) == [step_file_name(2)]
    rows = _rows(folder / step_file_name(2))
    trainer = _logged(Path(served.stage.plan.job_dir), "trainer")
    _check_step(rows, 2, 2 * 2, trainer[2]["critic/score/mean"])
    # the second batch the clients committed, with the rewards they gave
    committed = buffer_rows(tmp_path)
    assert len(committed) == 8
    assert sorted(r["reward"] for r in rows) == sorted(r["reward"] for r in committed[4:])
    assert {r["model_version"] for r in rows} == {1}
    # the trainer's advantages (GRPO: each episode's two choices standardised)
    assert {r["advantage_source"] for r in rows} == {"trainer"}
    for task in {r["task"] for r in rows}:
        group = [r["advantage"] for r in rows if r["task"] == task]
        assert len(group) == 2 and sum(group) == pytest.approx(0.0, abs=1e-5)


def test_a_character_split_over_byte_tokens_shows_whole_with_its_last_token() -> None:
    """A byte-level tokenizer (a real ``tokenizers`` ByteLevel BPE with no merges: one token
    per byte) cuts "é" into 2 tokens and "🙂" into 4: their first bytes alone decode to
    U+FFFD. The record's pieces are empty there and the character appears whole with the
    token that completes it; the pieces join to the response's text, one per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from rft.monitor.rollout_record import INCOMPLETE_CHARACTER, token_pieces

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(["a"], trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    text = "ab é🙂!"
    ids = tokenizer.encode(text).ids
    assert len(ids) == len(text.encode("utf-8"))  # one token per byte: é 2, 🙂 4
    assert tokenizer.decode([ids[3]]) == INCOMPLETE_CHARACTER  # é's first byte alone

    pieces = token_pieces(ids, tokenizer.decode)

    assert len(pieces) == len(ids)
    assert pieces == ["a", "b", " ", "", "é", "", "", "", "🙂", "!"]
    assert "".join(pieces) == text
    # a response cut mid-character keeps decode's replacement on its last token
    assert token_pieces(ids[:6], tokenizer.decode)[-1] == INCOMPLETE_CHARACTER
