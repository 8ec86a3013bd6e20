"""Training data read as Trinity-RFT's guide says (issue #17): DPO preference rows in both
forms (``format.chosen_key`` / ``rejected_key``), tools of a row (``format.tools_key``) in
SFT prompts and in the workflow's chat prompts, SFT on every assistant turn
(``format.enable_concatenated_multi_turn``), a dataset's own ``format.chat_template`` and
the model's template precedence, ``mix`` with expert data from an auxiliary buffer, and
the warnings for format fields set where they have no effect.

Everything runs on the tiny Qwen2 model and its ChatML tokenizer (no fake components).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from rft.buffer.chat_render import render
from rft.buffer.errors import TasksetError
from rft.buffer.offline import check_rows, dataset_experiences
from rft.buffer.preference_data import row_to_preference_pair
from rft.buffer.sft_data import DatasetStorage, row_to_sft_experience
from rft.buffer.taskset import TaskPlugins, row_to_task
from rft.chat_template import load_tokenizer, model_chat_template
from rft.config import build_stages
from rft.config.schema import ExperienceBufferConfig, FormatConfig, RftConfig, TasksetConfig
from rft.experience import EID
from rft.plugins import PluginRegistry
from rft.testing.algorithms import minimal_config
from rft.testing.config_edit import replaced
from rft.testing.runs import run_tiny, write_taskset

torch.set_num_threads(1)

TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                    "b": {"type": "integer"}}}}}]
BRACKETS = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}")
"""A template unlike the tiny model's ChatML one."""


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def _text(tokenizer, ids) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _response(tokenizer, experience, trained: bool | None = None) -> str:
    """The response text, or only its tokens with action mask ``trained``."""
    ids = experience.tokens[experience.prompt_length:].tolist()
    mask = experience.action_mask.tolist()
    return _text(tokenizer, [t for t, m in zip(ids, mask, strict=True)
                             if trained is None or m == trained])


# ---- DPO rows -----------------------------------------------------------------------------


def test_plaintext_preference_row_is_a_chosen_rejected_pair(tokenizer):
    fmt = FormatConfig(prompt_type="plaintext", prompt_key="question", system_prompt="Be brief")
    chosen, rejected = row_to_preference_pair(
        {"question": "2+2=", "chosen": "4", "rejected": "5"}, 3, fmt, tokenizer, "d")
    assert (chosen.eid, rejected.eid) == (EID("dpo", 3, 0, suffix="chosen"),
                                          EID("dpo", 3, 0, suffix="rejected"))
    assert chosen.prompt_length == rejected.prompt_length
    assert torch.equal(chosen.prompt_tokens, rejected.prompt_tokens)
    assert _text(tokenizer, chosen.prompt_tokens) == (
        "<|im_start|>system\nBe brief<|im_end|>\n<|im_start|>user\n2+2=<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert (_response(tokenizer, chosen), _response(tokenizer, rejected)) == (
        "4<|im_end|>", "5<|im_end|>")


def test_messages_preference_rows_in_their_three_layouts(tokenizer):
    """Trinity's (prompt in ``messages_key``, replies as assistant-message lists), TRL's
    (prompt list in ``prompt_key``), and TRL's implicit prompt (whole conversations that
    share their first messages); the keys are renamed through the format."""
    user = [{"role": "user", "content": "2+2="}]
    fmt = FormatConfig(messages_key="messages", chosen_key="good", rejected_key="bad")
    rows = [
        {"messages": user, "good": [{"role": "assistant", "content": "4"}],
         "bad": json.dumps([{"role": "assistant", "content": "5"}])},
        {"prompt": user, "good": [{"role": "assistant", "content": "4"}],
         "bad": [{"role": "assistant", "content": "5"}]},
        {"good": user + [{"role": "assistant", "content": "4"}],
         "bad": user + [{"role": "assistant", "content": "5"}]},
    ]
    for index, row in enumerate(rows):
        chosen, rejected = row_to_preference_pair(row, index, fmt, tokenizer, "d")
        assert _text(tokenizer, chosen.prompt_tokens).endswith(
            "<|im_start|>user\n2+2=<|im_end|>\n<|im_start|>assistant\n"), index
        assert (_response(tokenizer, chosen), _response(tokenizer, rejected)) == (
            "4<|im_end|>", "5<|im_end|>"), index


