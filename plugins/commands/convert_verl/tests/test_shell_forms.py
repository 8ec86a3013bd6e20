"""The shell forms of real veRL launch scripts, evaluated by bash under stubs.

Each script of ``data/shell_forms`` is written in one of the forms veRL's examples use and
the hand-written parser rejected or misread: command substitution (``$(pwd)``,
``$(date ...)``, ``$(cd $(dirname ...) && pwd)``), arithmetic (``$((1024 * 2))``),
positional defaults (``ENGINE=${1:-vllm}``), arrays (``"${DATA[@]}"``), ``${VAR:+...}``,
nested quotes inside a default (``${X:-"${Y}/train.parquet"}``), ``X=${X:-"$Y"}``,
functions and loops, ``ray job submit -- python3 -m ...``, ``nvidia-smi``. The tests
assert the values bash gives. ``data/failing_scripts`` hold scripts that stop, never
launch, or loop: each is one line naming the script.
"""

from __future__ import annotations

import datetime
import io
import os
import re
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from rft.cli import main as rft_main
from rft_plugin_convert_verl import convert_text
from rft_plugin_convert_verl.parse import VerlConvertError, parse_launch
from rft_plugin_convert_verl.shell import evaluate_script, read_variables

FORMS = Path(__file__).parent / "data" / "shell_forms"
FAILING = Path(__file__).parent / "data" / "failing_scripts"


def _convert(name: str) -> Any:
    path = FORMS / name
    return convert_text(path.read_text(), path.name, str(path))


def _values(result: Any) -> dict[str, Any]:
    return {o.key: o.value for o in result.launch.overrides}


