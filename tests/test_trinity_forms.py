"""Trinity-RFT's other spellings of rft fields (:mod:`rft.config.trinity_forms`), and a
cluster config's data paths named by environment variables unset here.

Each test writes a small config the way Trinity-RFT's example configs write it; before
these forms were read, each one failed validation with an unknown key or value."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.config import load_config
from rft.errors import ConfigError, RftError
from rft.modes.preflight import check_data_sources
from rft.plugins import PluginRegistry


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


def write_config(tmp_path: Path, model: Path, body: str) -> Path:
    """A GRPO config on the tiny model, CPU cluster, with ``body`` appended (YAML text)."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1", "answer": "2"}\n')
    path = tmp_path / "trinity.yaml"
    path.write_text(f"""\
project: trinity-forms
name: test
mode: both
checkpoint_root_dir: {tmp_path / 'ck'}
algorithm:
  algorithm_type: grpo
  repeat_times: 2
model:
  model_path: {model}
  max_prompt_tokens: 32
  max_response_tokens: 16
cluster:
  node_num: 1
  gpu_per_node: 0
buffer:
  batch_size: 2
  explorer_input:
    taskset:
      name: tasks
      storage_type: file
      path: {tasks}
      format:
        prompt_key: question
        response_key: answer
    default_workflow_type: math_workflow
""" + body)
    return path


def test_trinity_sync_style_names(tmp_path, tiny_model_dir, registry):
    path = write_config(tmp_path, tiny_model_dir, """\
synchronizer:
  sync_style: dynamic_by_explorer
  sync_method: nccl
""")
    config = load_config(path, registry=registry).stages[0].config
    assert config.synchronizer.sync_style == "explorer_driven"
    path.write_text(path.read_text().replace("dynamic_by_explorer", "dynamic_by_trainer"))
    config = load_config(path, registry=registry).stages[0].config
    assert config.synchronizer.sync_style == "trainer_driven"


def test_vllm_async_engine_is_rfts_vllm_engine(tmp_path, tiny_model_dir, registry):
    path = write_config(tmp_path, tiny_model_dir, """\
explorer:
  rollout_model:
    engine_type: vllm_async
""")
    loaded = load_config(path, registry=registry)
    assert loaded.stages[0].config.explorer.rollout_model.engine_type == "vllm"
    assert loaded.stages[0].plan.rollout_model.engine.name == "vllm"


def test_runner_num_is_ignored_with_a_warning(tmp_path, tiny_model_dir, registry):
    path = write_config(tmp_path, tiny_model_dir, """\
explorer:
  runner_num: 32
  runner_per_model: 4
""")
    loaded = load_config(path, registry=registry)
    assert loaded.stages[0].config.explorer.runner_per_model == 4
    assert ("explorer.runner_num: deprecated in Trinity-RFT and ignored (there too); each "
            "rollout engine runs explorer.runner_per_model=4 workflow runners"
            in loaded.warnings)


def test_ppo_max_token_len_per_gpu_is_max_token_len_per_gpu(tmp_path, tiny_model_dir,
                                                            registry):
    path = write_config(tmp_path, tiny_model_dir, """\
trainer:
  ppo_max_token_len_per_gpu: 4096
""")
    config = load_config(path, registry=registry).stages[0].config
    assert config.trainer.max_token_len_per_gpu == 4096
    path.write_text(path.read_text() + "  max_token_len_per_gpu: 2048\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert caught.value.problems == [
        ("trainer.ppo_max_token_len_per_gpu: 4096 differs from trainer.max_token_len_per_gpu "
         "2048 (Trinity-RFT's older name of it); set one")]


def test_use_priority_queue_enables_the_replay_buffer(tmp_path, tiny_model_dir, registry):
    path = write_config(tmp_path, tiny_model_dir, """\
  trainer_input:
    experience_buffer:
      name: exp
      storage_type: queue
      use_priority_queue: true
""")
    loaded = load_config(path, registry=registry)
    assert loaded.stages[0].config.buffer.trainer_input.experience_buffer.replay_buffer.enable
    assert loaded.stages[0].plan.priority_fn.name == "linear_decay"