def test_preference_reply_with_a_tool_call_is_rendered_by_the_template(tokenizer):
    fmt = FormatConfig(messages_key="messages", tools_key="tools")
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function",
                            "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]}
    chosen, _ = row_to_preference_pair(
        {"messages": [{"role": "user", "content": "2+2="}], "tools": json.dumps(TOOLS),
         "chosen": [call], "rejected": [{"role": "assistant", "content": "5"}]},
        0, fmt, tokenizer, "d")
    assert '"name": "add"' in _text(tokenizer, chosen.prompt_tokens)  # the tools, in the prompt
    assert _response(tokenizer, chosen) == (
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>'
        "<|im_end|>\n")


@pytest.mark.parametrize(("row", "message"), [
    ({"prompt": "q", "rejected": "r"}, "row 1 has no key 'chosen' (format.chosen_key)"),
    ({"prompt": "q", "chosen": "c"}, "row 1 has no key 'rejected' (format.rejected_key)"),
    ({"chosen": "c", "rejected": "r"}, ("row 1 has no key 'prompt' (format.prompt_key) or "
                                        "'message' (format.messages_key)")),
    ({"prompt": "q", "chosen": "", "rejected": "r"}, "row 1: the chosen reply is empty"),
    ({"prompt": "q", "chosen": [{"content": "c"}], "rejected": "r"}, "message 0 has no 'role'"),
])
def test_preference_row_problems_name_row_and_key(tokenizer, row, message):
    with pytest.raises(TasksetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        row_to_preference_pair(row, 0, FormatConfig(), tokenizer, "buffer 'prefs' (p.jsonl)")


def test_dpo_dataset_was_read_as_sft_rows_before(tmp_path):
    """The failing case of #17: a prompt/chosen/rejected file was read as SFT rows ("row 0
    has no key 'response'"). ``rft validate`` reads it as pairs for dpo; for sft the
    missing response is still named."""
    from rft.modes.preflight import data_problems

    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text(json.dumps({"prompt": "2+2=", "chosen": "4", "rejected": "5"}) + "\n")
    buffer = {"name": "prefs", "storage_type": "file", "path": str(prefs),
              "format": {"prompt_type": "plaintext"}}
    problems = {}
    for algorithm in ("dpo", "sft"):
        config = minimal_config({"algorithm_type": algorithm}, str(tmp_path / algorithm))
        config["buffer"]["trainer_input"]["experience_buffer"] = buffer
        plan = build_stages(config, PluginRegistry.create()).stages[0].plan
        problems[algorithm] = data_problems(plan)
    assert problems["dpo"] == []
    assert problems["sft"] == [(f"experience buffer 'prefs' ({prefs}): row 1 has no key "
                                "'response' (format.response_key); keys: prompt, chosen, "
                                "rejected")]


def test_dpo_dataset_serves_whole_pairs_across_epochs(tokenizer, tmp_path):
    """Chosen then rejected per row; a batch that wraps past the end of the data holds
    copies with a new ``eid.run``, so the DPO layout still finds every pair."""
    from rft_plugin_dpo import PreferencePairs

    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text("".join(json.dumps({"prompt": f"{i}+1=", "chosen": str(i + 1),
                                         "rejected": str(i + 2)}) + "\n" for i in range(2)))
    cfg = ExperienceBufferConfig(name="prefs", storage_type="file", path=str(prefs),
                                 format=FormatConfig(prompt_type="plaintext"))
    experiences = dataset_experiences(cfg, tokenizer, "dpo", "prefs")
    assert [(e.eid.task, e.eid.suffix) for e in experiences] == [
        (0, "chosen"), (0, "rejected"), (1, "chosen"), (1, "rejected")]
    storage = DatasetStorage("prefs", experiences, epochs=3)
    batch = storage.read(6, timeout=0)  # pairs 0, 1 of pass 0, pair 0 of pass 1
    arranged = PreferencePairs().arrange(batch)
    assert [(e.eid.task, e.eid.run, e.eid.suffix) for e in arranged] == [
        (0, 0, "chosen"), (0, 0, "rejected"), (1, 0, "chosen"), (1, 0, "rejected"),
        (0, 1, "chosen"), (0, 1, "rejected")]
    assert storage.read(10, timeout=0) and storage.available() == 0  # the rest, at once


@pytest.mark.slow
def test_dpo_learns_the_preference_of_its_pair(tiny_model_dir, tmp_path):
    """mode train, algorithm dpo, a plaintext prompt/chosen/rejected file (``repeat_times:
    4`` is set to 2, as the guide says): the loss starts at log 2 (the policy is the
    reference) and the margin of the one pair grows step after step."""
    prefs = tmp_path / "prefs.jsonl"
    prefs.write_text(json.dumps({"question": "3+1=", "chosen": "4", "rejected": "9"}) + "\n")
    outcome = run_tiny(tiny_model_dir, write_taskset(tmp_path / "tasks.jsonl"), tmp_path, {
        "mode": "train",
        "algorithm": {"algorithm_type": "dpo", "repeat_times": 4, "optimizer": {"lr": 3e-3}},
        "buffer": {"batch_size": 1},
        "buffer.trainer_input.experience_buffer": {
            "name": "prefs", "storage_type": "file", "path": str(prefs),
            "format": {"prompt_type": "plaintext", "prompt_key": "question"}},
        "synchronizer": {"sync_method": "checkpoint"},
    }, steps=4)
    losses = [m["actor/pg_loss"] for m in outcome.metrics]
    margins = [m["actor/margin"] for m in outcome.metrics]
    assert len(losses) == 4 and losses[0] == pytest.approx(math.log(2), abs=1e-6)
    assert margins[0] == 0.0 and all(b > a for a, b in itertools.pairwise(margins))
    assert losses[-1] < losses[0] and outcome.metrics[-1]["actor/accuracy_mean"] == 1.0


# ---- SFT rows -----------------------------------------------------------------------------


def test_sft_plaintext_row_with_tools(tokenizer):
    """The tools of a row (a list, or its JSON text) are rendered into the prompt by the
    chat template; the response is the text and the end-of-turn token, as without tools."""
    fmt = FormatConfig(prompt_type="plaintext", prompt_key="q", response_key="a",
                       tools_key="functions")
    with_tools = row_to_sft_experience({"q": "2+2=", "a": "4", "functions": TOOLS}, 0, fmt,
                                       tokenizer, "d")
    as_json = row_to_sft_experience({"q": "2+2=", "a": "4", "functions": json.dumps(TOOLS)}, 0,
                                    fmt, tokenizer, "d")
    plain = row_to_sft_experience({"q": "2+2=", "a": "4"}, 0, fmt, tokenizer, "d")
    assert torch.equal(with_tools.tokens, as_json.tokens)
    prompt = _text(tokenizer, with_tools.prompt_tokens)
    assert prompt.startswith("<|im_start|>system\nFunctions you may call") and '"name": "add"' in prompt
    assert "<tools>" not in _text(tokenizer, plain.prompt_tokens)
    assert _response(tokenizer, with_tools) == _response(tokenizer, plain) == "4<|im_end|>"


def test_tools_filled_with_nulls_by_a_struct_column_are_cleaned(tokenizer, tmp_path):
    """A Parquet column of tool dicts is one struct: every row gets every key some row
    has, ``None`` where it had none; rendered, the tools would carry those. They are
    dropped."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rft.buffer.taskset import read_rows

    other = [{"type": "function", "function": {"name": "neg", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}}}}]
    data = tmp_path / "sft.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "2+2=", "response": "4", "tools": t}
                                         for t in (TOOLS, other)]), data)
    rows = read_rows(TasksetConfig(name="sft", path=str(data)))
    assert rows[1]["tools"][0]["function"]["description"] is None  # what the reader gives
    fmt = FormatConfig(prompt_type="plaintext")
    got = row_to_sft_experience(rows[1], 1, fmt, tokenizer, "d")
    want = row_to_sft_experience({"prompt": "2+2=", "response": "4", "tools": other}, 1, fmt,
                                 tokenizer, "d")
    assert torch.equal(got.tokens, want.tokens)


CONVERSATION = [
    {"role": "system", "content": "Be brief"},
    {"role": "user", "content": "1+1="},
    {"role": "assistant", "content": "2"},
    {"role": "user", "content": "times 3?"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "mul", "arguments": {"a": 2}}}]},
    {"role": "tool", "content": "6"},
    {"role": "assistant", "content": "6"},
]


def test_concatenated_multi_turn_trains_on_every_assistant_turn(tokenizer):
    """The whole conversation is one sequence (its text is the template's, token for
    token of the pieces); the response starts at the first assistant turn; exactly the
    assistant turns (content, tool call, end of turn) are trained, the user and tool turns
    between them are masked."""
    fmt = FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True)
    experience = row_to_sft_experience({"messages": CONVERSATION}, 0, fmt, tokenizer, "d")
    whole = render(tokenizer, CONVERSATION, add_generation_prompt=False)
    assert _text(tokenizer, experience.tokens) == whole
    assert _text(tokenizer, experience.prompt_tokens) == render(
        tokenizer, CONVERSATION[:2], add_generation_prompt=True)
    assert _response(tokenizer, experience, trained=True) == (
        '2<|im_end|>\n<tool_call>\n{"name": "mul", "arguments": {"a": 2}}\n</tool_call>'
        "<|im_end|>\n6<|im_end|>\n")
    masked = _response(tokenizer, experience, trained=False)
    assert masked == ("<|im_start|>user\ntimes 3?<|im_end|>\n<|im_start|>assistant\n"
                      "<|im_start|>tool\n6<|im_end|>\n<|im_start|>assistant\n")
    last_turn_only = row_to_sft_experience(
        {"messages": CONVERSATION}, 0, FormatConfig(messages_key="messages"), tokenizer, "d")
    assert bool(last_turn_only.action_mask.all())
    assert _response(tokenizer, last_turn_only) == "6<|im_end|>"


def test_concatenated_multi_turn_refuses_a_template_that_rewrites_turns(tokenizer):
    """A template that renders earlier assistant turns differently once the conversation
    goes on (here: it drops them) cannot be masked turn by turn: one line says so."""
    drops_earlier = ("{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
                     "<{{ m['role'] }}>{{ m['content'] }}{% endif %}{% endfor %}"
                     "{% if add_generation_prompt %}<assistant>{% endif %}")
    fmt = FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True,
                       chat_template=drops_earlier)
    with pytest.raises(TasksetError, match=r"^d: row 5: the chat template does not render "
                                           r"assistant message 1 as a continuation"):
        row_to_sft_experience({"messages": CONVERSATION[1:4] + [CONVERSATION[-1]]}, 4, fmt,
                              tokenizer, "d")


def test_dataset_chat_template_wins_over_the_models(tokenizer):
    fmt = FormatConfig(prompt_type="plaintext", chat_template=BRACKETS)
    experience = row_to_sft_experience({"prompt": "1+1=", "response": "2"}, 0, fmt, tokenizer,
                                       "d")
    assert _text(tokenizer, experience.prompt_tokens) == "[user]1+1=[assistant]"
    chosen, _ = row_to_preference_pair({"prompt": "1+1=", "chosen": "2", "rejected": "3"}, 0,
                                       fmt, tokenizer, "d")
    assert _text(tokenizer, chosen.prompt_tokens) == "[user]1+1=[assistant]"


def test_model_chat_template_precedence(tiny_model_dir, tmp_path):
    """rollout_model.chat_template > model.chat_template_path > model.custom_chat_template
    > the tokenizer's own; :func:`load_tokenizer` applies it."""
    path = tmp_path / "template.jinja"
    path.write_text("{% for m in messages %}<{{ m['content'] }}>{% endfor %}")
    config = replaced(RftConfig(), {"model.model_path": str(tiny_model_dir)})
    assert model_chat_template(config) is None
    assert "<|im_start|>" in load_tokenizer(config).chat_template  # the tokenizer's own
    config = replaced(config, {"model.custom_chat_template": "custom"})
    assert model_chat_template(config) == "custom"
    config = replaced(config, {"model.chat_template_path": str(path)})
    assert model_chat_template(config) == path.read_text()  # the path overrides the string
    config = replaced(config, {"explorer.rollout_model.chat_template": BRACKETS})
    assert model_chat_template(config) == BRACKETS
    assert load_tokenizer(config).chat_template == BRACKETS


def test_sft_row_checks_without_a_tokenizer():
    """What ``rft validate`` runs on the first rows: the keys and shapes, one line each."""
    cfg = ExperienceBufferConfig(name="sft", format=FormatConfig(
        messages_key="messages", enable_concatenated_multi_turn=True))
    check_rows([{"messages": CONVERSATION}], cfg, "sft", "d")
    with pytest.raises(TasksetError, match="row 2: no assistant message to train on"):
        check_rows([{"messages": CONVERSATION}, {"messages": CONVERSATION[:2]}], cfg, "sft", "d")
    cfg = replaced(cfg, {"format.enable_concatenated_multi_turn": False})
    with pytest.raises(TasksetError, match="row 1: the last message must be the assistant's"):
        check_rows([{"messages": CONVERSATION[:2]}], cfg, "sft", "d")
    with pytest.raises(TasksetError, match=r"row 1: 'tools' \(format.tools_key\) must be a "
                                           "list of tool definitions"):
        check_rows([{"messages": CONVERSATION, "tools": 3}], cfg, "sft", "d")


@pytest.mark.slow
def test_sft_stage_on_multi_turn_conversations_with_tools(tiny_model_dir, tmp_path):
    """mode train, algorithm sft, ``messages`` rows with tools, every assistant turn
    trained: two steps run and the loss falls."""
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": CONVERSATION, "tools": json.dumps(TOOLS)})
                            + "\n" for _ in range(2)))
    outcome = run_tiny(tiny_model_dir, write_taskset(tmp_path / "tasks.jsonl"), tmp_path, {
        "mode": "train", "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 1e-2}},
        "model": {"max_prompt_tokens": 512}, "buffer": {"batch_size": 2},
        "buffer.trainer_input.experience_buffer": {
            "name": "chats", "storage_type": "file", "path": str(data),
            "format": {"messages_key": "messages", "enable_concatenated_multi_turn": True}},
        "synchronizer": {"sync_method": "checkpoint"},
    }, steps=3)
    losses = [m["actor/pg_loss"] for m in outcome.metrics]
    assert len(losses) == 3 and losses[2] < losses[0]


