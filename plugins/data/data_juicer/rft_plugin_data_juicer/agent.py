"""A Data-Juicer recipe written by an LLM from a description (Trinity-RFT's
``dj_process_desc`` with ``agent_model_name`` / ``agent_model_config``).

The agent model is one rft knows how to run, named by ``agent_model_name``:

1. an auxiliary model of the run (``explorer.auxiliary_models[i].name``), built as the
   explorer builds it;
2. an ``http://`` / ``https://`` URL: the ``external`` engine (an OpenAI-compatible server;
   ``agent_model_config.model_name`` picks the model when the server has several);
3. a local model folder: the ``hf`` engine on the CPU.

It gets the description, the row fields and Data-Juicer's operator names, and answers with
a YAML recipe (a fenced block or the bare text). The reply is parsed and every operator
checked by the server before any row is processed: a reply that is not a recipe, or names
an operator Data-Juicer does not know, is one line naming ``agent_model_name``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from typing import Any

from rft.data.task_operator import TaskOperatorContext
from rft.engines.engine import InferenceEngine, SamplingArgs
from rft.errors import RftError
from rft_plugin_data_juicer.client import DataJuicerClient
from rft_plugin_data_juicer.recipe import Process, parse_recipe_text

FENCE = re.compile(r"```(?:ya?ml)?\s*\n(.*?)```", re.S)
"""A fenced code block of the reply (its YAML)."""
PROMPT = """You write Data-Juicer recipes. Task: {desc}
The data rows have the fields: {fields}.
Data-Juicer operators you may use: {ops}.
Reply with the recipe only, as YAML: a mapping with a 'process' list, each item one
operator as {{name: {{arg: value}}}}; set text_key to the field an operator reads."""


def reply_recipe(reply: str, where: str) -> Process:
    """The recipe in an agent's reply: its first fenced block, else the whole text."""
    match = FENCE.search(reply)
    return parse_recipe_text(match.group(1) if match else reply, where)


def agent_kind(spec: str, auxiliary_models: Collection[str]) -> str | None:
    """``"auxiliary"``, ``"url"`` or ``"folder"``: what ``spec`` names here; ``None``:
    none of them."""
    if spec in auxiliary_models:
        return "auxiliary"
    if spec.startswith(("http://", "https://")):
        return "url"
    return "folder" if os.path.isdir(os.path.expanduser(spec)) else None


def build_agent(spec: str, config: dict[str, Any], context: TaskOperatorContext | None,
                key: str) -> InferenceEngine:
    """The engine ``agent_model_name`` names (module docstring)."""
    auxiliary = context.auxiliary_models if context is not None else {}
    kind = agent_kind(spec, auxiliary)
    if kind == "auxiliary":
        return auxiliary[spec].build()
    if kind == "url":
        from rft.engines.external_engine import ExternalEngine

        return ExternalEngine(spec, model_name=config.get("model_name"))
    if kind == "folder":
        from rft.engines.hf_engine import HFEngine

        return HFEngine(os.path.expanduser(spec), max_prompt_tokens=4096,
                        max_response_tokens=int(config.get("max_tokens", 512)),
                        enable_prompt_truncation=True)
    raise RftError(f"{key}: {spec!r} is neither an auxiliary model of the run "
                   f"(explorer.auxiliary_models names: {', '.join(sorted(auxiliary)) or 'none'}"
                   "), an http(s) URL of an OpenAI-compatible server, nor a local model folder")


def written_recipe(desc: str, spec: str, config: dict[str, Any], fields: list[str],
                   client: DataJuicerClient, context: TaskOperatorContext | None,
                   key: str) -> Process:
    """Ask the agent model for a recipe doing ``desc`` over rows with ``fields``; the
    recipe, parsed and checked by the server."""
    engine = build_agent(spec, config, context, f"{key}.agent_model_name")
    prompt = PROMPT.format(desc=desc, fields=", ".join(fields) or "(none)",
                           ops=", ".join(client.ops()))
    try:
        [choices] = engine.chat([[{"role": "user", "content": prompt}]], SamplingArgs(
            temperature=0.0, max_tokens=int(config.get("max_tokens", 512)), logprobs=False,
            seed=0))
    finally:
        close = getattr(engine, "close", None)  # engines with a server or threads have one
        if callable(close):
            close()
    where = f"{key}.agent_model_name ({spec}): the recipe it wrote"
    recipe = reply_recipe(choices[0].text, where)
    try:
        client.validate(recipe)
    except RftError as exc:
        raise RftError(f"{where}: {str(exc).split(': ', 1)[-1]}") from exc
    return recipe


__all__ = ["agent_kind", "build_agent", "reply_recipe", "written_recipe"]
