"""The OpenAI endpoint under faults: many concurrent clients, bad and oversized requests,
an API key, clients that go away, a process stopped by a signal. The real server (uvicorn)
and the tiny model on the ``hf`` engine (float32); every connection is to 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest
import torch
from fixtures_models import arithmetic_tasks
from rft.config import load_config
from rft.errors import ConfigError, RftError
from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout.model_wrapper import ModelWrapper
from rft.endpoint.openai_server import BACKLOG, OpenAIServer
from rft.endpoint.settings import (PROMPT_BYTES_OVERHEAD, PROMPT_BYTES_PER_TOKEN,
                                   EndpointSettings, prompt_byte_limit)
from rft.hosts import why_not_loopback
from test_embedded_run import write_config

QUESTION = [{"role": "user", "content": "Tina has 3 apples. How many?"}]
KEY = "test-key-0123456789"
RFT = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "rft"


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> HFEngine:
    torch.set_num_threads(1)
    return HFEngine(str(tiny_model_dir), dtype="float32", max_model_len=256,
                    max_prompt_tokens=64, max_response_tokens=6)


@pytest.fixture(scope="module")
def served(engine):
    root = ModelWrapper(engine, SamplingArgs(max_tokens=6), name="tiny")
    root.serve_openai_api(settings=EndpointSettings(max_n=8, max_request_bytes=64 * 1024))
    yield root
    root.close()


@pytest.fixture(scope="module")
def keyed(engine):
    root = ModelWrapper(engine, SamplingArgs(max_tokens=6), name="tiny")
    root.serve_openai_api(settings=EndpointSettings(api_key=KEY))
    yield root
    root.close()


def request(address: str, path: str, body: bytes | str | None = None, *,
            method: str = "POST", headers: dict[str, str] | None = None,
            timeout: float = 60) -> tuple[int, dict]:
    """One request on a connection of its own: ``(status, JSON answer)``."""
    url = urlsplit(address)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        data = body.encode() if isinstance(body, str) else body
        connection.request(method, url.path + path, body=data, headers={
            "Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def chat(address: str, body: dict | str, **kwargs) -> tuple[int, dict]:
    data = body if isinstance(body, str) else json.dumps(body)
    return request(address, "/v1/chat/completions", data, **kwargs)


# ---- many clients at once ----------------------------------------------------------------


def test_200_concurrent_clients_are_all_answered(served):
    """200 clients connect at the same moment, each on its own connection: every one is
    accepted (no reset, no refusal) and answered 200; the latencies are printed."""
    clients = 200
    start = threading.Barrier(clients)
    results: list[tuple[int, float] | BaseException] = [None] * clients  # type: ignore
    body = json.dumps({"messages": QUESTION, "max_tokens": 1, "temperature": 1.0})

    def client(i: int) -> None:
        try:
            start.wait(timeout=30)
            began = time.monotonic()
            status, _ = chat(served.api_address, body, timeout=120)
            results[i] = (status, time.monotonic() - began)
        except BaseException as exc:  # noqa: BLE001 - counted below
            results[i] = exc

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=150)
    wall = time.monotonic() - began
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} connection errors, e.g. {errors[0]!r}"
    statuses = [status for status, _ in results]  # type: ignore[misc]
    assert statuses == [200] * clients
    latencies = sorted(seconds for _, seconds in results)  # type: ignore[misc]
    print(f"\n{clients} concurrent clients: 0 errors, all 200; latency p50 "
          f"{latencies[clients // 2]:.2f} s, p95 {latencies[int(clients * 0.95)]:.2f} s, "
          f"max {latencies[-1]:.2f} s; wall {wall:.1f} s")


def test_listen_backlog_is_large():
    assert BACKLOG >= 1024


# ---- bad requests: 400 / 413 naming the field --------------------------------------------


LONG = [{"role": "user", "content": "apples " * 200}]


@pytest.mark.parametrize("body, param, message", [
    ({"messages": QUESTION, "n": 20000}, "n", "n must be <= 8 (openai_api_max_n), got 20000"),
    ({"messages": QUESTION, "seed": 2**70}, "seed", "seed must be in [0, 2**63)"),
    ({"messages": QUESTION, "seed": -1}, "seed", "seed must be in [0, 2**63), got -1"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "temperature",
     "temperature must be a finite number, got nan"),
    ('{"messages": [{"role": "user", "content": "hi"}], "temperature": Infinity}',
     "temperature", "temperature must be a finite number, got inf"),
    ('{"messages": [{"role": "user", "content": "hi"}], "top_p": -Infinity}', "top_p",
     "top_p must be a finite number"),
    ({"messages": QUESTION, "temperature": 10**400}, "temperature",
     "temperature must be a finite number"),
    ({"messages": QUESTION, "top_p": 1.5}, "top_p", "top_p must be in (0, 1], got 1.5"),
    ({"messages": QUESTION, "max_tokens": 7}, "max_tokens",
     "max_tokens must be <= 6 (this model's max_response_tokens), got 7"),
    ({"messages": QUESTION, "max_completion_tokens": 10**30}, "max_completion_tokens",
     "max_completion_tokens must be <= 6"),
    ({"messages": QUESTION, "min_tokens": 9}, "min_tokens", "min_tokens must be <= max_tokens"),
    ({"messages": QUESTION, "top_k": 2**40}, "top_k", "top_k must be -1 (off) or in"),
    ({"messages": QUESTION, "stop_token_ids": [2**70]}, "stop_token_ids",
     "stop_token_ids must be a list of token ids"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role",
     "messages[0].role must be one of system, user, assistant, tool; got 'robot'"),
    ({"messages": [{"role": "developer", "content": "hi"}]}, "messages[0].role",
     "must be one of system, user, assistant, tool"),
    ({"messages": QUESTION, "response_format": {"type": "json_object"}}, "response_format",
     "response_format is not supported"),
    ({"messages": QUESTION, "logit_bias": {"1": 5}}, "logit_bias", "logit_bias is not supported"),
    ({"messages": LONG}, "messages", "the OpenAI API does not truncate prompts"),
    ('{"messages": ' + "[" * 5000 + "]" * 5000 + "}", None, "nested too deeply"),
    ('{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages[0].content",
     "messages[0].content: not valid Unicode text (a lone UTF-16 surrogate"),
    ('{"messages": [{"role": "user", "content": [{"type": "text", "text": "a\\udfffb"}]}]}',
     "messages[0].content[0].text", "not valid Unicode text"),
    ('{"messages": [{"role": "user", "content": "hi"}], "stop": ["x", "\\ud83d"]}', "stop[1]",
     "stop[1]: not valid Unicode text"),
])
def test_bad_requests_get_400_naming_the_field(served, body, param, message):
    status, answer = chat(served.api_address, body)
    assert status == 400, answer
    assert message in answer["error"]["message"]
    assert answer["error"]["param"] == param
    assert answer["error"]["type"] == "invalid_request_error"


def test_a_full_surrogate_pair_is_text(served):
    """The escape of a character beyond the BMP (a pair) is text like any other."""
    status, answer = chat(served.api_address, '{"messages": [{"role": "user", "content": '
                          '"\\ud83d\\ude00 3+1="}], "max_tokens": 1}')
    assert status == 200, answer


def test_long_prompt_is_refused_not_truncated(served, engine):
    prompt = engine.apply_chat_template(LONG)
    assert len(prompt) > engine.prompt_limit() == 64
    status, answer = chat(served.api_address, {"messages": LONG})
    assert status == 400
    assert (f"the prompt is {len(prompt)} tokens, over this model's prompt limit of 64"
            in answer["error"]["message"])


def test_unknown_fields_are_ignored_as_vllm_does(served, caplog):
    caplog.set_level(logging.WARNING, logger="rft.openai")
    body = {"messages": QUESTION, "max_tokens": 1, "frobnicate": 1, "best_of": 2}
    for _ in range(2):
        status, answer = chat(served.api_address, body)
        assert status == 200 and answer["object"] == "chat.completion"
    warned = [r.getMessage() for r in caplog.records if "unknown request field" in r.getMessage()]
    assert len(warned) <= 1  # once per field name (and per process)


def test_oversized_bodies_get_413(served):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 70_000}]})
    status, answer = chat(served.api_address, big)
    assert status == 413 and "request body over 65536 bytes" in answer["error"]["message"]
    # the same without a Content-Length (chunked): counted while it arrives
    host, port = served.api_address.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        chunks = (big[i:i + 8192].encode() for i in range(0, len(big), 8192))
        connection.request("POST", "/v1/chat/completions", body=chunks,
                           headers={"Content-Type": "application/json"},
                           encode_chunked=True)
        response = connection.getresponse()
        assert response.status == 413
    finally:
        connection.close()
    assert chat(served.api_address, {"messages": QUESTION, "max_tokens": 1})[0] == 200


@pytest.fixture(scope="module")
def roomy(engine):
    """The endpoint with the default body limit (32 MiB) and short read timeouts."""
    root = ModelWrapper(engine, SamplingArgs(max_tokens=6), name="tiny")
    root.serve_openai_api(settings=EndpointSettings(read_timeout_s=1.0, keep_alive_s=1.0))
    yield root
    root.close()


def test_prompt_byte_limit_follows_the_prompt_limit():
    assert prompt_byte_limit(None) is None
    assert prompt_byte_limit(64) == 64 * PROMPT_BYTES_PER_TOKEN + PROMPT_BYTES_OVERHEAD
    assert PROMPT_BYTES_PER_TOKEN >= 12  # a surrogate pair spelt as JSON escapes


def test_a_10_mb_prompt_is_refused_on_its_size_before_tokenising(roomy, engine):
    """A 10 MB prompt under the 32 MiB body limit: 400 on ``messages`` from the byte count
    alone, in well under a second (tokenising it took 11-20 s here), with or without a
    Content-Length; the connection stays usable for the next request."""
    bound = prompt_byte_limit(engine.prompt_limit())
    big = json.dumps({"messages": [{"role": "user", "content": "apples " * 1_500_000}]})
    assert bound < len(big) < EndpointSettings().max_request_bytes
    began = time.monotonic()
    status, answer = chat(roomy.api_address, big)
    took = time.monotonic() - began
    assert status == 400, answer
    assert answer["error"]["param"] == "messages"
    assert (f"messages: the request body is over {bound} bytes, more than any prompt within "
            "this model's prompt limit of 64 tokens can take") in answer["error"]["message"]
    assert took < 3.0, took
    print(f"\n10 MB prompt refused in {took:.3f} s")
    host, port = roomy.api_address.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:  # chunked, no Content-Length: counted while it arrives, then the next request
        chunks = (big[i:i + 65536].encode() for i in range(0, len(big), 65536))
        connection.request("POST", "/v1/chat/completions", body=chunks,
                           headers={"Content-Type": "application/json"}, encode_chunked=True)
        response = connection.getresponse()
        assert response.status == 400
        assert json.loads(response.read())["error"]["param"] == "messages"
        connection.request("POST", "/v1/chat/completions", body=json.dumps(
            {"messages": QUESTION, "max_tokens": 1}), headers={"Content-Type": "application/json"})
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bytes, float | None]:
    """What the server sent on ``sock`` and after how many seconds it closed it (``None``:
    still open after ``seconds``)."""
    began = time.monotonic()
    received = b""
    while True:
        left = seconds - (time.monotonic() - began)
        if left <= 0:
            return received, None
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return received, None
        except ConnectionResetError:
            return received, time.monotonic() - began
        if not data:
            return received, time.monotonic() - began
        received += data


def test_stalled_and_short_body_connections_are_closed(roomy):
    """20 connections that stall (nothing sent, half the headers, a body shorter than its
    Content-Length) and one idle after its answer: the server closes each within its read
    timeout (1 s here) plus a margin; a short body gets a 408 first. Only 127.0.0.1."""
    host, port = roomy.api_address.removeprefix("http://").rsplit(":", 1)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    kinds = ["nothing"] * 7 + ["half headers"] * 7 + ["short body"] * 6
    sockets = []
    try:
        for kind in kinds:
            sock = socket.create_connection((host, int(port)), timeout=5)
            sockets.append(sock)
            if kind == "half headers":
                sock.sendall(head)
            elif kind == "short body":
                sock.sendall(head + b"Content-Length: 100\r\n\r\n{\"messages\": ")
        idle = socket.create_connection((host, int(port)), timeout=5)
        sockets.append(idle)
        body = json.dumps({"messages": QUESTION, "max_tokens": 1}).encode()
        idle.sendall(head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        began = time.monotonic()
        outcomes = [_closed_within(sock, 6.0) for sock in sockets]
        waited = time.monotonic() - began
    finally:
        for sock in sockets:
            sock.close()
    for kind, (received, closed) in zip([*kinds, "idle"], outcomes, strict=True):
        assert closed is not None, f"{kind}: still open after 6 s"
        if kind == "short body":
            assert received.startswith(b"HTTP/1.1 408 "), received[:200]
            assert b"request body incomplete after 1 s (13 bytes of 100 arrived)" in received
        elif kind == "idle":
            assert received.startswith(b"HTTP/1.1 200 "), received[:200]
        else:
            assert received == b"", received[:200]
    assert waited < 1.0 + 3.0, waited  # all closed by timeout + margin (the longest wait)
    print(f"\n21 stalled/idle connections all closed within {waited:.2f} s")
    assert chat(roomy.api_address, {"messages": QUESTION, "max_tokens": 1})[0] == 200


# ---- the API key ---------------------------------------------------------------------------


def test_api_key_is_enforced(keyed):
    address = keyed.api_address
    body = {"messages": QUESTION, "max_tokens": 1}
    status, answer = chat(address, body)
    assert status == 401 and answer["error"]["code"] == "invalid_api_key"
    assert "missing API key" in answer["error"]["message"]
    assert chat(address, body, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert chat(address, body, headers={"Authorization": KEY})[0] == 401
    assert request(address, "/v1/models", method="GET")[0] == 401
    assert chat(address, body, headers={"Authorization": f"Bearer {KEY}"})[0] == 200
    assert request(address, "/health", method="GET") == (200, {"status": "ok"})
    view = keyed.for_workflow(enable_history=True)  # a session: key needed there too
    assert chat(view.api_address, body)[0] == 401
    client = view.get_openai_client()  # sends the key
    assert client.api_key == KEY
    reply = client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=1)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert len(view.extract_experience_from_history()) == 1
    anonymous = openai.OpenAI(base_url=f"{address}/v1", api_key="EMPTY", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        anonymous.models.list()


def test_serving_beyond_loopback_needs_a_key(served, engine):
    for host in ("0.0.0.0", "::", "192.0.2.1", "", "127.0.0.1.invalid", "127.evil.invalid"):
        with pytest.raises(RftError, match="refusing to serve on .* without an API key"):
            OpenAIServer(served, host=host).start()  # refused before binding anything
    with pytest.raises(RftError, match="environment variable RFT_TEST_NO_SUCH_KEY is not set"):
        EndpointSettings.of(type("M", (), {"openai_api_key_env": "RFT_TEST_NO_SUCH_KEY",
                                           "openai_api_max_n": 1,
                                           "openai_api_max_request_bytes": 1})())


def _resolver(*addresses: str, fails: bool = False):
    """A stand-in for ``socket.getaddrinfo`` answering what a DNS server would (no DNS here)."""
    def resolve(host, port, **kwargs):
        if fails:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, 0)) for a in addresses]
    return resolve


def test_loopback_is_decided_on_addresses_not_prefixes():
    """Literals in 127.0.0.0/8 and ::1, and ``localhost``, are loopback; a name is loopback
    only when everything it resolves to is: ``127.0.0.1.nip.io`` (public DNS answering
    127.0.0.1) is, ``127.0.0.1.evil.example`` answering a public address is not, and a
    name that cannot be resolved (offline) is not, saying so."""
    for host in ("127.0.0.1", "127.1.2.3", "::1", "localhost"):
        assert why_not_loopback(host, _resolver(fails=True)) is None
    for host in ("0.0.0.0", "::", "192.0.2.1", "128.0.0.1"):
        assert why_not_loopback(host) == f"{host!r} is not a loopback address"
    assert why_not_loopback("127.0.0.1.nip.io", _resolver("127.0.0.1")) is None
    assert why_not_loopback("127.0.0.1.evil.example", _resolver("127.0.0.1", "203.0.113.5")) == \
        "'127.0.0.1.evil.example' resolves to 203.0.113.5"
    offline = why_not_loopback("127.0.0.1.nip.io", _resolver(fails=True))
    assert offline is not None and offline.startswith(
        "'127.0.0.1.nip.io' could not be resolved here (Name or service not known)")
    real = why_not_loopback("127.0.0.1.invalid")  # RFC 6761: never resolves
    assert real is not None and "could not be resolved here" in real


@pytest.mark.parametrize("changes, message", [
    ({"explorer__rollout_model": {"engine_type": "hf", "enable_openai_api": True,
                                  "openai_api_host": "0.0.0.0"}},
     ("explorer.rollout_model.openai_api_key_env: must name the environment variable holding "
      "an API key: openai_api_host '0.0.0.0' serves the model beyond this machine")),
    ({"explorer__rollout_model": {"engine_type": "hf", "enable_openai_api": True,
                                  "openai_api_host": "127.0.0.1.invalid"}},
     ("explorer.rollout_model.openai_api_key_env: must name the environment variable holding "
      "an API key: openai_api_host '127.0.0.1.invalid' serves the model beyond this machine "
      "('127.0.0.1.invalid' could not be resolved here")),
    ({"explorer__rollout_model": {"engine_type": "hf", "openai_api_max_n": 0}},
     "explorer.rollout_model.openai_api_max_n: must be >= 1, got 0"),
])
def test_config_refuses_an_open_endpoint(tmp_path, tiny_model_dir, changes, message):
    tasks = arithmetic_tasks(tmp_path, 4)
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, tiny_model_dir, tasks, **changes))
    assert message in str(caught.value)


def test_config_with_a_key_may_serve_beyond_loopback(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("RFT_TEST_OPENAI_KEY", KEY)
    tasks = arithmetic_tasks(tmp_path, 4)
    loaded = load_config(write_config(tmp_path, tiny_model_dir, tasks, explorer__rollout_model={
        "engine_type": "hf", "enable_openai_api": True, "openai_api_host": "0.0.0.0",
        "openai_api_key_env": "RFT_TEST_OPENAI_KEY"}))
    settings = EndpointSettings.of(loaded.stages[0].config.explorer.rollout_model)
    assert settings.api_key == KEY and settings.max_n == 64


# ---- clients that go away ------------------------------------------------------------------


@pytest.fixture
def slow_engine(engine, monkeypatch):
    """The engine, each generate call taking at least 1 s (and counted)."""
    calls: list[float] = []
    original = engine.generate

    def slow(*args, **kwargs):
        time.sleep(1.0)
        result = original(*args, **kwargs)
        calls.append(time.monotonic())
        return result

    monkeypatch.setattr(engine, "generate", slow)
    return calls


def test_disconnected_clients_leave_no_traceback(served, slow_engine, caplog, capfd):
    """A client that hangs up while the engine works, and one that hangs up in the middle
    of sending its body: at most a debug line each, the server goes on answering."""
    caplog.set_level(logging.DEBUG)
    host, port = served.api_address.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"messages": QUESTION, "max_tokens": 1}).encode()
    waiting = socket.create_connection((host, int(port)), timeout=10)
    waiting.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    b"application/json\r\nContent-Length: " + str(len(body)).encode()
                    + b"\r\n\r\n" + body)
    time.sleep(0.3)  # the engine call has started
    waiting.close()
    partial = socket.create_connection((host, int(port)), timeout=10)
    partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000"
                    b"\r\n\r\n{\"messages\": ")
    time.sleep(0.2)
    partial.close()
    deadline = time.monotonic() + 10
    while not slow_engine and time.monotonic() < deadline:  # the abandoned call finishes
        time.sleep(0.05)
    assert slow_engine
    assert chat(served.api_address, {"messages": QUESTION, "max_tokens": 1})[0] == 200
    time.sleep(0.2)
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not noisy, [r.getMessage() for r in noisy]
    gone = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert 1 <= len(gone) <= 2 and all(r.levelno == logging.DEBUG for r in gone)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_stop_answers_waiting_requests_and_returns_quickly(engine, slow_engine):
    root = ModelWrapper(engine, SamplingArgs(max_tokens=6), name="tiny")
    root.serve_openai_api()
    address = root.api_address
    answers: list[tuple[int, dict]] = []
    waiter = threading.Thread(target=lambda: answers.append(
        chat(address, {"messages": QUESTION, "max_tokens": 1})))
    waiter.start()
    time.sleep(0.3)
    began = time.monotonic()
    root.close()
    stopped = time.monotonic() - began
    waiter.join(timeout=10)
    assert stopped < 2.0
    assert answers and answers[0][0] == 503
    assert "stopping" in answers[0][1]["error"]["message"]
    with pytest.raises(OSError):
        socket.create_connection(address.removeprefix("http://").rsplit(":", 1), timeout=2)


# ---- a process stopped by a signal ---------------------------------------------------------


SERVE = """
import signal, sys, time, torch
from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout.model_wrapper import ModelWrapper

