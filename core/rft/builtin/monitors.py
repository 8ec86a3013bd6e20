"""Built-in monitors of the core: ``console``, ``jsonl``, ``tensorboard``, ``wandb`` and
``mlflow`` (the last three import their package only when opened)."""

from __future__ import annotations

from typing import Any

from rft.hookspecs import hookimpl
from rft.monitor.files import ConsoleMonitor, JsonlMonitor
from rft.monitor.mlflow_monitor import MlflowMonitor
from rft.monitor.tensorboard import TensorboardMonitor
from rft.monitor.wandb_monitor import WandbMonitor


@hookimpl
def register_monitors() -> dict[str, Any]:
    return {"console": ConsoleMonitor, "jsonl": JsonlMonitor,
            "tensorboard": TensorboardMonitor, "wandb": WandbMonitor, "mlflow": MlflowMonitor}