def test_loss_agg_mode_in_policy_loss_args_and_warmup_strategy(tmp_path, tiny_model_dir,
                                                              registry):
    path = write_config(tmp_path, tiny_model_dir, "")
    text = path.read_text().replace("  repeat_times: 2\n", """\
  repeat_times: 2
  sample_strategy: warmup
  policy_loss_fn_args:
    loss_agg_mode: seq-mean-token-sum
    clip_range_high: 0.28
""")
    path.write_text(text)
    loaded = load_config(path, registry=registry)
    config = loaded.stages[0].config
    assert config.algorithm.loss_agg_mode == "seq-mean-token-sum"
    assert loaded.stages[0].plan.loss.loss_agg_mode == "seq-mean-token-sum"
    assert config.algorithm.sample_strategy == "default"
    path.write_text(text.replace("seq-mean-token-sum", "sum"))
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert caught.value.problems == [
        ("algorithm.policy_loss_fn_args.loss_agg_mode: 'sum' is not allowed; expected one of "
         "'token-mean', 'seq-mean-token-sum', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'")]


def test_trainer_config_path_is_read_into_trainer_config(tmp_path, tiny_model_dir, registry):
    verl = tmp_path / "train_verl.yaml"
    verl.write_text("""\
actor_rollout_ref:
  actor:
    optim:
      lr: 3.0e-6
    ppo_mini_batch_size: 4
  ref:
    log_prob_micro_batch_size_per_gpu: ${actor_rollout_ref.actor.ppo_mini_batch_size}
""")
    path = write_config(tmp_path, tiny_model_dir, f"""\
trainer:
  trainer_config_path: {verl}
""")
    loaded = load_config(path, registry=registry)
    tree = loaded.stages[0].config.trainer.trainer_config
    # optim.lr mirrors algorithm.optimizer.lr, left unset here: read into it, as Trinity-RFT
    # keeps veRL's value (rft.config.verl_keys); the key leaves the tree
    assert "optim" not in tree["actor_rollout_ref"]["actor"]
    assert loaded.stages[0].config.algorithm.optimizer.lr == 3.0e-6
    assert ("trainer.trainer_config.actor_rollout_ref.actor.optim.lr 3e-06 is read into "
            "algorithm.optimizer.lr (unset; Trinity-RFT keeps veRL's value there)"
            in loaded.stages[0].warnings)
    assert tree["actor_rollout_ref"]["ref"]["log_prob_micro_batch_size_per_gpu"] == 4
    check_data_sources(loaded.stages[0].plan)  # the file is here: no error


def test_trainer_config_path_missing_here_warns_then_stops_a_run(tmp_path, tiny_model_dir,
                                                                registry):
    path = write_config(tmp_path, tiny_model_dir, """\
trainer:
  trainer_config_path: examples/x/train_x.yaml
""")
    loaded = load_config(path, registry=registry)
    assert ("trainer.trainer_config_path: file 'examples/x/train_x.yaml' does not exist "
            "here: its veRL settings are not checked; `rft run` stops at start unless it "
            "exists where it runs" in loaded.warnings)
    with pytest.raises(RftError, match=r"^trainer.trainer_config_path: file "
                                       r"'examples/x/train_x.yaml' does not exist$"):
        check_data_sources(loaded.stages[0].plan)


def test_data_path_from_an_unset_environment_variable_warns_then_stops_a_run(
        tmp_path, tiny_model_dir, registry, monkeypatch):
    monkeypatch.delenv("RFT_TEST_TASKSET", raising=False)
    path = write_config(tmp_path, tiny_model_dir, """\
    eval_tasksets:
      - name: eval
        storage_type: file
        path: ${oc.env:RFT_TEST_TASKSET}
""")
    loaded = load_config(path, registry=registry)
    assert ("buffer.explorer_input.eval_tasksets[0].path: environment variable "
            "RFT_TEST_TASKSET is not set here (used in ${oc.env:RFT_TEST_TASKSET}); `rft run` "
            "stops at start unless it is set where it runs" in loaded.warnings)
    with pytest.raises(RftError) as caught:
        check_data_sources(loaded.stages[0].plan)
    assert str(caught.value) == ("buffer.explorer_input.eval_tasksets[0].path: environment "
                                 "variable RFT_TEST_TASKSET is not set (used in "
                                 "${oc.env:RFT_TEST_TASKSET})")
    # anywhere else an unset variable stays a problem
    path.write_text(path.read_text() + "monitor:\n  monitor_type: ${oc.env:RFT_TEST_TASKSET}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert caught.value.problems == [
        ("monitor.monitor_type: environment variable RFT_TEST_TASKSET is not set (used in "
         "${oc.env:RFT_TEST_TASKSET})")]