# ---- tools of tasks -----------------------------------------------------------------------


def test_task_tools_come_from_the_row():
    cfg = TasksetConfig(name="t", path="t.jsonl", format=FormatConfig(prompt_type="plaintext"))
    plugins = TaskPlugins(None, None, None, None)
    assert row_to_task(cfg, {"prompt": "q", "tools": json.dumps(TOOLS)}, 0, plugins,
                       is_eval=False).tools == TOOLS
    assert row_to_task(cfg, {"prompt": "q"}, 0, plugins, is_eval=False).tools is None
    with pytest.raises(TasksetError, match=r"taskset 't' \(t.jsonl\): row 3: 'tools' "
                                           r"\(format.tools_key\) is a string but not JSON"):
        row_to_task(cfg, {"prompt": "q", "tools": "add"}, 2, plugins, is_eval=False)


@pytest.mark.slow
def test_task_tools_reach_the_workflows_chat_prompts(tiny_model_dir, tmp_path):
    """A taskset whose rows carry tools: ``simple_workflow``'s ``model.chat`` renders them
    (the experiences the explorer stored start with the tools' system block); rows
    without tools are rendered as before."""
    from rft.buffer.storage import SQLStorage
    from transformers import AutoTokenizer

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1),
                                         **({"tools": TOOLS} if i % 2 == 0 else {})}) + "\n"
                             for i in range(4)))
    buffer = tmp_path / "exp.db"
    run_tiny(tiny_model_dir, tasks, tmp_path, {
        "model": {"max_prompt_tokens": 512},  # the tools' block is longer than the default
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {
            "task_selector": {"selector_type": "sequential"}}}},
        "buffer.trainer_input.experience_buffer": {"name": "exp", "storage_type": "queue",
                                                   "path": str(buffer)}}, steps=1)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    stored = SQLStorage("exp", str(buffer))
    experiences = stored.read(stored.available(), timeout=0)
    stored.close()
    prompts = {(_text(tokenizer, e.prompt_tokens)) for e in experiences}
    assert len(experiences) == 8 and len(prompts) == 4
    with_tools = sorted(p for p in prompts if p.startswith("<|im_start|>system\nFunctions"))
    assert len(with_tools) == 2 and all('"name": "add"' in p for p in with_tools)
    assert [p.split("user\n")[1][:3] for p in with_tools] == ["0+1", "2+1"]


