"""The sample-strategy interface: how the trainer gets one batch of experiences per step.

Sample strategies are plugins (``register_sample_strategies``) selected by
``algorithm.sample_strategy``; they are built once per run:

    strategy = StrategyClass(buffers, batch_size=train_batch_size, timeout=max_read_timeout,
                             args=args)
    experiences, metrics = strategy.sample(step, model_version)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from rft.buffer.storage import ExperienceStorage
from rft.experience import Experience


@dataclass
class TrainerBuffers:
    """What the trainer reads: the experience buffer and the auxiliary buffers by name."""

    experience: ExperienceStorage
    auxiliary: dict[str, ExperienceStorage] = field(default_factory=dict)


class SampleStrategy(ABC):
    """Base class of sample strategies.

    :param buffers: the trainer's buffers.
    :param batch_size: experiences per training step (``buffer.train_batch_size``).
    :param timeout: seconds to wait for experiences before a clear timeout error.
    :param args: instance of the strategy's ``Args`` (``algorithm.sample_strategy_args``).
    """

    Args: type | None = None

    def __init__(self, buffers: TrainerBuffers, batch_size: int, timeout: float,
                 args: Any = None) -> None:
        self.buffers = buffers
        self.batch_size = batch_size
        self.timeout = timeout
        self.args = args

    @abstractmethod
    def sample(self, step: int, model_version: int) -> tuple[list[Experience], dict[str, float]]:
        """One training batch and metrics about it (``sample/...``)."""
