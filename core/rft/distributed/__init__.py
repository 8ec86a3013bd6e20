"""The distributed run (mode ``both``): explorer, trainer and experience buffer as Ray
actors, driven by a coordinator in the launching process (see :mod:`rft.distributed.both`)."""