# ---- mix: expert data from an auxiliary buffer --------------------------------------------


@pytest.mark.slow
def test_mix_trains_on_expert_data_from_an_auxiliary_buffer(tiny_model_dir, tmp_path):
    """The guide's MIX set-up: ``auxiliary_buffers.sft_dataset`` (Trinity's default name)
    holds expert SFT rows; with ``expert_data_ratio: 0.25`` one row of each batch of 4 is
    expert data (it failed at start before: the buffer was never opened), and the SFT
    loss on it falls while GRPO runs on the rollouts."""
    expert = tmp_path / "expert.jsonl"
    expert.write_text("".join(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                              for i in range(3)))
    outcome = run_tiny(tiny_model_dir, write_taskset(tmp_path / "tasks.jsonl"), tmp_path, {
        "algorithm": {"algorithm_type": "mix", "repeat_times": 2,
                      "sample_strategy_args": {"expert_data_ratio": 0.25}},
        "buffer.trainer_input.auxiliary_buffers": {"sft_dataset": {
            "name": "sft_dataset", "storage_type": "file", "path": str(expert),
            "format": {"prompt_type": "plaintext", "prompt_key": "question",
                       "response_key": "answer"}}},
    }, steps=3)
    assert [m["sample/expert_count"] for m in outcome.metrics] == [1.0, 1.0, 1.0]
    assert [m["expert/fraction"] for m in outcome.metrics] == [0.25, 0.25, 0.25]
    sft = [m["expert/sft_loss"] for m in outcome.metrics]
    assert sft[2] < sft[1] < sft[0]
    assert all(math.isfinite(m["actor/pg_loss"]) for m in outcome.metrics)


