"""Workflows the runner tests share."""

from __future__ import annotations

import time

import torch

from rft.experience import Experience
from rft.workflow import Workflow


class Sleepy(Workflow):
    """Sleeps ``raw['sleep']`` seconds (set per task), then returns one scored experience."""

    def run(self) -> list[Experience]:
        time.sleep(self.task.raw["sleep"])
        exp = Experience(tokens=torch.tensor([1, 2]), prompt_length=1)
        self.score(exp, "1")
        return [exp]
