"""A trainer backend that owns its checkpoint layout (``Trainer.write_checkpoint`` /
``Trainer.read_checkpoint``): its files are part of rft's atomic ``global_step_<N>``
folder (written under the temporary name, renamed, pruned with it; a failed write leaves
nothing), ``trainer.pt`` holds what it returns, and a resumed run hands the folder back to
it. The default pair is ``state_dict`` / ``load_state_dict`` in ``trainer.pt``.

``LayoutTrainer`` is rft's real native trainer whose state goes to a file of its own
(``own/state.pt``) instead of ``trainer.pt`` — the shape of ``rft-plugin-verl``'s veRL
layout, without veRL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from rft import hookimpl
from rft.checkpoint import (
    CheckpointError,
    list_checkpoints,
    newest_readable_checkpoint,
    save_checkpoint,
)
from rft.errors import RftError
from rft.testing.runs import run_tiny
from rft.trainer.torch_trainer import TorchTrainer

OWN_FILE = os.path.join("own", "state.pt")


class LayoutTrainer(TorchTrainer):
    """The native trainer, its state in ``own/state.pt`` of the checkpoint folder."""

    reads: ClassVar[list[tuple[str, int]]] = []
    """``(folder, global_steps after reading)`` of each :meth:`read_checkpoint`."""

    def write_checkpoint(self, directory: str) -> dict[str, Any]:
        os.makedirs(os.path.join(directory, "own"))
        torch.save(self.state_dict(), os.path.join(directory, OWN_FILE))
        return {"format": "layout-test", "file": OWN_FILE}

    def read_checkpoint(self, directory: str, trainer_state: dict[str, Any]) -> None:
        if trainer_state.get("format") != "layout-test":
            raise RftError(f"checkpoint {directory}: not a layout-test checkpoint")
        self.load_state_dict(torch.load(os.path.join(directory, trainer_state["file"]),
                                        weights_only=False))
        LayoutTrainer.reads.append((directory, self.global_steps))


class LayoutPlugin:
    @hookimpl
    def register_trainers(self) -> dict[str, Any]:
        return {"layout_test": LayoutTrainer}


def test_a_writer_gets_the_temporary_folder_and_its_files_are_the_checkpoints(tmp_path):
    """The files a trainer writes are the checkpoint's: pruned with it, listed with their
    sizes in ``state.json`` (a truncated or missing one makes the checkpoint unreadable:
    the next older one is taken), and a failed write leaves nothing."""
    seen: list[str] = []

    def writer(directory: str) -> dict[str, Any]:
        seen.append(directory)
        Path(directory, "own").mkdir()
        Path(directory, "own", "weights.bin").write_bytes(b"w" * 10)
        return {"format": "mine"}

    for step in (1, 2, 3):
        save_checkpoint(str(tmp_path), step, writer, {"model_version": step}, max_to_keep=2)
    assert seen == [str(tmp_path / f"global_step_{s}.partial") for s in (1, 2, 3)]
    assert [c.step for c in list_checkpoints(str(tmp_path))] == [2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2", "global_step_3"]
    assert (tmp_path / "global_step_3" / "own" / "weights.bin").read_bytes() == b"w" * 10
    loaded = newest_readable_checkpoint(str(tmp_path))
    assert loaded is not None and loaded.trainer_state == {"format": "mine"}

    own = tmp_path / "global_step_3" / "own" / "weights.bin"
    own.write_bytes(b"w" * 4)  # truncated: the newest is skipped, moved aside
    loaded = newest_readable_checkpoint(str(tmp_path))
    assert loaded is not None and loaded.step == 2
    aside = tmp_path / "global_step_3.corrupt"
    assert loaded.skipped == [(f"checkpoint {own} is corrupt: 4 bytes, 10 written "
                               f"(truncated or overwritten); skipped (moved to {aside})")]
    (tmp_path / "global_step_2" / "own" / "weights.bin").unlink()
    with pytest.raises(CheckpointError, match=r"^checkpoint .*global_step_2/own/weights.bin "
                                              r"is corrupt: missing$"):
        newest_readable_checkpoint(str(tmp_path))
    (tmp_path / "global_step_2" / "own" / "weights.bin").write_bytes(b"w" * 10)

    def full_disk(directory: str) -> dict[str, Any]:
        Path(directory, "own").mkdir()
        raise OSError(28, os.strerror(28))

    with pytest.raises(CheckpointError) as info:
        save_checkpoint(str(tmp_path), 4, full_disk, {})
    assert str(info.value).startswith(  # the bytes needed: the previous checkpoint's size
        f"checkpoint {tmp_path / 'global_step_4'}: cannot write: {os.strerror(28)} (the "
        "checkpoint needs about 1.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2",
                                                          "global_step_3.corrupt"]


@pytest.mark.slow
def test_a_run_resumes_through_the_trainers_own_layout(rft_tiny_model, rft_tiny_taskset,
                                                       tmp_path) -> None:
    """``rft run`` (mode ``colocate``) with a plugin trainer that writes its own files: each
    checkpoint holds them and a small ``trainer.pt``; started again for one more step, the
    run hands ``global_step_2`` back to the trainer and goes on from step 2 to the
    uninterrupted run's weights."""
    from safetensors.torch import load_file

    LayoutTrainer.reads.clear()
    overrides = {"trainer.trainer_type": "layout_test", "trainer.save_interval": 1}
    for root in ("whole", "split"):
        (tmp_path / root).mkdir()
    whole = run_tiny(rft_tiny_model, rft_tiny_taskset, tmp_path / "whole", overrides,
                     plugins=[LayoutPlugin()], steps=3)
    run_tiny(rft_tiny_model, rft_tiny_taskset, tmp_path / "split", overrides,
             plugins=[LayoutPlugin()], steps=2)
    assert LayoutTrainer.reads == []
    resumed = run_tiny(rft_tiny_model, rft_tiny_taskset, tmp_path / "split", overrides,
                       plugins=[LayoutPlugin()], steps=3)
    assert LayoutTrainer.reads == [(str(resumed.job_dir / "global_step_2"), 2)]
    for step in (1, 2, 3):
        folder = resumed.job_dir / f"global_step_{step}"
        assert (folder / OWN_FILE).is_file()
        assert torch.load(folder / "trainer.pt") == {"format": "layout-test", "file": OWN_FILE}
    expected = load_file(whole.job_dir / "global_step_3" / "hf" / "model.safetensors")
    got = load_file(resumed.job_dir / "global_step_3" / "hf" / "model.safetensors")
    assert expected.keys() == got.keys()
    assert all(torch.equal(got[k], expected[k]) for k in expected)