def test_auxiliary_dataset_is_served_total_epochs_times(tiny_model_dir, tmp_path):
    """``total_epochs`` of an auxiliary dataset bounds its passes (unset: as many as the
    run needs)."""
    from rft.modes.builders import open_auxiliary_buffers

    expert = tmp_path / "expert.jsonl"
    expert.write_text(json.dumps({"prompt": "1+1=", "response": "2"}) + "\n")
    config = minimal_config({"algorithm_type": "grpo"}, str(tmp_path), mode="colocate")
    config["model"]["model_path"] = str(tiny_model_dir)
    config["buffer"]["explorer_input"] = {"taskset": {
        "name": "t", "path": str(write_taskset(tmp_path / "t.jsonl")),
        "default_workflow_type": "simple_workflow", "default_reward_fn_type": "accuracy_reward"}}
    aux = {"storage_type": "file", "path": str(expert), "format": {"prompt_type": "plaintext"}}
    config["buffer"]["trainer_input"]["auxiliary_buffers"] = {
        "a": aux, "b": {**aux, "total_epochs": 2}}
    plan = build_stages(config, PluginRegistry.create()).stages[0].plan
    opened = open_auxiliary_buffers(plan, steps=5)
    assert opened["a"].available() == 5 * plan.config.buffer.train_batch_size
    assert opened["b"].available() == 2


