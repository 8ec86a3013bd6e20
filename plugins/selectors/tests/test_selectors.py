"""Behaviour of the basic selectors, through the plugin registry like a config would."""

from __future__ import annotations

import pytest

from rft.plugins import PluginRegistry


@pytest.fixture(scope="module")
def selectors():
    registry = PluginRegistry.create()
    return {name: registry.get("task_selector", name)
            for name in ("sequential", "shuffle", "random")}


def test_registered_by_this_distribution():
    registry = PluginRegistry.create()
    for name in ("shuffle", "random"):
        assert registry.registration("task_selector", name).distribution == "rft-plugin-selectors"
    # the default is the core's (rft.builtin.selectors)
    assert registry.registration("task_selector", "sequential").distribution == "rft-framework"


def test_sequential_spans_epochs(selectors):
    selector = selectors["sequential"](dataset_size=5)
    assert selector.next_batch(3) == [0, 1, 2]
    assert selector.next_batch(3) == [3, 4, 0]
    assert selector.epoch == 1
    assert selector.next_batch(7) == [1, 2, 3, 4, 0, 1, 2]


def test_shuffle_is_a_permutation_per_epoch_and_differs_between_epochs(selectors):
    selector = selectors["shuffle"](dataset_size=20, seed=3)
    first, second = selector.next_batch(20), selector.next_batch(20)
    assert sorted(first) == sorted(second) == list(range(20))
    assert first != second
    assert selectors["shuffle"](dataset_size=20, seed=3).next_batch(20) == first


@pytest.mark.parametrize("name", ["sequential", "shuffle", "random"])
def test_resume_from_state_gives_the_same_batches(selectors, name):
    uninterrupted = selectors[name](dataset_size=7, seed=11)
    expected = [uninterrupted.next_batch(4) for _ in range(5)]
    first = selectors[name](dataset_size=7, seed=11)
    got = [first.next_batch(4) for _ in range(2)]
    resumed = selectors[name](dataset_size=7, seed=11)
    resumed.load_state_dict(first.state_dict())
    got += [resumed.next_batch(4) for _ in range(3)]
    assert got == expected


def test_random_batches_are_distinct_within_a_batch(selectors):
    selector = selectors["random"](dataset_size=10, seed=0)
    batches = [selector.next_batch(6) for _ in range(20)]
    assert all(len(set(b)) == 6 for b in batches)
    assert len({tuple(b) for b in batches}) > 1


@pytest.mark.parametrize("name", ["sequential", "shuffle", "random"])
def test_empty_taskset_is_refused(selectors, name):
    with pytest.raises(ValueError, match="non-empty taskset"):
        selectors[name](dataset_size=0)


def test_offline_easy_to_hard_orders_by_feature():
    """Trinity-RFT's order by default: higher feature values are easier and come first,
    ties later row first; ``higher_is_easier: false`` reads them as difficulty."""
    registry = PluginRegistry.create()
    cls = registry.get("task_selector", "offline_easy2hard")
    rows = [{"level": 3}, {"level": 1}, {"level": 2}, {"level": 1}]
    selector = cls(dataset_size=4, rows=rows, feature_keys=["level"])
    assert selector.next_batch(4) == [0, 2, 3, 1]
    hardest_high = cls(dataset_size=4, args=cls.Args(higher_is_easier=False), rows=rows,
                       feature_keys=["level"])
    assert hardest_high.next_batch(4) == [1, 3, 2, 0]
    with pytest.raises(ValueError, match="needs task_selector.feature_keys"):
        cls(dataset_size=4, rows=rows)
    with pytest.raises(ValueError, match="row 0: feature 'level' is 'hard', expected a number"):
        cls(dataset_size=1, rows=[{"level": "hard"}], feature_keys=["level"])


def test_offline_easy_to_hard_compares_features_in_key_order():
    cls = PluginRegistry.create().get("task_selector", "offline_easy2hard")
    rows = [{"a": 0.5, "b": 0.1}, {"a": 0.5, "b": 0.9}, {"a": 0.9, "b": 0.0}]
    assert cls(dataset_size=3, rows=rows, feature_keys=["a", "b"]).next_batch(3) == [2, 1, 0]
    assert cls(dataset_size=3, rows=rows, feature_keys=["b", "a"]).next_batch(3) == [1, 0, 2]


def test_difficulty_based_prefers_tasks_near_the_target_pass_rate():
    registry = PluginRegistry.create()
    cls = registry.get("task_selector", "difficulty_based")
    selector = cls(dataset_size=6, seed=1, args=cls.Args(temperature=0.05))
    # tasks 0-1 always solved, 2-3 never, 4-5 half the time
    for _ in range(5):
        selector.update([0, 1, 2, 3, 4, 5], [1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
        selector.update([4, 5], [0.0, 1.0])
    picks = [i for _ in range(50) for i in selector.next_batch(2)]
    assert sum(i in (4, 5) for i in picks) / len(picks) > 0.9
    resumed = cls(dataset_size=6, seed=1, args=cls.Args(temperature=0.05))
    resumed.load_state_dict(selector.state_dict())
    assert resumed.next_batch(3) == selector.next_batch(3)
