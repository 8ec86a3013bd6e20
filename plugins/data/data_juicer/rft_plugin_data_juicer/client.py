"""HTTP client of the Data-Juicer server (:mod:`rft_plugin_data_juicer.server`).

The server's URL comes from the run (:data:`~rft_plugin_data_juicer.process.URL_VARIABLE`,
set by ``service.data_juicer``). A request that finds no server, when this process started
it, restarts it once (:meth:`ManagedServer.ensure`) and is sent again; otherwise it is one
line naming the server. A recipe the server refuses is one line naming the operator's key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import httpx

from rft.errors import RftError
from rft_plugin_data_juicer.recipe import Process
from rft_plugin_data_juicer.process import URL_VARIABLE, owned

REQUEST_TIMEOUT_S = 600.0
"""Longest wait for one ``/process`` answer."""


@dataclass(frozen=True)
class Processed:
    """What ``/process`` returned."""

    rows: list[dict[str, Any]]
    """The rows that survived, changed by the mappers."""
    index: list[int]
    """Position in the input of each surviving row."""
    stats: list[dict[str, Any]]
    """Data-Juicer statistics of each surviving row."""
    counts: list[int] = field(default_factory=list)
    """Rows after each operator."""


def server_url(key: str) -> str:
    """The run's Data-Juicer server; one line naming ``key`` when the run has none."""
    url = os.environ.get(URL_VARIABLE)
    if not url:
        raise RftError(f"{key}: no Data-Juicer server: set service.data_juicer "
                       "(auto_start: true, or server_url of a running one)")
    return url


class DataJuicerClient:
    """Requests to the run's Data-Juicer server on behalf of the operator at ``key``."""

    def __init__(self, key: str, url: str | None = None) -> None:
        self.key = key
        self.url = url or server_url(key)

    def _post(self, route: str, payload: dict[str, Any] | None) -> dict[str, Any]:
        """``POST route`` with ``payload`` (``None``: ``GET route``)."""
        for attempt in range(2):
            try:
                if payload is None:
                    response = httpx.get(f"{self.url}{route}", timeout=REQUEST_TIMEOUT_S)
                else:
                    response = httpx.post(f"{self.url}{route}", json=payload,
                                          timeout=REQUEST_TIMEOUT_S)
                break
            except httpx.TransportError as exc:
                server = owned(self.url)
                if attempt == 0 and server is not None and server.ensure():
                    continue
                raise RftError(f"service.data_juicer: the Data-Juicer server at {self.url} "
                               f"does not answer ({type(exc).__name__}); {self.key} cannot "
                               "run") from exc
        body: dict[str, Any] = response.json()
        if response.status_code != 200:
            raise RftError(f"{self.key}: {body.get('error', response.text)}")
        return body

    def ops(self) -> list[str]:
        """Every operator name the server's Data-Juicer knows."""
        names: list[str] = self._post("/ops", None)["ops"]
        return names

    def validate(self, process: Process) -> list[str]:
        """The recipe's op names; one line naming the first unknown operator."""
        ops: list[str] = self._post("/validate", {"process": process})["ops"]
        return ops

    def process(self, process: Process, rows: list[dict[str, Any]]) -> Processed:
        """Run the recipe over ``rows`` on the server."""
        body = self._post("/process", {"process": process, "rows": rows})
        return Processed(body["rows"], body["index"], body["stats"], body.get("counts", []))


__all__ = ["DataJuicerClient", "Processed", "server_url"]
