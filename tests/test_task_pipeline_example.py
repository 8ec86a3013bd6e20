"""Trinity-RFT's ``grpo_gsm8k_task_pipeline`` example (test copy under
``tests/data/trinity_examples``, its form and values, paths from environment variables):
it validates as written — each field without effect here named in one warning — and, with
the difficulty filter scoring through the tiny model as a local ``hf`` model, runs 2 steps
on the tiny model, training on the taskset the pipeline wrote (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.config import load_config
from rft.launcher import run

EXAMPLE = Path(__file__).parent / "data" / "trinity_examples" / "grpo_gsm8k_task_pipeline.yaml"
GSM8K = Path("/work/shared/data/gsm8k")
MACHINE = ["cluster.gpu_per_node=0", "cluster.ray_address=10.0.0.1:6379"]
"""Written for 8-GPU nodes: validated as on such a cluster (here there is no GPU)."""
KEY = "data_processor.task_pipeline"


def gsm8k_rows(split: str, n: int) -> list[dict]:
    """The first ``n`` GSM8K rows (the shared copy, else rows of the same form)."""
    path = GSM8K / f"{split}.jsonl"
    if path.exists():
        return [json.loads(x) for x in path.read_text().splitlines()[:n]]
    return [{"question": f"Tom has {i} apples and buys {i + 2} more. How many now?",
             "answer": f"{i} + {i + 2} = {2 * i + 2}\n#### {2 * i + 2}"} for i in range(n)]


@pytest.fixture
def environ(monkeypatch, tmp_path, tiny_model_dir) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    rows = gsm8k_rows("train", 6)
    (raw / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + rows[:2]))
    evals = tmp_path / "eval"
    (evals / "main").mkdir(parents=True)  # subset_name: main
    (evals / "main" / "test.jsonl").write_text("".join(json.dumps(r) + "\n"
                                              for r in gsm8k_rows("test", 2)))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(raw / "train.jsonl"))
    monkeypatch.setenv("TRINITY_OUTPUT_DIR", str(tmp_path / "task_pipeline_output"))
    monkeypatch.setenv("TRINITY_EVAL_TASKSET_PATH", str(evals))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
    return tmp_path


def test_the_example_validates_as_written(environ):
    loaded = load_config(EXAMPLE, MACHINE)
    config = loaded.stages[0].config
    pipeline = config.data_processor.task_pipeline
    out = environ / "task_pipeline_output" / "prioritized_gsm8k.jsonl"
    assert pipeline.inputs == [str(environ / "raw" / "train.jsonl")]  # from input_buffers
    assert pipeline.target_fields == ["question", "answer"]  # from format
    assert config.buffer.explorer_input.taskset.path == str(out)  # from output_buffer
    keys = {w.split(":")[0] for w in loaded.warnings}
    # dj_process_desc is read as a data_juicer operator whose recipe agent_model_name
    # writes: 'qwen-max' names no model rft can run here, which validation says
    assert {f"{KEY}.operators[0].args.agent_model_name", f"{KEY}.clean_strategy", KEY,
            "data_processor.data_processor_url"} <= keys
    assert "buffer.explorer_input.taskset.path" not in keys  # the pipeline writes it


@pytest.mark.slow
def test_two_steps_on_the_taskset_the_pipeline_wrote(environ, tiny_model_dir):
    """Deduplication (8 rows, 2 repeated) then the difficulty filter (tiny model via the
    ``hf`` engine, ``min_score: 0.0`` as in the guide) then 2 GRPO steps on what it wrote;
    the counts reach the log and the monitor; a rerun of the pipeline is all cache."""
    operators = json.dumps([
        {"name": "exact_deduplicator", "args": {"fields": ["question"]}},
        {"name": "llm_difficulty_score_filter",
         "args": {"api_or_hf_model": str(tiny_model_dir), "min_score": 0.0,
                  "input_keys": ["question", "answer"], "field_names": ["Question", "Answer"],
                  "max_tokens": 4}}])
    overrides = [
        f"{KEY}.operators={operators}", f"{KEY}.num_process=1",
        # the example's Data-Juicer recipe (written by a remote agent model, run on a server at
        # a fixed port) is replaced by these local operators
        "data_processor.data_processor_url=null", f"{KEY}.dj_process_desc=null",
        "mode=colocate", "trainer.trainer_type=torch", "trainer.trainer_config_path=null", "cluster.gpu_per_node=0",
        "model.max_prompt_tokens=256", "model.max_response_tokens=8",
        "buffer.batch_size=2", "buffer.total_steps=2", "algorithm.repeat_times=2",
        "buffer.explorer_input.taskset.rollout_args.n=2",
        "explorer.rollout_model.engine_type=hf", "explorer.rollout_model.engine_num=1",
        "explorer.rollout_model.dtype=float32", "explorer.runner_num=1",
        "trainer.save_interval=0", "monitor.monitor_type=jsonl",
        "buffer.trainer_input.experience_buffer.storage_type=file",
        f"buffer.trainer_input.experience_buffer.path={environ / 'experiences.jsonl'}",
    ]
    loaded = load_config(EXAMPLE, overrides)
    assert run(loaded) == 0
    job = Path(loaded.stages[0].config.checkpoint_job_dir)
    written = environ / "task_pipeline_output" / "prioritized_gsm8k.jsonl"
    tasks = [json.loads(x) for x in written.read_text().splitlines()]
    assert len(tasks) == 6 and all(set(t) == {"question", "answer"} for t in tasks)
    report = json.loads((job / "task_pipeline" / "report.json").read_text())
    assert [(c["before"], c["after"]) for c in report["counts"]] == [(8, 6), (6, 6)]
    monitor = [json.loads(x) for x in (job / "monitor" / "task_pipeline.jsonl")
               .read_text().splitlines()]
    assert monitor[-1]["metrics"]["task_pipeline/0_exact_deduplicator/rows_after"] == 6.0
    trainer = [json.loads(x) for x in (job / "monitor" / "trainer.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trainer] == [1, 2]
    log = (job / "log" / "launcher.log").read_text()
    assert "operators[1] (llm_difficulty_score_filter): 6 → 6 tasks" in log