def test_add_strategy_is_read_as_its_experience_operator(tmp_path, tiny_model_dir, registry):
    """Trinity-RFT's older ``add_strategy`` (explorer-side advantages) becomes that operator
    at the end of the experience pipeline; an unknown name is one line naming the key."""
    path = write_config(tmp_path, tiny_model_dir, "")
    text = path.read_text()
    path.write_text(text.replace("  repeat_times: 2\n",
                                 "  repeat_times: 2\n  add_strategy: step_wise_grpo\n"))
    config = load_config(path, registry=registry).stages[0].config
    assert [op.name for op in config.data_processor.experience_pipeline.operators] == [
        "step_wise_grpo"]
    path.write_text(text.replace("  repeat_times: 2\n",
                                 "  repeat_times: 2\n  add_strategy: step_wize_grpo\n"))
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith("algorithm.add_strategy: ")
    assert "step_wize_grpo" in caught.value.problems[0]


def test_tinker_base_model_is_read_and_tinker_refused_by_enable(tmp_path, tiny_model_dir,
                                                                registry):
    path = write_config(tmp_path, tiny_model_dir, "")
    path.write_text(path.read_text().replace("  max_response_tokens: 16\n", """\
  max_response_tokens: 16
  tinker:
    enable: true
    base_model: Qwen/Qwen3-4B-Instruct-2507
"""))
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert [p.split(":")[0] for p in caught.value.problems] == ["model.tinker.enable"]


@pytest.mark.parametrize("name, words", [
    ("RAFT_baseline_countdown_workflow", "R3L example workflow"),
    ("bots_math_boxed_workflow", "BOTS example plugin"),
    ("learn2ask_workflow", "Learn-to-Ask example workflow"),
])
def test_trinity_example_workflows_are_named_as_such(tmp_path, tiny_model_dir, registry,
                                                     name, words):
    path = write_config(tmp_path, tiny_model_dir, "")
    path.write_text(path.read_text().replace("math_workflow", name))
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    [line] = caught.value.problems
    assert line.startswith(f"buffer.explorer_input.taskset.default_workflow_type: unknown "
                           f"workflow {name!r} (Trinity-RFT's {words}")
    assert "registered:" not in line


def test_older_task_pipeline_fields_are_named_in_warnings(tmp_path, tiny_model_dir, registry):
    path = write_config(tmp_path, tiny_model_dir, """\
data_processor:
  data_processor_url: 'http://127.0.0.1:5005/data_processor'
  task_pipeline:
    input_buffers:
      - name: raw_input
        path: openai/gsm8k
    format:
      prompt_key: question
    dj_process_desc: 'Please compute difficulty scores for these math questions.'
    agent_model_name: qwen-max
    clean_strategy: iterative
""")
    loaded = load_config(path, registry=registry)
    assert {w.split(":")[0] for w in loaded.warnings} >= {
        "data_processor.task_pipeline", "data_processor.data_processor_url"}


def test_rollout_n_is_read_as_unset_with_a_warning_when_it_differs(tmp_path, tiny_model_dir, registry):
    path = write_config(tmp_path, tiny_model_dir, "")
    text = path.read_text().replace("      format:\n", "      rollout_args:\n        n: 2\n"
                                    "      format:\n", 1)
    path.write_text(text)
    config = load_config(path, registry=registry).stages[0].config
    assert config.buffer.explorer_input.taskset.rollout_args.n is None
    path.write_text(text.replace("n: 2", "n: 3"))  # Trinity-RFT overwrites it: a warning
    loaded = load_config(path, registry=registry)
    assert loaded.stages[0].config.buffer.explorer_input.taskset.rollout_args.n is None
    assert [w for w in loaded.warnings if w.startswith(
        "buffer.explorer_input.taskset.rollout_args.n: ignored (3)")]


