"""The modes: each owns its entry point, ``run_<mode>_mode(stage, runtime)`` (``run_both``,
``run_bench``), which the launcher calls with the cluster runtime
(:class:`rft.modes.runtime.Distributed`; on Ray: :mod:`rft.distributed.ray_runtime`).

============  ==========================================================================
``colocate``  :mod:`rft.modes.colocate` — explorer and trainer in one process, taking turns
``both``      :mod:`rft.modes.both` — explorer, trainer and buffer as actors, at once
``explore``   :mod:`rft.modes.explore` — the explorer alone: experiences to a durable
              buffer (``sql`` / ``file``); loads the trainer's checkpoints
              (:mod:`rft.modes.checkpoint_sync`)
``train``     :mod:`rft.modes.train` — the trainer alone: reads the ``sql`` buffer, saves
              a checkpoint every ``sync_interval`` steps for the explorer
``bench``     :mod:`rft.modes.bench` — evaluates a run's checkpoints on the eval tasksets
``serve``     :mod:`rft.modes.serve` — the rollout model on the OpenAI API; live requests
              become experiences (``/feedback``, ``/commit``), trained here or by a
              ``train`` process
============  ==========================================================================

An ``explore`` run and a ``train`` run of the same config (same ``project`` / ``name``,
so the same job dir and experience buffer) started side by side make one RFT run. Every
mode resumes from one versioned :class:`~rft.modes.run_state.RunState`.
"""
