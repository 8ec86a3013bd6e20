"""Mode ``both``'s coordinator without Ray (issue #30, item 2): it gets its actors as an
injected :class:`~rft.modes.runtime.BothActors`, so its decisions — what each checkpoint
holds, what a resumed run restores — run here against actors in this process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from fixtures_models import arithmetic_tasks
from rft.config import load_config
from rft.distributed.workers import ResumePoint
from rft.errors import RftError
from rft.modes.both.coordinator import Coordinator
from rft.modes.run_state import RunState
from rft.modes.runtime import Call, Ref, Role
from test_split_modes import write_config

TRAIN_SIZE = 4
"""Training tasks the fake explorer reports (batch size 2: 2 steps per epoch)."""


@dataclass(frozen=True, eq=False)
class Done:
    """A finished call of :class:`InProcessActors` (its value, or what it raised; hashed
    by identity, as a Ray object ref)."""

    value: Any
    error: Exception | None = None


class FakeBuffer:
    def __init__(self) -> None:
        self.loaded: Any = None

    def counts(self) -> dict[str, int]:
        return {"written": 0, "read": 0}

    def writers_idle(self) -> None:
        pass

    def recover_leases(self, step: int) -> None:
        pass

    def load_state_dict(self, state: Any) -> None:
        self.loaded = state

    def state_dict(self) -> dict[str, str]:
        return {"buffer": "state"}


class FakeExplorer:
    """Explore step ``s`` leaves selectors ``[{"i": s}]``, engine seed ``100 + s``, random
    generators ``{"r": s}`` and ``2 s`` experiences written."""

    def __init__(self) -> None:
        self.restored: RunState | None = None
        self.rewound: int | None = None
        self.synced: list[int | None] = []

    def train_size(self) -> int:
        return TRAIN_SIZE

    def explore_step(self, step: int, weights: Any, version: int | None
                     ) -> tuple[dict[str, float], RunState]:
        self.synced.append(version)
        return {"rollout/x": float(step)}, RunState(
            step=step, selectors=[{"i": step}], engine_seed=100 + step,
            explorer_rng={"r": step}, experiences_written=2 * step)

    def evaluate(self, *args: Any) -> dict[str, float]:
        return {"eval/heldout/accuracy": 0.5}

    def restore(self, state: RunState) -> None:
        self.restored = state

    def rewind_record(self, step: int) -> None:
        self.rewound = step

    def failed_tasks(self) -> list[str]:
        return []


@dataclass
class FakeTrainer:
    resume_point: ResumePoint | None = None
    saves: list[tuple[int, RunState, bool]] = field(default_factory=list)

    def placement(self) -> None:
        return None

    def resume(self) -> ResumePoint | None:
        return self.resume_point

    def train_step(self, step: int) -> dict[str, float]:
        return {"actor/loss": float(step)}

    def weights(self) -> str:
        return "weights"

    def rollout_examples(self, step: int) -> list[dict[str, Any]]:
        return []

    def save(self, step: int, state: RunState, export_hf: bool, buffer: Any) -> str:
        self.saves.append((step, state, buffer is not None))
        return f"global_step_{step}"


class InProcessActors:
    """:class:`~rft.modes.runtime.BothActors` in this process: a call runs at once, its
    ref is a :class:`Done`; a ref passed as an argument arrives as its value (as on Ray)."""

    def __init__(self, trainer: FakeTrainer) -> None:
        self.objects: dict[Role, Any] = {}
        self.trainer = trainer
        self.explorer = FakeExplorer()
        self.buffer = FakeBuffer()
        self.closed = False

    def start_buffer(self) -> None:
        self.objects["buffer"] = self.buffer

    def start_explorer(self) -> None:
        self.objects["explorer"] = self.explorer

    def start_trainer(self, steps: int, *, broadcasting: bool) -> None:
        self.objects["trainer"] = self.trainer

    def call(self, role: Role, method: str, *args: Any, broadcast: bool = False) -> Ref:
        values = [arg.value if isinstance(arg, Done) else arg for arg in args]
        try:
            return Done(getattr(self.objects[role], method)(*values))
        except RftError as exc:
            return Done(None, exc)

    def get(self, ref: Ref, call: Call, timeout: float | None = None) -> Any:
        assert isinstance(ref, Done)
        if ref.error is not None:
            raise ref.error
        return ref.value

    def ready(self, refs: list[Ref], timeout: float) -> list[Ref]:
        return refs[:1]

    def settle(self, ref: Ref) -> None:
        pass

    def alive(self, role: Role) -> bool:
        return role in self.objects

    def close(self) -> None:
        self.closed = True


def both_stage(tmp_path, model, **changes):
    tasks = arithmetic_tasks(tmp_path, TRAIN_SIZE)
    settings = {"buffer__total_steps": None, "buffer__total_epochs": 2,
                "trainer__save_interval": 1, "synchronizer__sync_method": "memory",
                "synchronizer__wait_for_checkpoint": False, **changes}
    config = write_config(tmp_path, model, tasks, "both", **settings)
    (stage,) = load_config(config).stages
    return stage


def test_each_checkpoint_holds_the_explorer_state_after_its_step(tmp_path, tiny_model_dir):
    """In lockstep, checkpoint ``t`` holds the explorer's run state after explore step
    ``t`` (never the trainer's random generators: the trainer adds its own), the buffer's
    state, and the evaluation after the last step in the final one alone."""
    trainer = FakeTrainer()
    actors = InProcessActors(trainer)
    result = Coordinator(both_stage(tmp_path, tiny_model_dir), actors).run()
    assert result.steps == 4 and actors.closed
    assert [step for step, _, _ in trainer.saves] == [1, 2, 3, 4]
    for step, state, with_buffer in trainer.saves:
        assert (state.selectors, state.engine_seed, state.explorer_rng,
                state.experiences_written, state.model_version, state.rng) == (
            [{"i": step}], 100 + step, {"r": step}, 2 * step, step, None)
        assert with_buffer
        assert state.eval_after == ({"eval/heldout/accuracy": 0.5} if step == 4 else None)
    assert actors.explorer.synced == [None, 1, 2, 3]  # each step on the weights before it
    assert actors.explorer.rewound == 0  # a fresh start: an old rollout record forgotten


def test_a_resumed_run_restores_the_explorer_and_syncs_to_the_checkpoint(tmp_path,
                                                                           tiny_model_dir):
    """Resumed from checkpoint 2 (a state of the previous layout's keys, read as a
    RunState), the explorer gets that state back, the buffer its counts, its first step
    syncs to version 2, and later checkpoints hold the explorer's new steps."""
    saved = RunState.from_dict({"step": 2, "model_version": 2, "selectors": [{"i": 2}],
                                "engine_seed": 102, "explorer_rng": {"r": 2},
                                "experiences_written": 4, "experiences_read": 4,
                                "rng": {"trainer": 1}, "eval_before": {"eval/x": 0.25}},
                               "global_step_2/state.json")
    trainer = FakeTrainer(ResumePoint(2, str(tmp_path / "global_step_2"), saved, None, []))
    actors = InProcessActors(trainer)
    result = Coordinator(both_stage(tmp_path, tiny_model_dir, continue_from_checkpoint=True),
                         actors).run()
    assert actors.explorer.restored == saved
    assert actors.explorer.rewound == 2  # the rollout record forgets the steps redone
    assert actors.buffer.loaded == {"written": 4, "read": 4}  # no buffer.pt: the counts
    assert result.eval_before == {"eval/x": 0.25}
    assert actors.explorer.synced == [2, 3]
    assert [(s, state.selectors, state.rng) for s, state, _ in trainer.saves] == [
        (3, [{"i": 3}], None), (4, [{"i": 4}], None)]


class FailingTrainer(FakeTrainer):
    """Its third train step fails."""

    def train_step(self, step: int) -> dict[str, float]:
        if step == 3:
            raise RftError("trainer 'trainer', train 3: out of memory")
        return super().train_step(step)


def test_a_failing_call_saves_the_last_trained_step_then_stops(tmp_path, tiny_model_dir):
    """A train step that fails is one line; the trainer's last completed step is kept."""
    trainer = FailingTrainer()
    actors = InProcessActors(trainer)
    stage = both_stage(tmp_path, tiny_model_dir, trainer__save_interval=0)
    with pytest.raises(RftError, match=r"^trainer 'trainer', train 3: out of memory$"):
        Coordinator(stage, actors).run()
    assert [step for step, _, _ in trainer.saves] == [2]
    assert actors.closed