# ---- where format fields have no effect ---------------------------------------------------


def test_format_fields_set_where_they_have_no_effect_are_named(tmp_path):
    config = minimal_config({"algorithm_type": "dpo"}, str(tmp_path))
    config["buffer"]["trainer_input"]["experience_buffer"].update(
        {"storage_type": "file", "format": {"enable_concatenated_multi_turn": True}})
    config["buffer"]["trainer_input"]["auxiliary_buffers"] = {
        "q": {"storage_type": "queue"},
        "s": {"storage_type": "file", "path": str(tmp_path), "schema_type": "dpo",
              "format": {"chosen_key": "good"}}}
    config["buffer"]["explorer_input"] = {"eval_tasksets": [{
        "name": "e", "path": str(tmp_path), "default_workflow_type": "simple_workflow",
        "format": {"chat_template": BRACKETS}}]}
    config["mode"] = "train"
    from rft.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        build_stages(config, PluginRegistry.create())
    text = str(caught.value)
    assert ("buffer.trainer_input.auxiliary_buffers.q.storage_type: an auxiliary queue has no "
            "writer") in text
    assert ("buffer.trainer_input.auxiliary_buffers.s.schema_type: 'dpo', but this buffer is "
            "read as 'sft'") in text
    config["buffer"]["trainer_input"]["auxiliary_buffers"] = {
        "s": {"storage_type": "file", "path": str(tmp_path), "format": {"chosen_key": "good"}}}
    warnings = build_stages(config, PluginRegistry.create()).warnings
    assert [w.split(": ")[0] for w in warnings if "format." in w.split(": ")[0]] == [
        "buffer.explorer_input.eval_tasksets[0].format.chat_template",
        "buffer.trainer_input.experience_buffer.format.enable_concatenated_multi_turn",
        "buffer.trainer_input.auxiliary_buffers.s.format.chosen_key"]


