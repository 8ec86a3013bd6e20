"""Built-in inference engines: ``hf`` (transformers, the CPU default and logprob reference)."""

from __future__ import annotations

from typing import Any

from rft.hookspecs import hookimpl


@hookimpl
def register_engines() -> dict[str, Any]:
    from rft.explorer.hf_engine import HFEngine

    return {"hf": HFEngine}
