"""``data_processor.task_pipeline`` (#34): the runner over real files, the cache, worker
processes, priority selection, the config stages, and the operators of
rft-plugin-data-ops (the LLM difficulty filter scoring with the tiny model through the
``hf`` engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.config.schema import OperatorConfig, TaskPipelineConfig
from rft.data import priority
from rft.data.parallel import chunks, process_split
from rft.data.task_operator import STATS_KEY, TaskOperatorContext
from rft.data.task_pipeline import (EmptyTasksetError, PipelineOperator, report_metrics,
                                    run_task_pipeline)
from rft.errors import RftError
from rft_plugin_data_ops import scorer
from rft_plugin_data_ops.dedup import ExactDeduplicator, NearArgs, NearDeduplicator
from rft_plugin_data_ops.difficulty import DifficultyArgs, LLMDifficultyScoreFilter, difficulty
from rft_plugin_data_ops.language import LanguageArgs, LanguageIdScoreFilter
from rft_plugin_data_ops.length import TextLengthArgs, TextLengthFilter
from test_external_engine import trained_model  # noqa: F401  (module fixture: a tiny model that answers i+1=)

ROWS = [
    {"question": "How many apples are there if you have two apples and buy three more?",
     "answer": "5", "id": 0},
    {"question": "how many apples are there if you have two apples and  buy three more?",
     "answer": "5", "id": 1},  # an exact repeat once normalised
    {"question": "Hi", "answer": "1", "id": 2},  # too short
    {"question": "A train leaves at 9 and arrives at 11. How long is the trip?",
     "answer": "2 hours", "id": 3},
    {"question": "Combien font deux plus trois, s'il vous plaît ?", "answer": "cinq", "id": 4},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path | str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def context(tmp_path: Path) -> TaskOperatorContext:
    return TaskOperatorContext(str(tmp_path))


def step(i: int, name: str, operator) -> PipelineOperator:
    return PipelineOperator(f"data_processor.task_pipeline.operators[{i}]", name, operator)


def test_operators_run_in_order_with_counts_and_target_fields(tmp_path):
    source = write_jsonl(tmp_path / "raw.jsonl", ROWS)
    pipeline = TaskPipelineConfig(inputs=[str(source)], num_process=1,
                                  target_fields=["question", "answer"])
    report = run_task_pipeline(
        pipeline, [step(0, "exact_deduplicator", ExactDeduplicator()),
                   step(1, "text_length_filter", TextLengthFilter(TextLengthArgs(min_len=5))),
                   step(2, "language_id_score_filter", LanguageIdScoreFilter(LanguageArgs()))],
        output_path=str(tmp_path / "out" / "tasks.jsonl"), cache_dir=str(tmp_path / "cache"),
        context=context(tmp_path))
    assert [(c.before, c.after) for c in report.counts] == [(5, 4), (4, 3), (3, 2)]
    assert read_jsonl(report.output_path) == [{"answer": "5", "question": ROWS[0]["question"]},
                                             {"answer": "2 hours", "question": ROWS[3]["question"]}]
    assert report.rows_in == 5 and report.rows_out == 2
    assert "the taskset shrank from 5 to 2 tasks" in report.lines()[-1]
    metrics = report_metrics(report)
    assert metrics["task_pipeline/0_exact_deduplicator/rows_after"] == 4.0
    assert metrics["task_pipeline/rows_out"] == 2.0


def test_an_operator_that_drops_every_task_is_one_line_naming_it(tmp_path):
    source = write_jsonl(tmp_path / "raw.jsonl", ROWS)
    pipeline = TaskPipelineConfig(inputs=[str(source)], num_process=1)
    with pytest.raises(EmptyTasksetError) as caught:
        run_task_pipeline(pipeline, [step(0, "text_length_filter",
                                          TextLengthFilter(TextLengthArgs(min_len=1000)))],
                          output_path=str(tmp_path / "tasks.jsonl"),
                          cache_dir=str(tmp_path / "cache"), context=context(tmp_path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("data_processor.task_pipeline.operators[0]: operator "
                              "'text_length_filter' dropped every task (5 → 0)")
    assert not (tmp_path / "tasks.jsonl").exists()


def test_a_missing_target_field_and_a_malformed_input_are_one_line(tmp_path):
    source = write_jsonl(tmp_path / "raw.jsonl", ROWS)
    with pytest.raises(RftError, match=r"^data_processor.task_pipeline.target_fields: 'prompt' "
                                       r"is not a field of the processed task"):
        run_task_pipeline(TaskPipelineConfig(inputs=[str(source)], target_fields=["prompt"]),
                          [], output_path=str(tmp_path / "t.jsonl"),
                          cache_dir=str(tmp_path / "c"), context=context(tmp_path))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok"}\n{"question": \n')
    with pytest.raises(RftError, match=r"^data_processor.task_pipeline.inputs\[0\]: .*bad.jsonl: "
                                       r"line 2: malformed JSON"):
        run_task_pipeline(TaskPipelineConfig(inputs=[str(bad)]), [],
                          output_path=str(tmp_path / "t.jsonl"),
                          cache_dir=str(tmp_path / "c"), context=context(tmp_path))


def test_parquet_inputs_and_folders_are_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(ROWS[:2]), folder / "a.parquet")
    write_jsonl(folder / "b.jsonl", ROWS[2:])
    report = run_task_pipeline(TaskPipelineConfig(inputs=[str(folder)]), [],
                               output_path=str(tmp_path / "t.jsonl"),
                               cache_dir=str(tmp_path / "c"), context=context(tmp_path))
    assert [r["id"] for r in read_jsonl(report.output_path)] == [0, 1, 2, 3, 4]


def test_rows_split_over_two_spawned_processes_keep_their_order():
    rows = [{"question": f"question number {i} " + "x" * (i % 7), "id": i} for i in range(11)]
    operator = TextLengthFilter(TextLengthArgs(min_len=22))
    assert [len(c) for c in chunks(rows, 2)] == [6, 5]
    assert process_split(operator, rows, 2) == operator.process(rows)
    assert [r["id"] for r in process_split(operator, rows, 2)] == [
        i for i in range(11) if len(rows[i]["question"]) >= 22]


def test_near_duplicates_are_dropped_by_shingle_similarity():
    rows = [{"q": "the cat sat on the mat today"}, {"q": "The cat sat on the mat today!"},
            {"q": "the cat sat on a red mat"}, {"q": "dogs run fast"}]
    kept = NearDeduplicator(NearArgs(threshold=0.8)).process(rows)
    assert [r["q"] for r in kept] == [rows[0]["q"], rows[2]["q"], rows[3]["q"]]
    kept = NearDeduplicator(NearArgs(threshold=0.3)).process(rows)
    assert [r["q"] for r in kept] == [rows[0]["q"], rows[3]["q"]]


def test_priority_orders_by_weighted_stats_and_keeps_top_k():
    rows = [{"q": "a b c", STATS_KEY: {"difficulty": 0.2, "quality": 1.0}},
            {"q": "d e f", STATS_KEY: {"difficulty": 0.9, "quality": 0.0}},
            {"q": "g h i", STATS_KEY: {"difficulty": 0.5}}]
    weights = {"difficulty": 1.0, "quality": 0.5}
    assert priority.priorities(rows, weights, ["q"]) == pytest.approx([0.7, 0.9, 0.5])
    assert [r["q"] for r in priority.select(rows, weights, 2, ["q"])] == ["d e f", "a b c"]
    assert priority.select(rows, {}, -1, ["q"]) == rows
    # diversity: 1 − the highest Jaccard similarity to another row's word set
    same = [{"q": "x y"}, {"q": "x y"}, {"q": "x z"}]
    assert priority.diversity(same, ["q"]) == pytest.approx([0.0, 0.0, 1 - 1 / 3])
    assert [r["q"] for r in priority.select(same, {"diversity": 1.0}, 1, ["q"])] == ["x z"]


def test_difficulty_is_read_from_the_first_rating_digit():
    assert difficulty("5 - very hard") == 1.0
    assert difficulty("Rating: 3") == 0.5
    assert difficulty("no idea") == 0.0
    with pytest.raises(ValueError, match="field_names must label each of input_keys"):
        DifficultyArgs(api_or_hf_model="m", input_keys=["a", "b"], field_names=["A"])


def test_the_difficulty_filter_scores_with_a_local_model_and_a_rerun_uses_the_cache(
        tmp_path, tiny_model_dir):
    """The tiny model (``hf`` engine) scores each task once; the second run of the same
    pipeline reads every operator's output from the cache: the scorer is called 0 times.
    Changing the operator's args scores again."""
    source = write_jsonl(tmp_path / "raw.jsonl", ROWS)

    def run(min_score: float):
        args = DifficultyArgs(api_or_hf_model=str(tiny_model_dir), min_score=min_score,
                              input_keys=["question", "answer"],
                              field_names=["Question", "Answer"], max_tokens=4)
        return run_task_pipeline(
            TaskPipelineConfig(inputs=[str(source)], num_process=1,
                               priority_weights={"difficulty": 1.0}),
            [step(0, "exact_deduplicator", ExactDeduplicator()),
             step(1, "llm_difficulty_score_filter", LLMDifficultyScoreFilter(args))],
            output_path=str(tmp_path / "tasks.jsonl"), cache_dir=str(tmp_path / "cache"),
            context=context(tmp_path))

    before = scorer.CALLS["chat"]
    first = run(0.0)
    assert scorer.CALLS["chat"] - before == 4  # the 4 rows left after deduplication
    assert [c.cached for c in first.counts] == [False, False]
    assert first.rows_out == 4
    written = (tmp_path / "tasks.jsonl").read_text()
    before = scorer.CALLS["chat"]
    second = run(0.0)
    assert scorer.CALLS["chat"] == before
    assert [c.cached for c in second.counts] == [True, True]
    assert (tmp_path / "tasks.jsonl").read_text() == written
    run(-1.0)  # other args: another cache entry, scored again
    assert scorer.CALLS["chat"] - before == 4