torch.set_num_threads(1)
engine = HFEngine(sys.argv[1], dtype="float32", max_model_len=256, max_response_tokens=6)
original = engine.generate
engine.generate = lambda *a, **k: (time.sleep(30), original(*a, **k))[1]  # a long call
handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
model = ModelWrapper(engine, SamplingArgs(max_tokens=6), name="tiny")
model.serve_openai_api()
assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
print(model.api_address, flush=True)
try:
    while True:
        time.sleep(0.1)
except KeyboardInterrupt:
    model.close()
    print("serve: interrupted", file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_sigint_stops_a_serving_process_within_seconds(tiny_model_dir):
    """SIGINT to a process serving the endpoint while a request waits on a long engine
    call: the process's own handler runs (uvicorn took none), the endpoint stops at once
    (the waiting client gets 503), the process exits within seconds with its one line."""
    process = subprocess.Popen([sys.executable, "-c", SERVE, str(tiny_model_dir)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        address = process.stdout.readline().strip()
        assert address.startswith("http://127.0.0.1:"), process.stderr.read()
        answers: list[tuple[int, dict]] = []
        waiter = threading.Thread(target=lambda: answers.append(
            chat(address, {"messages": QUESTION, "max_tokens": 1})))
        waiter.start()
        time.sleep(0.5)
        began = time.monotonic()
        process.send_signal(signal.SIGINT)
        process.wait(timeout=10)
        took = time.monotonic() - began
        waiter.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    err = process.stderr.read()
    assert took < 5, err
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "serve: interrupted"
    assert [line for line in err.splitlines() if "interrupt" in line.lower()] == \
        ["serve: interrupted"]
    assert answers and answers[0][0] == 503


@pytest.mark.slow
def test_sigterm_stops_rft_run_serving_the_endpoint(tmp_path, tiny_model_dir):
    """``rft run`` (colocate, the endpoint on) gets SIGTERM mid-run: it unwinds like Ctrl-C
    (endpoint, engine and trainer closed), exits within seconds, with one line and no
    traceback. Needs ``rft.cli`` to turn SIGTERM into the interrupt it already handles."""
    tasks = arithmetic_tasks(tmp_path, 8)
    config = write_config(tmp_path, tiny_model_dir, tasks, buffer__total_steps=1000,
                          trainer__save_interval=0, explorer__rollout_model={
                              "engine_type": "hf", "dtype": "float32",
                              "enable_openai_api": True})
    process = subprocess.Popen([str(RFT), "run", str(config)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines: list[str] = []
    exploring = threading.Event()

    def read() -> None:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("[run_explorer]"):
                exploring.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert exploring.wait(timeout=120), "\n".join(lines[-20:])
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        took = time.monotonic() - began
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(timeout=5)
    own = [line for line in lines if not line.startswith("[run_")]
    assert process.returncode in (130, 143), "\n".join(own[-20:])
    assert took < 10, took
    assert not any("Traceback" in line for line in lines), "\n".join(own[-40:])
    stopped = [line for line in own if "interrupted" in line or "terminated" in line.lower()]
    assert len(stopped) == 1 and stopped[0].startswith("rft: "), own[-20:]
