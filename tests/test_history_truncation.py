"""A multi-turn conversation whose later prompt is cut at ``max_prompt_tokens`` stays one
conversation in the history, with one warning (issue #28, item 15)."""

from __future__ import annotations

import logging

import pytest
import torch

from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout import history as history_module
from rft.rollout.model_wrapper import ModelWrapper

QUESTION = [{"role": "user", "content": "max 302132"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> HFEngine:
    torch.set_num_threads(1)
    prompt = HFEngine(str(tiny_model_dir), dtype="float32", max_model_len=256,
                      max_response_tokens=3).apply_chat_template(QUESTION)
    # turn 1's prompt fits; turn 2's (turn 1 + reply + feedback) does not
    return HFEngine(str(tiny_model_dir), dtype="float32", max_model_len=256,
                    max_response_tokens=3, max_prompt_tokens=len(prompt) + 2)


def play(model: ModelWrapper, episodes: int, turns: int) -> None:
    """``episodes`` conversations of ``turns`` calls, each resending the whole history."""
    for episode in range(episodes):
        messages = list(QUESTION)
        for turn in range(turns):
            (exp,) = model.chat(messages, n=1, seed=10 * episode + turn)
            messages = messages + [{"role": "assistant", "content": exp.response_text},
                                   {"role": "user", "content": f"Try again ({turn})."}]


def test_a_cut_turn_keeps_one_conversation_and_warns_once(engine, caplog, monkeypatch):
    monkeypatch.setattr(history_module, "_warned_cut", False, raising=False)  # a fresh process
    model = ModelWrapper(engine, SamplingArgs(max_tokens=3), enable_history=True)
    with caplog.at_level(logging.WARNING, logger="rft"):
        play(model, episodes=2, turns=3)
        calls = model.extract_experience_from_history(clear_history=False)
        assert [bool(c.info["prompt_truncated"]) for c in calls] == [False, True, True] * 2
        episodes = model.extract_experience_from_history(merge_turns=True)
    assert len(episodes) == 2  # one per conversation, not one per cut turn
    for episode, first in zip(episodes, calls[::3], strict=True):
        assert episode.tokens.tolist() == first.tokens.tolist()  # up to the last whole turn
        assert episode.action_mask.all()
    warnings = [r.getMessage() for r in caplog.records if "max_prompt_tokens" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "turn 2" in warnings[0] and "not trained" in warnings[0]


def test_a_conversation_cut_from_its_first_turn_is_kept_once(engine, monkeypatch):
    """Every turn cut: the last call stands for the conversation (masked out, as cut
    prompts are), still one experience."""
    monkeypatch.setattr(history_module, "_warned_cut", True, raising=False)
    long_question = [{"role": "user", "content": "max 302132 " * 8}]
    model = ModelWrapper(engine, SamplingArgs(max_tokens=3), enable_history=True)
    messages = list(long_question)
    for turn in range(2):
        (exp,) = model.chat(messages, n=1, seed=turn)
        messages = messages + [{"role": "assistant", "content": exp.response_text},
                               {"role": "user", "content": "Again."}]
    (episode,) = model.extract_experience_from_history(merge_turns=True)
    assert episode.info["prompt_truncated"] and not episode.action_mask.any()
