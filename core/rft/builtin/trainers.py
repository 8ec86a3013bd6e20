"""The core's trainer backends: ``torch`` (native, single process)."""

from __future__ import annotations

from typing import Any

from rft.hookspecs import hookimpl


@hookimpl
def register_trainers() -> dict[str, Any]:
    from rft.trainer.torch_trainer import TorchTrainer

    return {"torch": TorchTrainer}
