"""``service.data_juicer``: the Data-Juicer server a run owns, or one it connects to.

:class:`DataJuicerService` is the run service (:mod:`rft.services`) registered as
``data_juicer``. With ``auto_start: true`` it starts :mod:`rft_plugin_data_juicer.server`
on 127.0.0.1:``port`` (a free port when unset) through
:class:`~rft_plugin_data_juicer.process.ManagedServer` (own process group, exits when the
run's process disappears, restarted once if it dies) and stops it when the stage ends.
With ``server_url`` it checks that the server answers (``GET /health``) and leaves it
running afterwards. Either way the run reaches the server through
:data:`~rft_plugin_data_juicer.process.URL_VARIABLE`.
"""

from __future__ import annotations

import os
from typing import Any

from rft.errors import RftError
from rft.services import RunService
from rft_plugin_data_juicer.process import URL_VARIABLE, ManagedServer, answers, free_port


class DataJuicerService(RunService):
    """The run service ``data_juicer`` (module docstring); ``config`` is the
    ``service.data_juicer`` section."""

    def __init__(self, config: Any, job_dir: str) -> None:
        super().__init__(config, job_dir)
        self.server: ManagedServer | None = None

    def start(self) -> dict[str, str]:
        if self.config.auto_start:
            port = self.config.port if self.config.port is not None else free_port()
            self.server = ManagedServer(
                port, os.path.join(self.job_dir, "log", "data_juicer_server.log"),
                key="service.data_juicer.auto_start")
            return {URL_VARIABLE: self.server.start()}
        url = str(self.config.server_url).rstrip("/")
        if not answers(url, timeout=5.0):
            raise RftError(f"service.data_juicer.server_url: no Data-Juicer server answers "
                           f"at {url} (GET /health); start one or set auto_start: true")
        return {URL_VARIABLE: url}

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


__all__ = ["DataJuicerService"]
