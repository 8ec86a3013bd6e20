"""rft-plugin-data-juicer: the Data-Juicer server (real library, real HTTP on 127.0.0.1),
its managed process (restart once, nothing left behind), the data_juicer experience and
task operators, and the one-line errors of bad input."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch

from rft.config.convert import to_dataclass
from rft.config.schema import DataJuicerServiceConfig
from rft.data.task_operator import STATS_KEY
from rft.errors import RftError
from rft.experience import EID, Experience
from rft.plugins import PluginRegistry
from rft_plugin_data_juicer.client import DataJuicerClient
from rft.buffer.operators import ExperienceOperator
from rft.hookspecs import hookimpl
from rft.testing.runs import read_metrics, run_tiny, write_taskset
from rft_plugin_data_juicer.process import (URL_VARIABLE, ManagedServer, answers, free_port,
                                            owned)
from rft_plugin_data_juicer.recipe import load_recipe
from rft_plugin_data_juicer.service import DataJuicerService

RECIPE = "process:\n  - text_length_filter:\n      min_len: 6\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    managed = ManagedServer(free_port(), str(tmp_path_factory.mktemp("dj") / "server.log"))
    managed.start()
    yield managed
    managed.stop()


@pytest.fixture
def on_server(server: ManagedServer, monkeypatch: pytest.MonkeyPatch) -> ManagedServer:
    """The run's Data-Juicer server is ``server`` (as ``service.data_juicer`` sets it)."""
    monkeypatch.setenv(URL_VARIABLE, server.url)
    return server


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry.create()


def gone(pid: int) -> bool:
    """No process ``pid`` (a zombie counts as running: it was not reaped)."""
    try:
        psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return False


def exp(task: int, text: str, reward: float = 1.0) -> Experience:
    return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=reward,
                      eid=EID(batch=1, task=task, run=0), response_text=text)


# ---- recipes: one line per bad input ---------------------------------------------------


