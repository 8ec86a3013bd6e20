"""``Transcript`` (the episode form's token bookkeeping) keeps what the engine sampled and
what the trainer scores identical: a reply that ends in an EOS the chat template does not
write (``<|endoftext|>``) or holds a special token continues the conversation (no
"reply text does not round-trip"), and a turn whose context the engine left-truncated
(longer than ``max_prompt_tokens``) is not trained on."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from rft.engines.engine import SamplingArgs
from rft.engines.hf_engine import HFEngine
from rft.rollout.model_wrapper import ModelWrapper
from rft_plugin_workflows.multi_turn import Transcript, environment_tokens

MESSAGES = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go on."}]


@pytest.mark.parametrize("stop", ["<|endoftext|>", "<|im_end|>", None])
def test_a_reply_ending_in_any_stop_token_continues_exactly(rft_model, stop):
    tokenizer = rft_model.tokenizer
    reply = tokenizer.encode("take apple", add_special_tokens=False)
    if stop is not None:
        reply.append(tokenizer.convert_tokens_to_ids(stop))
    ids = environment_tokens(rft_model, MESSAGES, reply, rft_model.decode(reply), "Done.")
    text = tokenizer.decode(ids, skip_special_tokens=False)
    # the template's end of turn follows the reply once: not doubled after <|im_end|>
    assert text.startswith("\n" if stop == "<|im_end|>" else "<|im_end|>\n")
    assert text.endswith("<|im_start|>user\nDone.<|im_end|>\n<|im_start|>assistant\n")


def test_a_special_token_inside_a_reply_round_trips(rft_model):
    tokenizer = rft_model.tokenizer
    reply = (tokenizer.encode("take", add_special_tokens=False)
             + [tokenizer.convert_tokens_to_ids("<|im_start|>")]
             + tokenizer.encode(" apple", add_special_tokens=False))
    ids = environment_tokens(rft_model, MESSAGES, reply, rft_model.decode(reply), "Done.")
    assert tokenizer.decode(ids, skip_special_tokens=False).startswith("<|im_end|>\n")


def test_a_turn_whose_context_the_engine_truncated_is_not_trained(rft_tiny_model):
    engine = HFEngine(str(rft_tiny_model), max_model_len=256, max_prompt_tokens=48,
                      max_response_tokens=4, seed=0)
    model = ModelWrapper(engine, SamplingArgs(temperature=1.0, max_tokens=4, logprobs=True))
    transcript = Transcript(model, MESSAGES)
    assert transcript.prompt_length < 48
    transcript.generate({})
    first = len(transcript.mask)
    transcript.add_user("A long observation. " * 12)  # the context now exceeds 48 tokens
    transcript.generate({})
    mask = transcript.experience(0.0).action_mask
    assert bool(mask[:first].all())  # sampled in the whole context: trained
    assert not bool(mask[first:].any())  # sampled after left truncation: not trained
    assert transcript.truncated_turns == 1


def test_trained_tokens_carry_the_log_probs_the_trainer_computes(rft_tiny_model):
    """Teacher forcing the whole episode scores every trained reply token as the engine
    did (the engine's sampling context is the experience's prefix)."""
    engine = HFEngine(str(rft_tiny_model), max_model_len=256, max_prompt_tokens=48,
                      max_response_tokens=4, seed=1)
    model = ModelWrapper(engine, SamplingArgs(temperature=1.0, max_tokens=4, logprobs=True))
    hf = AutoModelForCausalLM.from_pretrained(str(rft_tiny_model), dtype=torch.float32).eval()
    transcript = Transcript(model, MESSAGES)
    for answer in ("Short.", "A long observation. " * 12):
        transcript.generate({})
        transcript.add_user(answer)
    transcript.generate({})
    exp = transcript.experience(1.0)
    with torch.no_grad():
        logits = hf(exp.tokens[None]).logits[0, exp.prompt_length - 1:-1]  # (R, V)
    scored = torch.log_softmax(logits.float(), -1).gather(
        -1, exp.response_tokens[:, None])[:, 0]  # (R,)
    gap = ((scored - exp.logprobs).abs() * exp.action_mask).max()
    assert exp.action_mask.any() and float(gap) < 1e-4


def test_episode_rows_train_only_replies_with_the_groups_signed_advantage(rft_model):
    """An episode's observations are out of the trainer's response mask and get no
    advantage; a won episode's replies get a positive GRPO advantage, a lost one's a
    negative one, grouped by task (``eid``)."""
    from fixtures_environments import Guess, GuessArgs
    from rft.contracts import AdvantageInputs
    from rft.experience import EID, pad_batch
    from rft.workflow import Task
    from rft_plugin_grpo.advantages import GRPOArgs, grpo_advantages
    from rft_plugin_workflows.environment import EnvironmentArgs, EnvironmentWorkflow

    def episode(guess: str, task: int, run: int):
        row = Task(raw={"secret": 3}, index=task, taskset="t", repeat_times=1,
                   sampling={"max_tokens": 4}, environment=Guess, environment_args=GuessArgs(),
                   workflow_args=EnvironmentArgs(max_steps=2),
                   action_parser=lambda reply: guess)
        (exp,) = EnvironmentWorkflow(row, rft_model).run()
        exp.eid = EID(batch=1, task=task, run=run)
        return exp

    rows = [episode("5", 0, 0), episode("3", 0, 1), episode("5", 1, 0), episode("5", 1, 1)]
    batch = pad_batch(rows, pad_token_id=0)
    advantages, _ = grpo_advantages(AdvantageInputs(
        token_level_rewards=batch.token_level_rewards, response_mask=batch.response_mask,
        index=batch.group_ids), GRPOArgs())  # (B, R)
    for row, exp in enumerate(rows):
        width = exp.response_length
        assert torch.equal(batch.response_mask[row, :width].bool(), exp.action_mask)
        assert not bool(advantages[row, :width][~exp.action_mask].any())  # observations: 0
    lost = advantages[0, :rows[0].response_length][rows[0].action_mask]
    won = advantages[1, :rows[1].response_length][rows[1].action_mask]
    assert bool((lost < 0).all()) and bool((won > 0).all())
    assert not bool(advantages[2:].any())  # task 1: both lost alike, no signal
    assert rows[0].metrics["env/steps"] == 2.0 and rows[1].metrics["env/steps"] == 1.0
