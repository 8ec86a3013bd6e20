"""The trainer a conversion writes: ``verl`` (rft-plugin-verl, installed in the test
environment) when the launch needs veRL's workers and the verl trainer can run it, else
``torch``; ``--trainer`` forces it. Converted configs are validated with rft's real
loader (the verl trainer's own ``check_config`` included)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rft_plugin_convert_verl import convert_text
from rft_plugin_convert_verl.cli import main
from rft_plugin_convert_verl.parse import VerlConvertError
from rft_plugin_convert_verl.trainer_choice import verl_trainer

A = "actor_rollout_ref.actor."
ONE_GPU = ("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "
           "data.train_files=$HOME/data/gsm8k/train.parquet "
           "data.val_files=$HOME/data/gsm8k/test.parquet "
           "data.train_batch_size=8 data.max_prompt_length=128 data.max_response_length=64 "
           "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct "
           f"{A}ppo_mini_batch_size=4 actor_rollout_ref.rollout.n=2 "
           "trainer.nnodes=1 trainer.n_gpus_per_node=1 trainer.total_epochs=1 ")
VERL_ONLY = f"{A}fsdp_config.reshard_after_forward=False "
"""A veRL worker setting rft's torch trainer does not read."""

needs_verl = pytest.mark.skipif(verl_trainer()[0] is None,
                                reason=f"rft-plugin-verl not usable: {verl_trainer()[1]}")


def _choice(result: Any) -> str:
    (line,) = [note for note in result.report.notes if note.startswith("trainer: ")]
    return line


@needs_verl
def test_a_verl_only_setting_on_one_gpu_converts_to_verl_and_validates(
        validate_converted: Callable[..., Any]) -> None:
    result = convert_text(ONE_GPU + VERL_ONLY)
    assert result.config["trainer"]["trainer_type"] == "verl"
    assert _choice(result).startswith("trainer: verl — the launch needs veRL's workers (veRL "
                                      "worker settings the torch trainer does not read: "
                                      f"{A}fsdp_config.reshard_after_forward)")
    assert "trainer_type: verl  # veRL's workers (rft-plugin-verl); the report says why" in result.yaml
    (stage,) = validate_converted(result.yaml).stages
    assert stage.config.trainer.trainer_type == "verl"
    assert stage.config.trainer.trainer_config["actor_rollout_ref"]["actor"]["fsdp_config"][
        "reshard_after_forward"] is False


def test_nothing_verl_only_stays_torch(validate_converted: Callable[..., Any]) -> None:
    result = convert_text(ONE_GPU)
    assert result.config["trainer"]["trainer_type"] == "torch"
    assert _choice(result) == ("trainer: torch — the launch needs nothing only veRL's "
                               "workers provide")
    (stage,) = validate_converted(result.yaml).stages
    assert stage.config.trainer.trainer_type == "torch"


@needs_verl
def test_forced_verl_validates(validate_converted: Callable[..., Any]) -> None:
    result = convert_text(ONE_GPU, trainer="verl")
    assert result.config["trainer"]["trainer_type"] == "verl"
    assert _choice(result) == "trainer: verl — forced by --trainer verl"
    (stage,) = validate_converted(result.yaml).stages
    assert stage.config.trainer.trainer_type == "verl"


def test_forced_torch_wins_over_a_verl_only_setting() -> None:
    result = convert_text(ONE_GPU + VERL_ONLY, trainer="torch")
    assert result.config["trainer"]["trainer_type"] == "torch"
    assert _choice(result) == "trainer: torch — forced by --trainer torch"
    assert any(note.startswith("trainer.trainer_config keeps 1 veRL worker setting")
               for note in result.report.notes)


@pytest.mark.parametrize(("extra", "why"), [
    ("trainer.n_gpus_per_node=8 ", "it runs one trainer rank and the launch trains on 8 GPUs"),
    (f"{A}strategy=megatron ", "the verl trainer does not implement 'megatron'"),
    (f"{A}ulysses_sequence_parallel_size=2 ",
     "ulysses sequence parallel 2 needs 2 ranks and the verl trainer runs one"),
])
def test_what_the_verl_trainer_refuses_is_written_torch_and_validates(
        extra: str, why: str, validate_converted: Callable[..., Any]) -> None:
    result = convert_text(ONE_GPU + VERL_ONLY + extra)
    assert result.config["trainer"]["trainer_type"] == "torch"
    line = _choice(result)
    assert line.startswith("trainer: torch — the launch needs veRL's workers ("), line
    if verl_trainer()[0] is not None:
        assert f"but the verl trainer cannot run it: {why}" in line, line
    validate_converted(result.yaml)
    with pytest.raises(VerlConvertError, match=r"^--trainer verl: "):
        convert_text(ONE_GPU + VERL_ONLY + extra, trainer="verl")


def test_forced_verl_without_the_plugin_is_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The plugin is installed here: its absence is simulated by a registry without it."""
    import rft.plugins

    class NoVerl:
        def has(self, kind: str, name: str) -> bool:
            return False

    monkeypatch.setattr(rft.plugins.PluginRegistry, "create",
                        classmethod(lambda cls, **kwargs: NoVerl()))
    script = tmp_path / "run.sh"
    script.write_text(ONE_GPU + VERL_ONLY + "\n")
    assert main([str(script), "--trainer", "verl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rft: --trainer verl: no trainer 'verl' is registered (install "
                   "rft-plugin-verl: plugins/trainers/verl/README.md)"]
    result = convert_text(ONE_GPU + VERL_ONLY)
    assert result.config["trainer"]["trainer_type"] == "torch"
    assert _choice(result).endswith("but no trainer 'verl' is registered (install "
                                    "rft-plugin-verl: plugins/trainers/verl/README.md)")


def test_the_cli_prints_the_choice_line(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "run.sh"
    script.write_text(ONE_GPU + "\n")
    assert main([str(script), "-o", str(tmp_path / "out.yaml"), "--trainer", "torch"]) == 0
    err = capsys.readouterr().err
    assert "rft convert-verl:   - trainer: torch — forced by --trainer torch\n" in err
    assert "#   - trainer: torch — forced by --trainer torch\n" in (tmp_path / "out.yaml").read_text()