def test_a_recipe_that_does_not_parse_is_one_line_naming_the_file(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("process:\n  - text_length_filter: {min_len: 5\n")
    with pytest.raises(RftError) as caught:
        load_recipe(str(path), [], "ops[0]")
    line = str(caught.value)
    assert line.startswith(f"ops[0].config_path ({path}): the Data-Juicer recipe does not "
                           "parse as YAML") and "\n" not in line


def test_a_recipe_without_process_or_file_is_one_line(tmp_path: Path):
    (tmp_path / "r.yaml").write_text("project_name: x\n")
    with pytest.raises(RftError, match=r"^ops\[0\]\.config_path \(.*\): a Data-Juicer "
                                       r"recipe needs a non-empty 'process' list"):
        load_recipe(str(tmp_path / "r.yaml"), [], "ops[0]")
    with pytest.raises(RftError, match=r"^ops\[0\]\.config_path: cannot read"):
        load_recipe(str(tmp_path / "missing.yaml"), [], "ops[0]")
    assert load_recipe(None, ["clean_email_mapper"], "k") == [{"clean_email_mapper": {}}]


def test_an_operator_data_juicer_does_not_know_is_one_line(on_server: ManagedServer):
    client = DataJuicerClient("data_processor.experience_pipeline.operators[0]")
    with pytest.raises(RftError) as caught:
        client.validate([{"text_length_filter": {}}, {"text_lenght_filter": {}}])
    assert str(caught.value) == (
        "data_processor.experience_pipeline.operators[0]: process[1]: unknown Data-Juicer "
        "operator 'text_lenght_filter'; did you mean text_length_filter, text_action_filter, "
        "in_context_influence_filter?")


def test_a_server_that_does_not_answer_is_one_line(tmp_path: Path):
    port = free_port()  # nothing listens there
    service = DataJuicerService(DataJuicerServiceConfig(server_url=f"http://127.0.0.1:{port}"), str(tmp_path))
    with pytest.raises(RftError) as caught:
        service.start()
    assert str(caught.value) == (
        f"service.data_juicer.server_url: no Data-Juicer server answers at "
        f"http://127.0.0.1:{port} (GET /health); start one or set auto_start: true")
    client = DataJuicerClient("ops[0]", f"http://127.0.0.1:{port}")
    with pytest.raises(RftError, match=r"^service\.data_juicer: the Data-Juicer server at "
                                       r"http://127\.0\.0\.1:\d+ does not answer \(ConnectError\); "
                                       r"ops\[0\] cannot run$"):
        client.process([{"text_length_filter": {}}], [{"text": "x"}])


# ---- the operators ---------------------------------------------------------------------


def test_experience_operator_stats_feed_reward_shaping(on_server, registry, tmp_path: Path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    problems: list[str] = []
    cls = registry.get("experience_operator", "data_juicer")
    operator = cls(to_dataclass(cls.Args, {"config_path": str(recipe)}, "k", problems))
    shaping_cls = registry.get("experience_operator", "reward_shaping_mapper")
    shaping = shaping_cls(to_dataclass(shaping_cls.Args, {"reward_shaping_configs": [
        {"stats_key": "text_len", "op_type": "ADD", "weight": 0.1}]}, "k", problems))
    assert problems == []
    batch = [exp(0, "short"), exp(1, "long enough answer", 0.0), exp(2, "answer 42", 1.0)]
    kept, metrics = operator.process(batch)
    assert [e.eid.task for e in kept] == [1, 2]  # "short" (5 chars) is under min_len 6
    assert [e.info["text_len"] for e in kept] == [18.0, 9.0]
    assert metrics == {"kept": 2.0, "dropped": 1.0, "text_len/mean": 13.5}
    shaped, _ = shaping.process(kept)
    assert [e.reward for e in shaped] == pytest.approx([1.8, 1.9])


def test_task_operator_filters_rows_and_keeps_stats(on_server, registry):
    cls = registry.get("task_operator", "data_juicer")
    problems: list[str] = []
    operator = cls(to_dataclass(cls.Args, {"process": [
        {"text_length_filter": {"min_len": 6, "text_key": "question"}}]}, "k", problems))
    rows = [{"question": "2+2=?", "answer": "4"},
            {"question": "What is 3 times 7?", "answer": "21", STATS_KEY: {"difficulty": 0.5}}]
    out = operator.process(rows)
    assert out == [{"question": "What is 3 times 7?", "answer": "21",
                    STATS_KEY: {"difficulty": 0.5, "text_len": 18.0}}]


class ScriptedChatServer:
    """A real OpenAI-compatible HTTP server on 127.0.0.1 (``GET /v1/models``, ``POST
    /v1/chat/completions``) whose one model always answers ``reply`` and keeps the prompts
    it was sent. The model is scripted, not a language model: no model that runs here
    writes a Data-Juicer recipe, and this tests everything around that reply."""

    def __init__(self, reply: str) -> None:
        import threading

        import uvicorn
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        self.prompts: list[str] = []

        async def models(request: Request) -> JSONResponse:
            return JSONResponse({"object": "list", "data": [
                {"id": "recipe-writer", "object": "model", "created": 0, "owned_by": "test"}]})

        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            self.prompts.append(body["messages"][-1]["content"])
            return JSONResponse({
                "id": "c0", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        app = Starlette(routes=[Route("/v1/models", models),
                                Route("/v1/chat/completions", chat, methods=["POST"])])
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the scripted chat server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def test_an_agent_that_writes_a_recipe_gets_it_run_over_the_rows(on_server, registry):
    """``dj_process_desc`` + ``agent_model_name`` (an OpenAI-compatible URL, the
    ``external`` engine): the agent is asked with the description, the row fields and
    Data-Juicer's operator names; the recipe it writes is checked by the server and run."""
    reply = ("Here is the recipe:\n```yaml\nprocess:\n  - text_length_filter:\n"
             "      min_len: 6\n      text_key: question\n```\n")
    agent = ScriptedChatServer(reply)
    try:
        cls = registry.get("task_operator", "data_juicer")
        problems: list[str] = []
        operator = cls(to_dataclass(cls.Args, {
            "dj_process_desc": "Keep questions of 6 characters or more.",
            "agent_model_name": agent.url}, "k", problems))
        rows = [{"question": "2+2=?", "answer": "4"},
                {"question": "What is 3 times 7?", "answer": "21"}]
        out = operator.process(rows)
    finally:
        agent.stop()
    assert problems == []
    assert [row["question"] for row in out] == ["What is 3 times 7?"]
    assert out[0][STATS_KEY]["text_len"] == 18.0
    [prompt] = agent.prompts
    assert "Keep questions of 6 characters or more." in prompt
    assert "fields: answer, question." in prompt and "text_length_filter" in prompt
    misspelt = ScriptedChatServer("process:\n  - text_lenght_filter: {}\n")
    try:
        wrong = cls(to_dataclass(cls.Args, {"dj_process_desc": "x",
                                            "agent_model_name": misspelt.url}, "k", problems))
        with pytest.raises(RftError) as caught:
            wrong.process(rows)
    finally:
        misspelt.stop()
    line = str(caught.value)
    assert "\n" not in line and "agent_model_name" in line and "text_lenght_filter" in line


# ---- the service process: restart once, nothing left behind ------------------------------


def test_a_killed_run_leaves_no_server_behind(tmp_path: Path):
    """The run's process is SIGKILLed (no clean-up): its server exits by itself."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""\
        import sys, time
        from rft_plugin_data_juicer.service import DataJuicerService
        from rft.config.schema import DataJuicerServiceConfig
        service = DataJuicerService(DataJuicerServiceConfig(auto_start=True), {str(tmp_path)!r})
        url = service.start()
        print(service.server.pid, flush=True)
        time.sleep(600)
        """))
    run = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(run.stdout.readline())
        assert psutil.pid_exists(server_pid)
        run.kill()
        run.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not gone(server_pid):
            time.sleep(0.1)
        assert gone(server_pid)
    finally:
        run.kill()
        run.wait()


class KillServer:
    """An experience operator (a real plugin, listed before data_juicer) that SIGKILLs the
    run's Data-Juicer server each time a step's experiences reach it: the server dies
    mid-pipeline, between the explorer and the data_juicer operator."""

    killed: list[int] = []

    class Operator(ExperienceOperator):
        def process(self, experiences):
            server = owned(os.environ[URL_VARIABLE])
            assert server is not None and server.pid is not None
            KillServer.killed.append(server.pid)
            os.killpg(server.pid, signal.SIGKILL)
            return experiences, {}

    @hookimpl
    def register_experience_operators(self):
        return {"kill_dj_server": KillServer.Operator}


@pytest.mark.slow
def test_a_run_whose_server_dies_mid_pipeline_restarts_it_once_then_stops_in_one_line(
        tmp_path, tiny_model_dir):
    """Step 1: the server is killed, restarted, the step goes on. Step 2: killed again, the
    run stops with one line; no server is left, and step 1's results are kept."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    with pytest.raises(RftError) as caught:
        run_tiny(tiny_model_dir, write_taskset(tmp_path / "tasks.jsonl", 4), tmp_path, {
            "service": {"data_juicer": {"auto_start": True}},
            "data_processor": {"experience_pipeline": {"operators": [
                {"name": "kill_dj_server"},
                {"name": "data_juicer", "args": {"config_path": str(recipe)}}]}}},
            plugins=[KillServer()])
    assert re.fullmatch(r"service\.data_juicer: the Data-Juicer server at http://127\.0\.0\.1:"
                        r"\d+ does not answer \(\w+Error\); data_processor\."
                        r"experience_pipeline\.operators\[data_juicer\] cannot run",
                        str(caught.value))
    assert len(KillServer.killed) == 2 and KillServer.killed[0] != KillServer.killed[1]
    assert all(gone(pid) for pid in KillServer.killed)
    port = re.search(r":(\d+) does not answer", str(caught.value)).group(1)
    assert not [p for p in psutil.Process().children(recursive=True)  # the run's servers
                if f"rft_plugin_data_juicer.server --port {port} " in " ".join(p.cmdline())]
    [step1] = read_metrics(tmp_path / "checkpoints" / "rft_run" / "run")
    assert step1["pipeline/data_juicer/kept"] + step1["pipeline/data_juicer/dropped"] == 4.0


def test_task_pipeline_config_path_runs_the_recipe_through_the_service(on_server, tmp_path,
                                                                        tiny_model_dir):
    """Trinity-RFT's ``task_pipeline.config_path``: one data_juicer task operator; the
    processed taskset is what the explorer reads."""
    import json

    import yaml

    from rft.config import load_config
    from rft.data.stage_tasks import prepare_tasks
    from rft.testing.runs import apply_overrides, tiny_run_config

    tasks = tmp_path / "raw.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in [
        {"question": "1+1=", "answer": "2"}, {"question": "What is 12 + 30?", "answer": "42"}]))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("process:\n  - text_length_filter:\n      min_len: 6\n"
                      "      text_key: question\n")
    config = apply_overrides(tiny_run_config(tiny_model_dir, tasks, tmp_path), {
        "service": {"data_juicer": {"server_url": on_server.url}},
        "data_processor": {"task_pipeline": {
            "config_path": str(recipe), "inputs": [str(tasks)],
            "operators": [{"name": "exact_deduplicator"}]}}})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load_config(path)
    assert "data_processor.task_pipeline.operators: ignored: config_path " \
           f"({str(recipe)!r}) is the pipeline's Data-Juicer recipe" in loaded.warnings
    plan = loaded.stages[0].plan
    assert [s.name for s in plan.task_operators] == ["data_juicer"]
    report = prepare_tasks(plan)
    assert report is not None and (report.rows_in, report.rows_out) == (2, 1)
    out = plan.config.buffer.explorer_input.taskset.path
    rows = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert [r["question"] for r in rows] == ["What is 12 + 30?"]
    # an edited recipe is run again, not answered from the cache
    recipe.write_text("process:\n  - text_length_filter:\n      min_len: 1\n"
                      "      text_key: question\n")
    report = prepare_tasks(plan)
    assert report is not None and report.rows_out == 2
    assert not any(count.cached for count in report.counts)


# ---- the agent-written recipe (dj_process_desc) ------------------------------------------


def test_an_agent_reply_is_read_as_a_recipe():
    from rft_plugin_data_juicer.agent import reply_recipe

    fenced = "Here it is:\n```yaml\nprocess:\n  - text_length_filter:\n      min_len: 3\n```\n"
    assert reply_recipe(fenced, "w") == [{"text_length_filter": {"min_len": 3}}]
    assert reply_recipe("process: [clean_email_mapper]", "w") == [{"clean_email_mapper": {}}]
    with pytest.raises(RftError, match=r"^w: a Data-Juicer recipe is a mapping with a "
                                       r"'process' list, got str$"):
        reply_recipe("I cannot help with that.", "w")


def test_an_agent_that_writes_no_recipe_is_one_line(on_server, registry, tiny_model_dir):
    """The tiny random model as the agent (the hf engine on a local folder): its reply is
    no recipe, and the task pipeline stops before any row is processed."""
    cls = registry.get("task_operator", "data_juicer")
    problems: list[str] = []
    operator = cls(to_dataclass(cls.Args, {
        "dj_process_desc": "Keep questions longer than 5 characters.",
        "agent_model_name": str(tiny_model_dir), "agent_model_config": {"max_tokens": 12}},
        "k", problems))
    with pytest.raises(RftError) as caught:
        operator.process([{"question": "What is 3 times 7?", "answer": "21"}])
    line = str(caught.value)
    assert line.startswith(f"data_processor.task_pipeline.operators[data_juicer]."
                           f"agent_model_name ({tiny_model_dir}): the recipe it wrote")
    assert "\n" not in line
    nowhere = cls(to_dataclass(cls.Args, {"dj_process_desc": "x", "agent_model_name": "gpt-x"},
                               "k", problems))
    with pytest.raises(RftError, match=r"agent_model_name: 'gpt-x' is neither an auxiliary "
                                       r"model of the run"):
        nowhere.process([{"question": "q"}])
    assert problems == []
