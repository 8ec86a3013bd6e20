"""Helpers for tests of rft and of its plugins (docs/testing-plugins.md).

- :mod:`rft.testing.pytest_plugin` — fixtures ``rft_tiny_model``, ``rft_tiny_taskset``,
  ``rft_model`` and ``rft_run``, loaded by pytest through the ``pytest11`` entry point;
- :mod:`rft.testing.strategies` — hypothesis strategies for the inputs of each plugin kind;
- :mod:`rft.testing.checks` — contract checks (``check_policy_loss``, …,
  ``assert_equals_verl``), each from a ``rft.testing.check_*`` module of its own;
- :mod:`rft.testing.references` — reference formulas of named loss families
  (``ClippedSurrogate``) for ``check_policy_loss(..., reference=)``;
- :mod:`rft.testing.runs` — tiny end-to-end runs (``RunOutcome``);
- :mod:`rft.testing.tiny_model` — a tiny local Qwen2 checkpoint;
- :mod:`rft.testing.config_edit` — changed copies of (frozen) config values;
- :mod:`rft.testing.algorithms`, :mod:`rft.testing.engines` — the random batches and
  shared assertions behind them and rft's own tests.

This package imports nothing itself: pytest imports the plugin module in every session
where rft is installed, so nothing heavy may load with it.
"""
