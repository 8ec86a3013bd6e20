"""No silent CPU fallback: an actor that Ray gave a GPU refuses to run without CUDA.

Ray assigned the actor GPUs (``ray.get_gpu_ids()``) but ``torch.cuda.is_available()`` is
false — a CPU build of torch, a CUDA driver older than the one torch was built for: the
trainer would otherwise train on CPU over gloo and crawl. One line instead
(:func:`refuse_cpu_fallback`), made by each actor when it starts (:func:`check_actor_device`).
"""

from __future__ import annotations

import os
from typing import Any

from rft.errors import RftError

GPUS_AS_LABELS_ENV = "RFT_RAY_GPUS_AS_LABELS"
"""``1`` in an actor's environment: Ray's GPUs are placement labels only and the actor
computes on the CPU (tests of multi-node placement on CPU machines, with GPUs declared to
Ray); :func:`refuse_cpu_fallback` then lets it run."""


def refuse_cpu_fallback(who: str, assigned_gpus: list[Any], cuda_available: bool,
                        gpus_as_labels: bool = False) -> None:
    """Refuse to run on CPU where Ray assigned GPUs (``assigned_gpus``: ``ray.get_gpu_ids()``
    of the actor) but CUDA is not usable (``cuda_available``: ``torch.cuda.is_available()``),
    unless the GPUs are declared labels only (``gpus_as_labels``, :data:`GPUS_AS_LABELS_ENV`).

    :raises RftError: one line naming ``who`` and the GPU ids.
    """
    if not assigned_gpus or cuda_available or gpus_as_labels:
        return
    import torch

    ids = ", ".join(str(g) for g in assigned_gpus)
    raise RftError(f"{who}: Ray assigned GPU {ids} but torch.cuda.is_available() is False "
                   f"(torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}: a CPU "
                   f"build, or a CUDA driver older than torch's); refusing to run on CPU: "
                   f"install a torch that matches the driver, or set cluster.gpu_per_node: 0")


def check_actor_device(who: str) -> None:
    """:func:`refuse_cpu_fallback` with this Ray actor's facts."""
    import ray
    import torch

    refuse_cpu_fallback(who, list(ray.get_gpu_ids()), torch.cuda.is_available(),
                        os.environ.get(GPUS_AS_LABELS_ENV) == "1")