def test_file_experience_buffer_from_an_unset_variable_warns_then_stops_a_run(
        tmp_path, tiny_model_dir, registry, monkeypatch):
    monkeypatch.delenv("RFT_TEST_SFT", raising=False)
    path = tmp_path / "sft.yaml"
    path.write_text(f"""\
project: trinity-forms
name: sft
mode: train
checkpoint_root_dir: {tmp_path / 'ck'}
algorithm:
  algorithm_type: sft
model:
  model_path: {tiny_model_dir}
  max_prompt_tokens: 32
  max_response_tokens: 16
cluster:
  node_num: 1
  gpu_per_node: 0
buffer:
  train_batch_size: 2
  trainer_input:
    experience_buffer:
      name: sft_data
      storage_type: file
      path: ${{oc.env:RFT_TEST_SFT}}
      format:
        prompt_type: messages
        messages_key: messages
""")
    loaded = load_config(path, registry=registry)
    assert ("buffer.trainer_input.experience_buffer.path: environment variable RFT_TEST_SFT "
            "is not set here (used in ${oc.env:RFT_TEST_SFT}); `rft run` stops at start "
            "unless it is set where it runs" in loaded.warnings)
    with pytest.raises(RftError) as caught:
        check_data_sources(loaded.stages[0].plan)
    assert str(caught.value) == ("buffer.trainer_input.experience_buffer.path: environment "
                                 "variable RFT_TEST_SFT is not set (used in "
                                 "${oc.env:RFT_TEST_SFT})")


