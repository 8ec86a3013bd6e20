"""Answering the endpoint's API calls: a ``chat.completion`` (or its stream's chunks) from
a request body, through a workflow's view of the model; the served model's listing."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rft.endpoint.openai_protocol import (
    BadRequest,
    ChatRequest,
    RequestLimits,
    completion_response,
    parse_chat_request,
    stream_chunks,
)
from rft.engines.call_batching import sampling_args
from rft.engines.engine import Completion
from rft.engines.reply_parsing import AssistantReply, ReplyParser
from rft.experience import Experience

Recorder = Callable[[dict[str, Any], list[Experience]], None]
"""Called with a ``chat.completion`` object and its choices' experiences before it is
answered (serve mode records them; it may add fields to the object)."""

if TYPE_CHECKING:
    from rft.rollout.model_wrapper import ModelWrapper


def models_listing(view: ModelWrapper) -> dict[str, Any]:
    """``GET /v1/models``: the served model."""
    return {"object": "list", "data": [{"id": view.name, "object": "model",
                                        "created": 0, "owned_by": "rft"}]}


def chat_completion(view: ModelWrapper, raw: bytes, *, reply_parser: ReplyParser,
                    served_names: tuple[str, ...], max_n: int, record: Recorder | None = None
                    ) -> dict[str, Any] | list[dict[str, Any]]:
    """A ``chat.completion``, or its chunks when the request streams; ``record`` gets the
    completion and its experiences first."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise BadRequest("request body is not valid JSON: nested too deeply") from exc
    engine = view.engine
    limits = RequestLimits(max_n=max_n,
                           max_tokens=getattr(engine, "max_response_tokens", None))
    request = parse_chat_request(body, served_names, reply_parser, limits)
    sampling = dataclasses.replace(sampling_args(view.defaults, request.sampling),
                                   logprobs=True)  # the history needs them
    sampling.check()
    check_prompt(view, request)

    def parse(completion: Completion) -> AssistantReply:
        return reply_parser.parse(completion.text, call_tools=request.call_tools,
                                  parallel=request.parallel_tool_calls)

    results = view.chat_completions([request.messages], request.n, sampling,
                                    tools=request.tools, parse=parse)
    completions = results.completions[0]
    truncated = next((c for c in completions if c.prompt_truncated), None)
    if truncated is not None:  # a continuation longer than its canonical rendering
        raise prompt_too_long(None, view)
    replies = results.replies[0]
    assert replies is not None
    response = completion_response(view, request, completions, replies,
                                   with_reasoning=reply_parser.reasoning is not None)
    if record is not None:
        record(response, results.experiences[0])
    return stream_chunks(response, request) if request.stream else response


def check_prompt(view: ModelWrapper, request: ChatRequest) -> None:
    """A prompt over the model's limit is refused, never truncated."""
    limit_of = getattr(view.engine, "prompt_limit", None)
    limit = limit_of() if limit_of is not None else None
    if limit is None:
        return
    ids = view.engine.apply_chat_template(request.messages, tools=request.tools)
    if len(ids) > limit:
        raise prompt_too_long(len(ids), view)


def prompt_too_long(tokens: int | None, view: ModelWrapper) -> BadRequest:
    """The ``400`` of a prompt over the model's limit (``tokens``: its length, when known
    before the engine call)."""
    engine = view.engine
    limit = engine.prompt_limit()
    size = f"is {tokens} tokens" if tokens is not None else "(continuing recorded turns) is"
    return BadRequest(f"messages: the prompt {size}, over this model's prompt "
                      f"limit of {limit} (max_prompt_tokens={engine.max_prompt_tokens}, "
                      f"max_model_len={engine.effective_max_model_len()}); the OpenAI API "
                      "does not truncate prompts", "messages")

