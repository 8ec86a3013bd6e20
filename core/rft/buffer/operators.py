"""The experience-operator interface: transforms between the explorer and the buffer.

Operators are plugins (``register_experience_operators``) listed in
``data_processor.experience_pipeline.operators`` as ``{name, args}``; they run in order
on each explore step's experiences before they are written to the experience buffer:

    experiences, metrics = operator.process(experiences)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from rft.experience import Experience


class ExperienceOperator(ABC):
    """Base class of experience operators.

    :param args: instance of the operator's ``Args`` dataclass (its ``args`` mapping).
    """

    Args: type | None = None
    needs_services: ClassVar[tuple[str, ...]] = ()
    """Sections of ``service`` the operator works through (``("data_juicer",)``):
    validation refuses the operator, in one line, when one of them is not set."""

    def __init__(self, args: Any = None) -> None:
        self.args = args if args is not None or self.Args is None else self.Args()

    @abstractmethod
    def process(self, experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        """The transformed experiences and metrics (``pipeline/<operator>/...``)."""


def run_pipeline(operators: list[tuple[str, ExperienceOperator]],
                 experiences: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
    """Apply ``(name, operator)`` pairs in order; metrics are prefixed with the name."""
    metrics: dict[str, float] = {}
    for name, operator in operators:
        experiences, own = operator.process(experiences)
        metrics.update({f"pipeline/{name}/{key}": value for key, value in own.items()})
    return experiences, metrics
