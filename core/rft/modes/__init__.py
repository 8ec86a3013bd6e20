"""The single-sided modes: one side of a run per process, weights moving through checkpoints.

=========  ==========================================================================
``explore``  :mod:`rft.modes.explore` — the explorer alone: experiences to a durable
             buffer (``sql`` / ``file``); loads the trainer's checkpoints
             (:mod:`rft.modes.checkpoint_sync`)
``train``    :mod:`rft.modes.train` — the trainer alone: reads the ``sql`` buffer, saves
             a checkpoint every ``sync_interval`` steps for the explorer
``bench``    :mod:`rft.modes.bench` — evaluates a run's checkpoints on the eval tasksets
=========  ==========================================================================

An ``explore`` run and a ``train`` run of the same config (same ``project`` / ``name``,
so the same job dir and experience buffer) started side by side make one RFT run.
"""
