"""Running the studio app: loopback by default, off loopback only with an access key."""

from __future__ import annotations

import os

import uvicorn

from rft.errors import RftError
from rft.hosts import why_not_loopback
from rft_plugin_studio.app import build_app
from rft_plugin_studio.page import StudioContext


def access_key(key_env: str | None) -> str | None:
    """The key held by the environment variable ``key_env`` (``None`` when no variable is
    named). :raises RftError: the variable is named but unset or empty."""
    if key_env is None:
        return None
    key = os.environ.get(key_env, "")
    if not key:
        raise RftError(f"--key-env {key_env}: the environment variable is unset or empty")
    return key


def serve(context: StudioContext, host: str, port: int) -> None:
    """Serve the studio on ``host:port`` until interrupted.

    :raises RftError: ``host`` is beyond loopback and ``context`` has no access key."""
    outside = why_not_loopback(host)
    if outside is not None and context.access_key is None:
        raise RftError(f"--host {host}: {outside}; serving beyond loopback needs an access "
                       "key (--key-env VAR), or use --host 127.0.0.1")
    print(f"rft studio: http://{host}:{port}/ (runs under {context.runs_root})", flush=True)
    uvicorn.run(build_app(context), host=host, port=port, log_level="warning")