# ---- per-row workflow and reward (format.workflow_key / reward_fn_key) --------------------


RAN: list[tuple[str, int]] = []
"""(workflow or reward name, task index) of every call the plugin below saw."""


def _row_plugin():
    from rft.hookspecs import hookimpl
    from rft_plugin_workflows.single_turn import SimpleWorkflow

    def recording(name: str) -> type:
        class Recording(SimpleWorkflow):
            def run(self):
                RAN.append((name, self.task.index))
                return super().run()
        return Recording

    def reward(name: str, value: float):
        def fn(response, truth=None):
            RAN.append((name, -1))
            return {"value": value}
        return fn

    class RowPlugin:
        @hookimpl
        def register_workflows(self):
            return {"wf_a": recording("wf_a"), "wf_b": recording("wf_b")}

        @hookimpl
        def register_reward_fns(self):
            return {"one": reward("one", 1.0), "zero": reward("zero", 0.0)}

    return RowPlugin()


def test_rows_name_their_workflow_and_reward(tiny_model_dir, tmp_path):
    """Trinity's sample-level control: a row's ``format.workflow_key`` / ``reward_fn_key``
    column names the workflow and reward that run it (rows naming none use the taskset's);
    each task ran its own workflow, and each reward gave its value to its rows."""
    RAN.clear()
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"question": "0+1=", "answer": "1", "wf": "wf_b", "rw": "one"},
            {"question": "1+1=", "answer": "2"},
            {"question": "2+1=", "answer": "3", "wf": "wf_b"},
            {"question": "3+1=", "answer": "4", "rw": "one"}]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    outcome = run_tiny(tiny_model_dir, tasks, tmp_path, {
        "buffer": {"batch_size": 4, "explorer_input": {"taskset": {
            "default_workflow_type": "wf_a", "default_reward_fn_type": "zero",
            "task_selector": {"selector_type": "sequential"},
            "format": {"workflow_key": "wf", "reward_fn_key": "rw"}}}},
    }, plugins=[_row_plugin()], steps=1)
    workflows = sorted(call for call in RAN if call[1] >= 0)
    assert workflows == [("wf_a", 1), ("wf_a", 3), ("wf_b", 0), ("wf_b", 2)]
    assert sorted(name for name, index in RAN if index < 0) == ["one"] * 4 + ["zero"] * 4
    assert outcome.metrics[0]["rollout/reward/mean"] == 0.5


def test_a_row_naming_an_unknown_workflow_is_one_line(tmp_path):
    from rft.rollout.explorer import open_taskset

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n"
                     + json.dumps({"question": "2+1=", "answer": "3", "wf": "math_workflw"}) + "\n")
    config = minimal_config({"algorithm_type": "grpo"}, str(tmp_path), mode="colocate")
    config["buffer"]["explorer_input"] = {"taskset": {
        "name": "t", "path": str(tasks), "default_workflow_type": "simple_workflow",
        "workflow_args": {"system_prompt": "Be brief"},
        "format": {"prompt_key": "question", "response_key": "answer", "workflow_key": "wf"}}}
    loaded = build_stages(config, PluginRegistry.create())
    assert any(w.startswith("buffer.explorer_input.taskset.workflow_args: a row naming its own "
                            "workflow (format.workflow_key 'wf')") for w in loaded.warnings)
    plan = loaded.stages[0].plan.tasksets[0]
    assert plan.row_workflows["simple_workflow"].args.system_prompt == "Be brief"
    with pytest.raises(TasksetError, match=r"line 2: workflow 'math_workflw' "
                                           r"\(format.workflow_key "
                                           r"'wf'\) is not registered; did you mean "
                                           r"'math_workflow'"):
        open_taskset(plan)