def _get(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", dotted):
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    return node


def _reasons(result: Any) -> dict[str, str]:
    return {entry.key: entry.reason for entry in result.report.not_converted}


# ---------------------------------------------------------------------------------------
# the forms
# ---------------------------------------------------------------------------------------


def test_command_substitution_pwd_date_and_script_dir(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the script's directory is not below the working directory
    result = _convert("grpo_subst_pwd_date.sh")
    values = _values(result)
    today = datetime.date.today()
    stamps = {(today + datetime.timedelta(days=d)).strftime("%Y%m%d") for d in (-1, 0)}
    assert values["trainer.experiment_name"] in {f"qwen2.5-3b_{s}" for s in stamps}
    assert values["trainer.default_local_dir"] == "${oc.env:PWD}/checkpoints"
    # $(cd $(dirname ${BASH_SOURCE[0]}) && pwd): the script's real directory
    assert values["trainer.rollout_data_dir"] == f"{FORMS}/rollouts"
    assert values["data.train_files"] == "${oc.env:HOME}/data/gsm8k/train.parquet"
    config = result.config
    assert config["checkpoint_root_dir"] == "${oc.env:PWD}/checkpoints"
    assert config["monitor"]["monitor_type"] == "tensorboard"
    assert "trainer.rollout_data_dir" in _reasons(result)


def test_arithmetic_arrays_and_nested_defaults_under_set_euo_pipefail() -> None:
    result = _convert("dapo_arith_arrays.sh")
    values = _values(result)
    assert values["data.max_prompt_length"] == 2048  # $((1024 * 2))
    assert values["data.max_response_length"] == 8192  # $((1024 * 8))
    assert values["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 20480
    assert values["data.train_files"] == "${oc.env:HOME}/data/dapo-math/train.parquet"
    assert values["actor_rollout_ref.model.path"] == (
        "${oc.env:HOME}/verl/models/Qwen2.5-Math-7B")  # ${X:-"${Y}/..."} with Y="${HOME}/verl"
    assert values["trainer.default_local_dir"] == (
        "${oc.env:HOME}/verl/ckpts/DAPO/DAPO-Qwen2.5-7B-Math")
    assert values["trainer.n_gpus_per_node"] == 8 and values["trainer.nnodes"] == 1
    config = result.config
    assert config["model"]["max_prompt_tokens"] == 2048
    assert config["trainer"]["use_dynamic_bsz"] is True
    assert config["trainer"]["max_token_len_per_gpu"] == 20480
    assert config["trainer"]["trainer_config"]["actor_rollout_ref"]["actor"]["fsdp_config"] == {
        "param_offload": True, "optimizer_offload": True}
    assert config["buffer"]["explorer_input"]["tasksets"][0]["format"]["messages_key"] == "prompt"
    # the overrides' lines are found inside the arrays
    text = (FORMS / "dapo_arith_arrays.sh").read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if t.strip().startswith("data.max_prompt_l"))
    assert {o.key: o.line for o in result.launch.overrides}["data.max_prompt_length"] == line
    assert any("NNODES, NGPUS_PER_NODE, RAY_DATA_HOME, MODEL_PATH, CKPTS_DIR, TRAIN_FILE, "
               "TEST_FILE" in note for note in result.report.notes)


def test_positional_default_gives_the_default_and_dollar_at_is_reported() -> None:
    result = _convert("positional_engine.sh")
    values = _values(result)
    assert values["actor_rollout_ref.rollout.name"] == "vllm"  # ENGINE=${1:-vllm}
    assert values["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert result.config["explorer"]["rollout_model"]["engine_type"] == "vllm"
    assert any("positional arguments ($1, $2)" in note for note in result.report.notes)
    assert "$@" in _reasons(result)
    reasons = _reasons(result)
    assert "data.image_key" in reasons  # multi-modal: reported, not dropped
    assert "actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache" in reasons


def test_alternate_value_expansion() -> None:
    """``${ENABLE_WANDB:+,"wandb"}`` is there (its default 1 is set), ``${OFFLOAD:+...}``
    is empty (unset), so neither adds a word that is not an override."""
    result = _convert("alternate_expansion.sh")
    values = _values(result)
    assert values["trainer.logger"] == ["console", "wandb"]
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" not in values
    assert result.config["monitor"]["monitor_type"] == "wandb"
    assert result.config["algorithm"]["algorithm_type"] == "ppo"
    assert result.config["model"]["critic_model_path"] == "Qwen/Qwen2.5-0.5B-Instruct"


def test_defaults_quoting_other_variables_get_their_values() -> None:
    """Before: ``X=${X:-"$Y"}`` became the literal ``$Y`` and a nested-quote default
    swallowed the next line."""
    result = _convert("nested_default_quotes.sh")
    values = _values(result)
    assert values["data.train_files"] == "${oc.env:HOME}/data/math/train.parquet"
    assert values["data.val_files"] == "${oc.env:HOME}/data/math/test.parquet"
    assert values["actor_rollout_ref.actor.fsdp_config.param_offload"] is True
    assert values["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] is True
    assert values["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-Math-7B"
    assert values["trainer.total_epochs"] == 2  # the line after the defaults is read
    assert "$" not in "".join(str(v) for v in values.values()).replace("${oc.env:HOME}", "")


def test_ray_job_submit_launch_is_the_command_after_the_double_dash() -> None:
    result = _convert("ray_job_submit.sh")
    assert result.launch.entry_point == "verl.trainer.main_ppo"
    assert _values(result)["algorithm.adv_estimator"] == "rloo"
    assert result.config["algorithm"]["algorithm_type"] == "rloo"
    assert result.config["cluster"] == {"node_num": 2, "gpu_per_node": 8}


def test_function_called_in_a_loop_converts_the_first_launch() -> None:
    result = _convert("function_loop.sh")
    values = _values(result)
    assert (values["data.seed"], values["trainer.experiment_name"]) == (1, "seed_1")
    assert values["trainer.total_epochs"] == 1  # passed through the function's "$@"
    assert any("launches veRL 3 times" in note for note in result.report.notes)
    assert "$@" not in _reasons(result)  # the function's "$@", not the script's


def test_stubbed_commands_and_nvidia_smi_are_noted() -> None:
    result = _convert("nvidia_smi_setup.sh")
    assert _values(result)["trainer.n_gpus_per_node"] == 8
    notes = " ".join(result.report.notes)
    assert "nvidia-smi" in notes and "reports 8" in notes
    assert "not run (only the launch is read): huggingface-cli, pip" in notes
    assert result.config["algorithm"]["advantage_fn_args"] == {"gamma": 0.99}


def test_environment_variables_without_default_become_interpolations() -> None:
    plain, defaulted = read_variables(
        'A=${A:-1}\nB=$HOME/$DATA_DIR\necho ${C:+x} $D ${#E} $1\nfor F in 1; do :; done\n'
        'echo $F $RANDOM\n')
    assert (plain, defaulted) == (["DATA_DIR", "D", "E"], ["A", "C"])
    evaluation = evaluate_script('python3 -m verl.trainer.main_ppo a=$DATA_DIR/x '
                                 'b=$((STEPS + 1)) c=${NNODES:-2}\n')
    assert evaluation.commands == [["python3", "-m", "verl.trainer.main_ppo",
                                    "a=${oc.env:DATA_DIR}/x", "b=1", "c=2"]]


def test_the_conversion_does_not_read_or_change_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", "/somewhere")
    monkeypatch.setenv("TRAIN_FILE", "/mine/train.parquet")
    monkeypatch.chdir(tmp_path)
    result = _convert("nested_default_quotes.sh")
    assert "/somewhere" not in result.yaml and "/mine" not in result.yaml
    assert os.environ["HOME"] == "/somewhere"
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran


def test_the_script_runs_in_a_throwaway_directory(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``mkdir``, ``rm``, ``touch``, ``cd`` and relative redirections do not reach the real
    file system; directories the script enters map back to real paths."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("x")
    outside = tmp_path / "elsewhere"
    result = convert_text(
        "set -e\nmkdir -p logs out\nrm -f keep.txt\ntouch made.txt\necho hi > log.txt\n"
        f"cd {outside}/proj && echo hi > there.log\nPROJECT=$(pwd)\ncd $HOME/verl\n"
        "python3 -m verl.trainer.main_ppo data.max_prompt_length=64 "
        "trainer.default_local_dir=$PROJECT/ckpt trainer.rollout_data_dir=$(pwd)/r | tee run.log\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    values = {o.key: o.value for o in result.launch.overrides}
    assert values["trainer.default_local_dir"] == "${oc.env:PWD}/elsewhere/proj/ckpt"
    assert values["trainer.rollout_data_dir"] == "${oc.env:HOME}/verl/r"


# ---------------------------------------------------------------------------------------
# scripts that cannot be converted: one line each
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, message", [
    ("early_exit.sh", ("early_exit.sh: the script stopped (exit status 1) before it launched "
                       "veRL: download $HOME/models/Qwen2.5-7B-Instruct first")),
    ("set_e_failure.sh", ("set_e_failure.sh: the script stopped (exit status 1) before it "
                          "launched veRL: cat: $HOME/.config/verl/site.env: No such file or "
                          "directory")),
    ("never_launches.sh", ("never_launches.sh: the script, run without arguments, never "
                           "launches veRL (python3 -m verl.trainer.main_ppo ...)")),
    ("waits_forever.sh", ("waits_forever.sh: the script did not finish within 2 s under the "
                          "stubs (a loop waiting for something?)")),
])
def test_scripts_that_stop_or_never_launch_give_one_line(
        name: str, message: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rft_plugin_convert_verl.shell.TIMEOUT_S", 2.0)
    path = FAILING / name
    code = rft_main(["convert-verl", str(path)])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err == f"rft: {path}: {message.split(': ', 1)[1]}\n"


def test_unbalanced_quote_in_an_interpolation_is_written_literally(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], cluster_elsewhere: str) -> None:
    """``'run_${oc.env:USER,"me}'`` once made OmegaConf raise GrammarParseError with a
    traceback; now the value is escaped and read literally, with a one-line note."""
    from rft.config import load_config

    out = tmp_path / "out.yaml"
    path = FORMS / "unbalanced_quote.sh"
    assert rft_main(["convert-verl", str(path), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("name: 'run_${oc.env:USER,\"me}' is not a valid OmegaConf interpolation "
            "(mismatched input '<EOF>' expecting MATCHING_QUOTE_CLOSE); written literally"
            in err)
    assert OmegaConf.load(out).name == 'run_${oc.env:USER,"me}'
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "data" / "gsm8k").mkdir(parents=True)
    for split in ("train", "test"):
        (tmp_path / "data" / "gsm8k" / f"{split}.parquet").touch()
    (stage,) = load_config(out, [f"model.model_path={tmp_path}", cluster_elsewhere]).stages
    assert stage.config.name.startswith('run_${oc.env:USER,"me}')


def test_override_list_defaults_with_nested_quotes() -> None:
    """A bare override list (no launch: read without bash) handles the same default."""
    launch = parse_launch('DATA=/d\ndata.train_files=${TRAIN:-"${DATA}/train.parquet"}\n'
                          'data.val_files=${VAL:-"$ROOT/te st.parquet"}\ntrainer.nnodes=1\n')
    values = {o.key: o.value for o in launch.overrides}
    assert values == {"data.train_files": "${oc.env:TRAIN,/d/train.parquet}",
                      "data.val_files": "${oc.env:VAL,'${oc.env:ROOT}/te st.parquet'}",
                      "trainer.nnodes": 1}
    resolved = OmegaConf.create({"v": values["data.val_files"]})
    os.environ.setdefault("ROOT", "/r")
    assert resolved.v == f"{os.environ['ROOT']}/te st.parquet"


def test_stdin_script_error_names_stdin(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("exit 3\npython3 -m verl.trainer.main_ppo\n"))
    assert rft_main(["convert-verl", "-"]) == 2
    assert capsys.readouterr().err == ("rft: <stdin>: the script stopped (exit status 3) "
                                       "before it launched veRL\n")


def test_no_bash_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None)
    with pytest.raises(VerlConvertError, match=r"^run.sh: bash is needed to evaluate a launch "
                       r"script, and it is not on PATH$"):
        convert_text("python3 -m verl.trainer.main_ppo a.b=1\n", "run.sh")


def test_sourced_files_next_to_the_script_are_read(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "common.sh").write_text("export TRAIN_BS=64\nlr() { echo 3e-6; }\n")
    script = tmp_path / "run.sh"
    script.write_text("source $(dirname $0)/common.sh\n"
                      "python3 -m verl.trainer.main_ppo data.train_batch_size=$TRAIN_BS "
                      "actor_rollout_ref.actor.ppo_mini_batch_size=32 "
                      "actor_rollout_ref.actor.optim.lr=$(lr)\n")
    monkeypatch.chdir(tmp_path)
    result = convert_text(script.read_text(), script.name, str(script))
    assert _values(result) == {"data.train_batch_size": 64,
                               "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
                               "actor_rollout_ref.actor.optim.lr": 3e-6}


def test_sizes_read_from_unset_environment_variables(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A size the script takes from the environment stays an interpolation where rft reads
    it as is, and falls back to veRL's default (reported) where a rule computes with it."""
    text = ("python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=$GPUS "
            "data.max_prompt_length=$PROMPT_LEN data.train_batch_size=$BS\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert rft_main(["convert-verl", "-", "-q"]) == 0
    config = OmegaConf.to_container(OmegaConf.create(capsys.readouterr().out), resolve=False)
    assert config["model"]["max_prompt_tokens"] == "${oc.env:PROMPT_LEN}"
    assert config["cluster"]["gpu_per_node"] == 8
    assert config["synchronizer"]["sync_interval"] == 1024 // 256
    result = convert_text(text)
    reasons = {e.key: e.reason for e in result.report.not_converted}
    assert set(reasons) == {"trainer.n_gpus_per_node", "data.train_batch_size"}
    assert all("environment variable, unset during conversion" in r for r in reasons.values())