def test_buffer_level_retries_are_the_default_of_every_storage(tmp_path, tiny_model_dir,
                                                               registry):
    """Trinity-RFT 0.2 writes ``buffer.max_retry_times`` / ``max_retry_interval`` (its one
    setting for all storages); rft reads them as the value of every taskset and experience
    buffer that sets none, and a read of the taskset retries that often."""
    from rft.buffer.errors import TasksetError
    from rft.buffer.taskset import read_rows

    path = write_config(tmp_path, tiny_model_dir, """\
  max_retry_times: 1
  max_retry_interval: 0
  trainer_input:
    experience_buffer:
      name: exp
      storage_type: queue
      max_retry_interval: 2
""")
    text = path.read_text().replace("    default_workflow_type: math_workflow\n", f"""\
    default_workflow_type: math_workflow
    eval_tasksets:
      - name: own
        storage_type: file
        path: {tmp_path / 'tasks.jsonl'}
        max_retry_times: 4
""")
    path.write_text(text)
    config = load_config(path, registry=registry).stages[0].config
    b = config.buffer
    taskset, own = b.explorer_input.taskset, b.explorer_input.eval_tasksets[0]
    exp = b.trainer_input.experience_buffer
    assert (taskset.max_retry_times, taskset.max_retry_interval) == (1, 0)
    assert (own.max_retry_times, own.max_retry_interval) == (4, 0)
    assert (exp.max_retry_times, exp.max_retry_interval) == (1, 2)
    (tmp_path / "tasks.jsonl").unlink()
    with pytest.raises(TasksetError) as caught:
        read_rows(taskset)
    assert str(caught.value).endswith("no such file or folder (failed 2 times, "
                                      "max_retry_times: 1)")
    path.write_text(text.replace("  max_retry_times: 1\n", "  max_retry_times: -1\n", 1))
    (tmp_path / "tasks.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert caught.value.problems == ["buffer.max_retry_times: must be >= 0, got -1"]


def _mix_config(tmp_path: Path, model: Path, body: str, loss_args: str = "") -> Path:
    """A ``mix`` config with expert SFT rows in messages form; ``loss_args`` (YAML lines
    indented by four) go under ``algorithm.policy_loss_fn_args``."""
    expert = tmp_path / "expert.jsonl"
    expert.write_text('{"messages": [{"role": "user", "content": "1+1"}, '
                      '{"role": "assistant", "content": "2"}]}\n')
    path = write_config(tmp_path, model, body.replace("{expert}", str(expert)))
    path.write_text(path.read_text().replace("  algorithm_type: grpo\n", f"""\
  algorithm_type: mix
  sample_strategy_args:
    expert_data_ratio: 0.25
  policy_loss_fn_args:
    mu: 0.1
{loss_args}"""))
    return path


def test_sft_warmup_dataset_is_read_as_mix_expert_buffer(tmp_path, tiny_model_dir, registry):
    """Trinity-RFT 0.2's mix read its expert rows from ``trainer_input.sft_warmup_dataset``
    (each storage saying what its rows are with ``algorithm_type``)."""
    body = """\
  trainer_input:
    sft_warmup_dataset:
      name: expert_sft
      storage_type: file
      algorithm_type: sft
      path: {expert}
      format:
        prompt_type: messages
        messages_key: messages
"""
    loaded = load_config(_mix_config(tmp_path, tiny_model_dir, body), registry=registry)
    ti = loaded.stages[0].config.buffer.trainer_input
    assert ti.sft_warmup_dataset is None
    assert ti.auxiliary_buffers["sft_dataset"].name == "expert_sft"
    assert ti.auxiliary_buffers["sft_dataset"].schema_type == "sft"
    assert ("buffer.trainer_input.sft_warmup_dataset: read as buffer.trainer_input."
            "auxiliary_buffers.sft_dataset (the expert data of mix / mix_chord; rft has no "
            "SFT warm-up steps: for a warm-up, use stages)" in loaded.warnings)
    sample_args = loaded.stages[0].plan.sample_strategy.args
    assert sample_args.buffer_name(ti.auxiliary_buffers) == "sft_dataset"
    both = _mix_config(tmp_path, tiny_model_dir, body + """\
    auxiliary_buffers:
      sft_dataset:
        storage_type: file
        path: {expert}
""")
    with pytest.raises(ConfigError) as caught:
        load_config(both, registry=registry)
    assert caught.value.problems == [
        ("buffer.trainer_input.sft_warmup_dataset: and auxiliary_buffers.sft_dataset are both "
         "set (this is Trinity-RFT 0.2's place of it); set one")]


def test_mix_loss_batch_arguments_are_named_and_sft_agg_mode_must_match(tmp_path,
                                                                       tiny_model_dir,
                                                                       registry):
    """Trinity-RFT's mix / CHORD losses take the veRL batch sizes as arguments; rft's
    trainer aggregates the loss itself: a warning names them. A per-part aggregation mode
    works when it is ``algorithm.loss_agg_mode``, and is refused in one line otherwise."""
    body = """\
  trainer_input:
    auxiliary_buffers:
      sft_dataset:
        storage_type: file
        path: {expert}
        format:
          prompt_type: messages
          messages_key: messages
"""
    args = """\
    use_token_level_loss_in_sft: true
    sft_loss_agg_mode: token-mean
    use_dynamic_bsz: true
    ppo_mini_batch_size: 320
    ppo_micro_batch_size_per_gpu: 4
    ngpus_trainer: 4
    train_batch_size_expert: 64
    train_batch_size_usual: 256
"""
    loaded = load_config(_mix_config(tmp_path, tiny_model_dir, body, args), registry=registry)
    assert loaded.stages[0].config.algorithm.policy_loss_fn_args == {"mu": 0.1}
    assert loaded.stages[0].plan.loss.policy_loss.args.mu == 0.1
    assert ("algorithm.policy_loss_fn_args: use_dynamic_bsz, ppo_mini_batch_size, "
            "ppo_micro_batch_size_per_gpu, ngpus_trainer, train_batch_size_usual, "
            "train_batch_size_expert: Trinity-RFT's batch sizes for weighting its mix / CHORD "
            "loss parts; rft's trainer aggregates the loss over its own batches "
            "(algorithm.loss_agg_mode), so they have no effect" in loaded.warnings)
    path = _mix_config(tmp_path, tiny_model_dir, body, args.replace(
        "use_token_level_loss_in_sft: true", "use_token_level_loss_in_sft: false"))
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert caught.value.problems == [
        ("algorithm.policy_loss_fn_args.use_token_level_loss_in_sft: means loss_agg_mode "
         "'seq-mean-token-mean', but rft aggregates every loss part with "
         "algorithm.loss_agg_mode 'token-mean'; set that, or drop this")]


def test_keys_no_trinity_version_reads_name_the_field_to_use(tmp_path, tiny_model_dir,
                                                            registry):
    """``algorithm.mu``, ``buffer.expert_data_ratio`` and ``buffer.explore_batch_size`` were
    written in Trinity-RFT example configs, but Trinity-RFT's own loader refuses them."""
    path = write_config(tmp_path, tiny_model_dir, """\
  expert_data_ratio: 0.5
  explore_batch_size: 36
""")
    path.write_text(path.read_text().replace("  repeat_times: 2\n", "  repeat_times: 2\n"
                                             "  mu: 0.5\n"))
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    assert sorted(caught.value.problems) == [
        ("algorithm.mu: not a field of Trinity-RFT or rft (Trinity-RFT refuses it too); the SFT "
         "weight of mix is algorithm.policy_loss_fn_args.mu"),
        ("buffer.expert_data_ratio: not a field of Trinity-RFT or rft (Trinity-RFT refuses it "
         "too); mix's share of expert rows is algorithm.sample_strategy_args.expert_data_ratio"),
        ("buffer.explore_batch_size: not a field of Trinity-RFT or rft (Trinity-RFT refuses it "
         "too); tasks explored per step are buffer.batch_size, experiences trained per step "
         "buffer.train_batch_size")]


def test_mix_entropy_loss_validates_as_trinitys(tmp_path, tiny_model_dir, registry):
    """``entropy_loss_fn: mix`` (Trinity-RFT's entropy bonus on rollout rows only; the
    default of its mix / mix_chord presets) is a name rft resolves, with its coefficient."""
    path = write_config(tmp_path, tiny_model_dir, "")
    path.write_text(path.read_text().replace(
        "  repeat_times: 2\n", "  repeat_times: 2\n  entropy_loss_fn: mix\n"
        "  entropy_loss_fn_args:\n    entropy_coef: 0.01\n"))
    plan = load_config(path, registry=registry).stages[0].plan
    assert plan.loss.entropy.name == "mix" and plan.loss.entropy.args.entropy_coef == 0.01


def test_empty_checkpoint_root_is_the_working_directory(tmp_path, tiny_model_dir, registry,
                                                        monkeypatch):
    """``checkpoint_root_dir: ''`` (Trinity-RFT's test template): Trinity-RFT joins a
    relative root onto the working directory, so the job dir is ``./<project>/<name>``."""
    path = write_config(tmp_path, tiny_model_dir, "")
    path.write_text(path.read_text().replace(f"checkpoint_root_dir: {tmp_path / 'ck'}",
                                             "checkpoint_root_dir: ''"))
    monkeypatch.chdir(tmp_path)
    config = load_config(path, registry=registry).stages[0].config
    assert config.checkpoint_root_dir == "."
    assert Path(config.checkpoint_job_dir).resolve() == tmp_path / "trinity-forms" / "test"


def test_a_queue_backup_directory_holds_a_jsonl_file(tmp_path, tiny_model_dir, registry):
    """A queue's backup ``path: ./exp_buffer`` (a directory) is the JSON lines file
    ``<dir>/<buffer name>.jsonl``, Trinity-RFT's name of a queue's own backup file."""
    path = write_config(tmp_path, tiny_model_dir, f"""\
  trainer_input:
    experience_buffer:
      name: exp_buffer
      storage_type: queue
      path: {tmp_path / 'exp_buffer'}
""")
    text = path.read_text().replace("    default_workflow_type: math_workflow\n", "")
    path.write_text(text.replace("  explorer_input:\n",
                                 "  explorer_input:\n    default_workflow_type: math_workflow\n"))
    config = load_config(path, registry=registry).stages[0].config
    assert config.buffer.trainer_input.experience_buffer.path == str(
        tmp_path / "exp_buffer" / "exp_buffer.jsonl")


def test_rm_gallery_reward_names_the_package_it_needs(tmp_path, tiny_model_dir, registry):
    """``rm_gallery_reward`` wraps RM-Gallery, whose releases pin transformers<5: one line
    naming the package and why rft does not ship it."""
    path = write_config(tmp_path, tiny_model_dir, "")
    path.write_text(path.read_text().replace(
        "    default_workflow_type: math_workflow\n",
        "    default_workflow_type: math_workflow\n"
        "    default_reward_fn_type: rm_gallery_reward\n"))
    with pytest.raises(ConfigError) as caught:
        load_config(path, registry=registry)
    (line,) = caught.value.problems
    assert line.startswith("buffer.explorer_input.taskset.default_reward_fn_type: unknown "
                           "reward function 'rm_gallery_reward' (Trinity-RFT's wrapper of "
                           "RM-Gallery's rewards")
    assert "rm-gallery package" in line and "transformers<5" in line
