"""``rft.testing.check_environment``: a good environment passes, each kind of bad one fails
with one line naming the class and the property."""

from __future__ import annotations

import pytest

import fixtures_environments as envs
from rft.testing import checks
from rft.testing.check_environment import check_environment
from rft_plugin_frozen_lake import FrozenLakeEnvArgs, FrozenLakeEnvironment

ROWS = [{"secret": 1}, {}]


def test_it_is_exported_with_the_other_checks():
    assert checks.check_environment is check_environment


def test_a_good_environment_passes_and_its_trajectories_come_back():
    (first, second) = check_environment(envs.Guess, ROWS, seed=4)
    assert first == ("Guess a number from 1 to 10.",
                     [("Wrong, lower.", -0.1, False, False), ("Right!", 1.0, True, False)])
    assert second[1][-1] == ("Wrong, lower.", -0.1, False, False)  # secret 5: never found
    check_environment(envs.OneShot, ROWS[:1])


def test_frozen_lake_passes():
    played = check_environment(FrozenLakeEnvironment, [{"size": 3, "seed": 5}, {"seed": 1}],
                               FrozenLakeEnvArgs(max_steps=3),
                               actions=["Down", "Right", "jump", "Up", "Left"])
    assert all(steps for _, steps in played)


def test_an_out_of_process_environment_passes_through_its_child():
    check_environment(envs.GuessChild, ROWS[:1], timeout=60)


@pytest.mark.parametrize("env, message", [
    (envs.WrongTypes, "reset must return (observation: str, info: dict) (got 'Guess a number.')"),
    (envs.TupleStep, "step('look') must return a StepResult (got tuple)"),
    (envs.NaNReward, "step('look'): reward must be a finite number (got nan)"),
    (envs.Raising, "step raised ValueError: the board is on fire"),
    (envs.Unseeded, "not deterministic: a second reset with the same seed on the same "
                    "instance played differently (first observation"),
    (envs.UnseededLate, "(first observation at character 121: 'e in a room. Guess ("),
    (envs.ClosesOnce, "close raised RuntimeError: already closed"),
    (envs.Hanging, "step did not return within 0.5 s (check_environment's timeout)"),
    (envs.PicklesBadly, "out of process: "),
])
def test_each_kind_of_bad_environment_fails_in_one_line(env, message):
    with pytest.raises(AssertionError) as caught:
        check_environment(env, ROWS, timeout=0.5 if env is envs.Hanging else 60)
    text = str(caught.value)
    assert text.startswith(f"check_environment({env.__qualname__}): ") and "\n" not in text
    assert message in text, text