def test_an_exhausted_dataset_says_so(tokenizer):
    experience = row_to_sft_experience({"prompt": "1+1=", "response": "2"}, 0,
                                       FormatConfig(prompt_type="plaintext"), tokenizer, "d")
    storage = DatasetStorage("expert", [experience], epochs=2)
    assert len(storage.read(3, timeout=0)) == 2  # the rest, without waiting
    from rft.buffer.storage import BufferEmpty

    with pytest.raises(BufferEmpty, match=r"dataset 'expert': its 2 pass\(es\) over 1 "
                                          r"experience\(s\) were all read"):
        storage.read(1, timeout=60)


# ---- taskset paths: what datasets.load_dataset takes ---------------------------------------


def _rows(**fields):
    from rft.buffer.taskset import read_rows

    return [row["q"] for row in read_rows(TasksetConfig(name="t", **fields))]


def test_taskset_paths_in_the_forms_datasets_takes(tmp_path, monkeypatch):
    """A folder of split files (``split``), HF's ``data/`` and sharded names, a glob, a
    configuration chosen by ``subset_name`` (from a README, or a subfolder without one),
    and parquet / csv files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def jsonl(path: Path, *values: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"q": v}) + "\n" for v in values))

    monkeypatch.chdir(tmp_path)
    jsonl(tmp_path / "splits" / "train.jsonl", "a", "b")
    jsonl(tmp_path / "splits" / "test.jsonl", "c")
    jsonl(tmp_path / "hf" / "data" / "train-00000-of-00001.jsonl", "d")
    jsonl(tmp_path / "subsets" / "easy" / "train.jsonl", "e")
    jsonl(tmp_path / "subsets" / "hard" / "train.jsonl", "f")
    jsonl(tmp_path / "named" / "main" / "train.jsonl", "g")
    (tmp_path / "named" / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n"
        "    path: main/train.jsonl\n---\n")
    pq.write_table(pa.Table.from_pylist([{"q": "h"}]), tmp_path / "rows.parquet")
    (tmp_path / "rows.csv").write_text("q\ni\n")
    assert _rows(path="splits", split="test") == ["c"]
    assert _rows(path=str(tmp_path / "splits")) == ["a", "b"]  # split: train
    assert _rows(path="hf") == ["d"]
    assert _rows(path="splits/*.jsonl") == ["c", "a", "b"]  # files in name order
    assert _rows(path="subsets", subset_name="hard") == ["f"]
    assert _rows(path="named", subset_name="main") == ["g"]
    assert _rows(path="rows.parquet") == ["h"] and _rows(path="rows.csv") == ["i"]
    with pytest.raises(TasksetError, match=r"subset_name 'medium' is neither a configuration "
                                           r"of the dataset \(.*\) nor a subfolder"):
        _rows(path="subsets", subset_name="medium")
    with pytest.raises(TasksetError, match=r"Unknown split \"validation\""):
        _rows(path="splits", split="validation")


def test_a_hub_id_without_the_hub_is_one_line_within_seconds(tmp_path, monkeypatch):
    """A Hub dataset id (or a relative path that does not exist and reads as one) when the
    Hub cannot be reached and the datasets cache lacks it; a missing data file is "no
    such file"."""
    import time

    from rft.hub import hub_unreachable

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_unreachable.cache_clear()
    try:
        started = time.monotonic()
        for path in ("openai/gsm8k", "runs/data"):
            with pytest.raises(TasksetError) as caught:
                _rows(path=path, subset_name="main")
            assert str(caught.value) == (
                f"taskset 't' ({path}): not a local file or folder ({tmp_path / path} does not "
                "exist), and the Hugging Face Hub cannot be reached (HF_HUB_OFFLINE is set) "
                "nor has the datasets cache this dataset; download it and point path at its "
                "folder or file")
        assert time.monotonic() - started < 10
    finally:
        hub_unreachable.cache_clear()
    for path in ("data/train.jsonl", "./data"):  # tried again: the file may appear
        with pytest.raises(TasksetError, match=rf"^taskset 't' \({path}\): no such file or "
                                               r"folder \(failed 3 times, max_retry_times: 2\)$"):
            _rows(path=path, max_retry_times=2, max_retry_interval=0)
