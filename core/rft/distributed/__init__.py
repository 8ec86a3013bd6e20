"""The cluster runtime on Ray (:mod:`rft.distributed.ray_runtime`, the implementation of
:class:`rft.modes.runtime.Distributed` the launcher hands every mode): the actors of mode
``both`` (:mod:`rft.distributed.both_actors`, driven by :mod:`rft.modes.both`), pools of
engine actors, engines in a sharded trainer's ranks, the shared queue, weight broadcasts."""