def test_an_unknown_scorer_is_one_line_naming_the_arg(tmp_path):
    operator = LLMDifficultyScoreFilter(DifficultyArgs(api_or_hf_model="qwen2.5-7b-instruct"))
    operator.bind(context(tmp_path))
    with pytest.raises(RftError, match=r"^llm_difficulty_score_filter.args.api_or_hf_model: "
                                       r"'qwen2.5-7b-instruct' is neither an auxiliary model"):
        operator.process([{"text": "x"}])


def test_a_scorer_that_is_not_here_is_a_warning_at_validation(tmp_path, tiny_model_dir):
    from rft.testing.runs import tiny_run_config
    import yaml

    from rft.config import load_config

    tasks = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    config = tiny_run_config(tiny_model_dir, tasks, tmp_path)
    operator = {"name": "llm_difficulty_score_filter",
                "args": {"api_or_hf_model": "qwen2.5-7b-instruct", "min_score": 0.0}}
    config["data_processor"] = {"task_pipeline": {"operators": [operator]}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    key = "data_processor.task_pipeline.operators[0].args.api_or_hf_model"
    assert [w for w in load_config(path).warnings
            if w.startswith(f"{key}: 'qwen2.5-7b-instruct' is neither an auxiliary model")]
    operator["args"]["api_or_hf_model"] = str(tiny_model_dir)
    path.write_text(yaml.safe_dump(config))
    assert not [w for w in load_config(path).warnings if w.startswith(key)]


def test_config_unset_inputs_default_to_the_taskset_and_its_path_becomes_the_output(
        tmp_path, tiny_model_dir):
    from rft.testing.runs import tiny_run_config
    import yaml

    from rft.config import load_config

    tasks = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    config = tiny_run_config(tiny_model_dir, tasks, tmp_path)
    config["data_processor"] = {"task_pipeline": {
        "operators": [{"name": "exact_deduplicator"}], "num_process": 1, "top_k": 2,
        "dynamic": True}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load_config(path)
    stage = loaded.stages[0]
    pipeline = stage.config.data_processor.task_pipeline
    assert pipeline.inputs == [str(tasks)]
    job = stage.config.checkpoint_job_dir
    assert stage.config.buffer.explorer_input.taskset.path == f"{job}/task_pipeline/tasks.jsonl"
    assert [s.name for s in stage.plan.task_operators] == ["exact_deduplicator"]
    assert [w for w in loaded.warnings if w.startswith("data_processor.task_pipeline.dynamic: "
                                                       "processing tasks while exploring")]
    assert not [w for w in loaded.warnings if "taskset.path" in w]


def test_config_bad_values_are_one_line_each(tmp_path, tiny_model_dir):
    from rft.testing.runs import tiny_run_config
    import yaml

    from rft.config import load_config
    from rft.errors import ConfigError

    tasks = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    config = tiny_run_config(tiny_model_dir, tasks, tmp_path)
    config["data_processor"] = {"task_pipeline": {
        "operators": [{"name": "exact_dedup"},
                      {"name": "text_length_filter", "args": {"min_length": 3}}],
        "num_process": 0, "top_k": 0, "priority_weights": {"hardness": 1.0}}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    key = "data_processor.task_pipeline"
    for expected in (f"{key}.operators[0].name: unknown task operator 'exact_dedup'",
                     f"{key}.operators[1].args", f"{key}.num_process: must be >= 1, got 0",
                     f"{key}.top_k: must be -1 (all tasks) or >= 1, got 0",
                     f"{key}.priority_weights.hardness: unknown statistic"):
        assert expected in text, text
    assert "exact_deduplicator" in text  # did-you-mean


def test_operator_config_default_is_empty():
    assert TaskPipelineConfig().operators == [] and OperatorConfig().args == {}


def test_a_run_whose_pipeline_drops_every_task_stops_before_training(tmp_path, tiny_model_dir):
    """Through the launcher: one :class:`EmptyTasksetError` line naming the operator, no
    training step, no taskset written; a missing input is one line before anything runs."""
    from rft.testing.runs import tiny_run_config
    import yaml

    from rft.config import load_config
    from rft.launcher import run

    tasks = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    config = tiny_run_config(tiny_model_dir, tasks, tmp_path)
    config["data_processor"] = {"task_pipeline": {"num_process": 1, "operators": [
        {"name": "text_length_filter", "args": {"min_len": 10_000}}]}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load_config(path)
    job = Path(loaded.stages[0].config.checkpoint_job_dir)
    with pytest.raises(EmptyTasksetError, match=r"^data_processor.task_pipeline.operators\[0\]: "
                                                r"operator 'text_length_filter' dropped every"):
        run(loaded)
    assert not (job / "task_pipeline" / "tasks.jsonl").exists()
    assert not (job / "monitor" / "trainer.jsonl").exists()
    config["data_processor"]["task_pipeline"]["inputs"] = [str(tmp_path / "missing.jsonl")]
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(RftError, match=r"^data_processor.task_pipeline.inputs\[0\]: path "
                                       r"'.*missing.jsonl' does not exist$"):
        run(load_config(path))


def test_an_output_taskset_config_is_written_and_read_as_the_explorer_taskset(tmp_path):
    from rft.config.schema import RftConfig, TasksetConfig
    from rft.config.task_pipeline import derive_task_pipeline

    raw = RftConfig(checkpoint_job_dir=str(tmp_path / "job"))
    pipeline = TaskPipelineConfig(inputs=["a.jsonl"], output=TasksetConfig(
        name="prioritized", path=str(tmp_path / "out")))
    c = derive_task_pipeline(replace_pipeline(raw, pipeline))
    taskset = c.buffer.explorer_input.taskset
    assert (taskset.name, taskset.path) == ("prioritized", str(tmp_path / "out" / "tasks.jsonl"))
    assert derive_task_pipeline(raw) == raw  # no pipeline: unchanged


def replace_pipeline(c, pipeline):
    from dataclasses import replace

    return replace(c, data_processor=replace(c.data_processor, task_pipeline=pipeline))


@pytest.mark.slow  # trains the tiny model (~15 s) and starts a server process (~15 s)
def test_the_three_kinds_of_scorer_give_the_same_difficulties(tmp_path, tiny_model_dir,
                                                               trained_model):
    """A tiny model trained to answer ``i+1=`` (``test_external_engine``'s fixture: its
    replies are digits, right or wrong) as a local folder (``hf`` engine), as the run's
    auxiliary model ``judge`` (its engine built as the explorer builds it) and behind rft's
    own OpenAI-compatible endpoint on 127.0.0.1 (the ``external`` engine) rates the same
    tasks the same (greedy, float32), and not all alike."""
    from rft.testing.runs import tiny_run_config
    import yaml
    from test_external_engine import ServerProcess

    from rft.config import load_config
    from rft.data.stage_tasks import operator_context

    config = tiny_run_config(tiny_model_dir, write_jsonl(tmp_path / "t.jsonl", ROWS), tmp_path)
    config["explorer"]["auxiliary_models"] = [{"name": "judge", "model_path": str(trained_model),
                                               "engine_type": "hf", "dtype": "float32"}]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    plan = load_config(path).stages[0].plan

    def difficulties(spec: str, bound: TaskOperatorContext) -> list[float]:
        operator = LLMDifficultyScoreFilter(DifficultyArgs(  # the prompt as it was trained
            api_or_hf_model=spec, min_score=-1.0, input_keys=["question"], field_names=[""],
            system_prompt="", max_tokens=4))
        operator.bind(bound)
        return [r[STATS_KEY]["difficulty"] for r in operator.process(
            [{"question": f"{i}+1="} for i in range(6)])]

    local = difficulties(str(trained_model), context(tmp_path))
    assert len(set(local)) > 2, local  # digits 1–5 read from its answers
    assert difficulties("judge", operator_context(plan)) == local
    server = ServerProcess(trained_model)
    try:
        assert difficulties(server.url, context(tmp_path)) == local
    finally:
        server.kill()


def test_the_cache_key_follows_the_model_an_auxiliary_name_resolves_to(tmp_path):
    """``api_or_hf_model: judge`` with the auxiliary model ``judge`` moved to another
    model folder is another cache entry (the name alone would serve stale ratings)."""
    from dataclasses import replace

    from rft.config.schema import RftConfig
    from rft.data.task_operator import ModelSource
    from rft.engines.hf_engine import HFEngine

    def fingerprint(model_path: str) -> str:
        c = RftConfig()
        c = replace(c, explorer=replace(c.explorer, rollout_model=replace(
            c.explorer.rollout_model, model_path=model_path)))
        operator = LLMDifficultyScoreFilter(DifficultyArgs(api_or_hf_model="judge"))
        operator.bind(TaskOperatorContext(str(tmp_path), {"judge": ModelSource(
            "explorer.auxiliary_models[0]", HFEngine, c)}))
        return operator.fingerprint("llm_difficulty_score_filter")

    assert fingerprint("/models/a") == fingerprint("/models/a")
    assert fingerprint("/models/a") != fingerprint("/models/b")
