"""rft-plugin-data-juicer: Data-Juicer as a run service (``service.data_juicer``) and as
the ``data_juicer`` experience and task operators (see docs/data-juicer.md).

Each hook imports its module when called, so that a core without one of the contracts
(an older rft) still loads the others.
"""

from __future__ import annotations

from typing import Any

from rft import hookimpl


@hookimpl
def register_services() -> dict[str, Any]:
    from rft_plugin_data_juicer.service import DataJuicerService

    return {"data_juicer": DataJuicerService}


@hookimpl
def register_experience_operators() -> dict[str, Any]:
    from rft_plugin_data_juicer.experience import DataJuicerExperienceOperator

    return {"data_juicer": DataJuicerExperienceOperator}


@hookimpl
def register_task_operators() -> dict[str, Any]:
    from rft_plugin_data_juicer.tasks import DataJuicerTaskOperator

    return {"data_juicer": DataJuicerTaskOperator}
