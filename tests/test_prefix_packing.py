"""The trainer's prefix-tree packed forward (:mod:`rft.trainer.prefix_tree`,
:mod:`rft.trainer.packed_forward`): each shared prefix runs once, through the model's own
forward with a 4-D mask; logits and gradients are the plain forward's (float32 within
1e-5; bfloat16 autocast within the plain forward's own noise) for Qwen2, Llama and
Mistral, with LoRA and gradient checkpointing; multi-turn rows form one tree; the cases
left to the plain forward say why."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from rft.trainer.batching import TensorBatch
from rft.trainer.layout_memo import LayoutMemo
from rft.trainer.models import response_logprobs, uses_shared_prompts
from fixtures_packing import (
    assert_equal_to_rounding,
    build_model,
    grpo_batch,
    logits_and_grads,
    mistral,
    model_logits,
    multi_turn_batch,
    packed,
    qwen2,
    rank_worker,
    SHARED_FORWARDS,
    shared_layouts,
)
from rft.trainer.packed_forward import fallback_reason, probe_reason, sliding_window
from rft.trainer.prefix_tree import pack_rows, unpackable_reason
from rft.trainer.prompt_groups import group_rows, use_prompt_group_attention
from rft.trainer.prompt_groups import unavailable_reason as prompt_group_unavailable_reason


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


# ---- the layout ------------------------------------------------------------------------


def test_grpo_rows_share_their_prompt_once() -> None:
    batch = grpo_batch(300)
    layout = pack_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                       batch.prompt_width)
    prompt_lengths = batch["attention_mask"][:, : batch.prompt_width].sum(-1)
    response_lengths = batch["response_mask"].sum(-1)
    # 3 prompts shared by 4 rows each, one alone: each prompt once, every response once
    # (rows that start their responses alike share those tokens too)
    shared = int(prompt_lengths[::4][:3].sum() + prompt_lengths[-1])
    assert layout.input_ids.shape[0] == 4  # one pack per distinct prompt
    assert layout.tokens <= shared + int(response_lengths.sum())
    assert layout.tokens < int(batch["attention_mask"].sum())
    # each scored column points at a node holding the token before it
    flat_ids = layout.input_ids.reshape(-1)
    flat_pos = layout.position_ids.reshape(-1)
    for row in range(len(batch)):
        for j in range(int(response_lengths[row])):
            node = int(layout.source[row, j])
            column = batch.prompt_width + j - 1
            assert int(flat_ids[node]) == int(batch["input_ids"][row, column])
            assert int(flat_pos[node]) == int(batch["position_ids"][row, column])
        assert (layout.source[row, int(response_lengths[row]):] == -1).all()


def test_grpo_rows_form_prompt_groups_with_their_responses_back_to_back() -> None:
    """Prompt groups (:mod:`rft.trainer.prompt_groups`): one group per distinct prompt,
    the prompt once, then each row's response tokens but its last, without padding; the
    slot gather and scatter indices point at those columns."""
    batch = grpo_batch(300)
    groups = group_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                        batch.prompt_width)
    assert groups is not None
    P = batch.prompt_width
    response_lengths = batch["response_mask"].sum(-1)  # (B,)
    runs = (response_lengths - 1).clamp(min=0)
    assert groups.input_ids.shape[0] == 4  # 3 prompts × 4 rows, one row alone
    used = torch.zeros(4, dtype=torch.long).index_add_(0, groups.group, runs)
    assert groups.input_ids.shape[1] == P + int(used.max())  # no padding inside a group
    masks = groups.masks
    assert masks.slots == 4 and masks.slot_width == int(runs.max())
    assert masks.scatter_to.numel() == int(runs.sum())
    flat_ids, flat_pos = groups.input_ids.reshape(-1), groups.position_ids.reshape(-1)
    columns = groups.input_ids.shape[1]
    for row in range(len(batch)):
        g = int(groups.group[row])
        assert torch.equal(groups.input_ids[g, :P], batch["input_ids"][row, :P])
        for j in range(int(runs[row])):  # the row's response column j, in its group
            at = g * columns + int(groups.offset[row]) + j
            assert int(flat_ids[at]) == int(batch["input_ids"][row, P + j])
            assert int(flat_pos[at]) == int(batch["position_ids"][row, P + j])
            assert at in masks.slot_index.tolist()
    assert torch.equal(masks.slot_index[masks.scatter_from], masks.scatter_to)
    # rows that share nothing, or responses of one token, are not grouped
    alone = grpo_batch(300, repeats=1)
    assert group_rows(alone["input_ids"], alone["attention_mask"], alone["position_ids"],
                      alone.prompt_width) is None
    short = TensorBatch(P, {k: v[:, : P + 1] for k, v in batch.tensors.items()
                            if k != "response_mask"})
    assert group_rows(short["input_ids"], short["attention_mask"], short["position_ids"],
                      P) is None


def test_prompt_group_attention_keeps_sdpa_for_other_forwards_and_checkpoints(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch to the cascade attention: a plain forward afterwards is sdpa's bit for
    bit, a saved checkpoint still names sdpa (loads without rft), and an eager model or an
    old torch keeps the model's own attention with a reason."""
    import json

    from transformers import AutoModelForCausalLM

    model = qwen2(tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    with torch.no_grad():
        before = model_logits(model, batch)
        assert use_prompt_group_attention(model)
        assert model.config._attn_implementation == "rft_prompt_groups"
        assert torch.equal(model_logits(model, batch), before)
    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert not any("attn" in key for key in saved)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved")
    assert reloaded.config._attn_implementation == "sdpa"
    eager = qwen2(tiny_model_dir, attn_implementation="eager")
    assert not use_prompt_group_attention(eager)
    assert prompt_group_unavailable_reason(eager) == "attention implementation 'eager' is not sdpa"
    monkeypatch.setattr(torch, "__version__", "2.4.1")
    old = qwen2(tiny_model_dir)
    assert prompt_group_unavailable_reason(old) == "torch 2.4.1 < 2.5 (no enable_gqa)"
    assert not use_prompt_group_attention(old) and old.config._attn_implementation == "sdpa"


def test_prompt_groups_repeat_kv_heads_where_transformers_would_and_keep_the_equality(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU-side decision, on CPU: with a mask, a CUDA device repeats grouped key /
    value heads (as ``transformers``' sdpa does) and the CPU hands them to SDPA as they
    are; the repeated-heads path, forced here, keeps logits and gradients equal."""
    import rft.trainer.prompt_groups as prompt_groups

    model = qwen2(tiny_model_dir)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    mask = torch.ones(2, 1, 3, 5, dtype=torch.bool)
    key = value = torch.zeros(2, 1, 5, 8)
    assert not prompt_groups.shares_kv_heads(torch.device("cuda"), mask, key, value)
    assert prompt_groups.shares_kv_heads(torch.device("cpu"), mask, key, value)
    repeated: list[bool] = []

    def repeats(*args: object) -> bool:
        repeated.append(True)
        return False

    monkeypatch.setattr(prompt_groups, "shares_kv_heads", repeats)
    assert_equal_to_rounding(model, grpo_batch(model.config.vocab_size),
                             forward=SHARED_FORWARDS["groups"])
    assert repeated  # the repeated-heads path ran


def test_multi_turn_rows_pack_as_one_tree_per_episode() -> None:
    """Five turns per episode: the tree holds each episode's last row's tokens once,
    against one row per turn (the ≥ 2× fewer tokens of #31's goal)."""
    batch = multi_turn_batch(300, episodes=2, turns=5)
    layout = pack_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                       batch.prompt_width)
    lengths = batch["attention_mask"].sum(-1)  # (10,)
    assert layout.input_ids.shape[0] == 2
    assert layout.tokens == int(lengths[4] + lengths[9])  # each episode's last turn, once
    assert int(lengths.sum()) >= 2 * layout.tokens


def test_a_group_of_many_long_responses_splits_into_packs_within_the_mask_budget(
        tiny_model_dir: Path) -> None:
    """32 samples of a 4-token prompt with 12-token responses: one pack would hold a
    (388)² mask, 16× the rows' own (32 · 16²); the budget (4×) splits the group into
    packs, each holding the prompt once, and the logits stay the plain forward's."""
    batch = grpo_batch(964, prompts=1, repeats=32, width=4, responses=12)
    args = (batch["input_ids"], batch["attention_mask"], batch["position_ids"],
            batch.prompt_width)
    one = pack_rows(*args, mask_budget=None)
    split = pack_rows(*args)
    width = batch["input_ids"].shape[1]
    assert one.input_ids.shape[0] == 2  # the 32 rows and the one with its own prompt
    assert split.input_ids.shape[0] > 2
    for layout in (one, split):  # every pack's mask within its budget (split only)
        for g in range(layout.input_ids.shape[0]):
            nodes = layout.lengths[g]
            rows = int((layout.source[:, 0] // layout.input_ids.shape[1] == g).sum())
            if layout is split:
                assert nodes ** 2 <= 4 * rows * width ** 2
    assert split.tokens < int(batch["attention_mask"].sum())
    assert_equal_to_rounding(qwen2(tiny_model_dir), batch)


def test_rows_that_are_not_prompt_then_response_are_not_packed() -> None:
    batch = grpo_batch(300)
    mask = batch["attention_mask"].clone()
    assert unpackable_reason(mask, batch.prompt_width) is None
    assert unpackable_reason(mask, 0) == "a row has an empty prompt"
    holed = mask.clone()
    holed[0, batch.prompt_width + 1] = 0
    holed[0, batch.prompt_width + 2] = 1
    assert unpackable_reason(holed, batch.prompt_width) == "a response is not right-padded"
    right = mask.clone()
    right[4, 0] = 1  # row 4 is left-padded by 2: a hole in its prompt
    assert unpackable_reason(right, batch.prompt_width) == "a prompt is not left-padded"


# ---- equality ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", sorted(SHARED_FORWARDS))
@pytest.mark.parametrize("which", ["qwen2", "llama", "mistral"])
def test_logits_and_gradients_equal_the_models_forward(tiny_model_dir: Path, which: str,
                                                       layout: str) -> None:
    model = build_model(which, tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    assert_equal_to_rounding(model, batch, forward=SHARED_FORWARDS[layout])
    assert fallback_reason(model, batch["input_ids"], batch["attention_mask"],
                           batch["position_ids"], batch.prompt_width) is None


def test_a_groups_episodes_share_their_first_prompt_in_one_tree(tiny_model_dir: Path) -> None:
    """Three episodes of one task (a GRPO group of multi-turn rollouts): one pack, the
    first prompt once for all three, each episode's own turns once; the plain logits."""
    batch = multi_turn_batch(964, episodes=3, turns=5, prompt=6, same_task=True)
    layout = pack_rows(batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                       batch.prompt_width)
    lengths = batch["attention_mask"].sum(-1)  # (15,)
    assert layout.input_ids.shape[0] == 1
    assert layout.tokens == int(lengths[4] + lengths[9] + lengths[14]) - 2 * 6
    assert_equal_to_rounding(qwen2(tiny_model_dir), batch)


@pytest.mark.parametrize("which", ["qwen2", "llama"])
def test_multi_turn_tree_equals_one_row_per_turn(tiny_model_dir: Path, which: str) -> None:
    model = build_model(which, tiny_model_dir)
    assert_equal_to_rounding(model, multi_turn_batch(model.config.vocab_size))


@pytest.mark.parametrize("layout", sorted(SHARED_FORWARDS))
@pytest.mark.parametrize("which", ["qwen2", "mistral"])
def test_lora_and_gradient_checkpointing_keep_the_equality(tiny_model_dir: Path,
                                                           which: str, layout: str) -> None:
    from peft import LoraConfig, get_peft_model

    model = build_model(which, tiny_model_dir)
    torch.manual_seed(5)
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                            target_modules=["q_proj", "v_proj", "up_proj"]))
    lora.train()
    batch = grpo_batch(model.config.vocab_size)
    forward = SHARED_FORWARDS[layout]
    assert_equal_to_rounding(lora, batch, forward=forward)
    lora.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert_equal_to_rounding(lora, batch, forward=forward)


def test_eager_attention_packs_with_an_additive_mask(tiny_model_dir: Path) -> None:
    model = qwen2(tiny_model_dir, attn_implementation="eager")
    assert_equal_to_rounding(model, grpo_batch(model.config.vocab_size))


@pytest.mark.parametrize("layout", sorted(SHARED_FORWARDS))
@pytest.mark.parametrize("which", ["qwen2", "llama"])
def test_bf16_autocast_is_within_the_plain_forwards_own_noise(tiny_model_dir: Path,
                                                              which: str, layout: str) -> None:
    """Under bfloat16 autocast the packed forward is as close to the float32 forward as
    the plain bfloat16 forward is (bfloat16's own rounding noise, within 2×), for logits
    and every gradient; and it is not the plain bfloat16 result bit for bit (it ran)."""
    model = build_model(which, tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    valid = batch["response_mask"].bool()
    exact, exact_grads = logits_and_grads(model, batch, model_logits)
    plain, plain_grads = logits_and_grads(model, batch, model_logits, torch.bfloat16)
    ours, grads = logits_and_grads(model, batch, SHARED_FORWARDS[layout], torch.bfloat16)
    noise = (plain - exact)[valid].abs().max().item()
    assert noise > 10 * 1e-5  # bfloat16 rounding, far above float32's
    assert (ours - exact)[valid].abs().max().item() <= 2 * noise
    for name, grad in exact_grads.items():
        bound = (plain_grads[name] - grad).abs().max().item()
        assert (grads[name] - grad).abs().max().item() <= 2 * bound + 1e-6, name


def test_the_cost_rule_packs_only_where_the_saved_tokens_outweigh_the_added_attention() -> None:
    """``trainer.prefix_sharing: auto``'s cost rule (:func:`packing_cost_reason`): tokens
    plus ``α`` per attention pair, the shapes as they run. A GRPO group whose prompt is
    most of each row packs on any model; a group of long responses behind a short prompt
    packs on a wide model (attention is cheap next to its linear layers) but not on a
    narrow one, and the fallback says why in one line."""
    from types import SimpleNamespace

    from rft.trainer.packed_forward import attention_weight, packing_cost_reason

    narrow = SimpleNamespace(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=256)
    wide = SimpleNamespace(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                           intermediate_size=18944)
    # (4·64 + 8·4) / (2·(64·(64 + 64) + 64·64 + 3·64·256)) = 288 / 122880
    assert attention_weight(narrow) == pytest.approx(288 / 122880)
    assert attention_weight(wide) < attention_weight(narrow) / 50
    assert attention_weight(SimpleNamespace()) == 0.0

    def group(prompt: int, response: int, samples: int = 8) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(0)
        ids = torch.cat([torch.arange(3, 3 + prompt).repeat(samples, 1),
                         torch.randint(3, 500, (samples, response), generator=g)], dim=1)
        mask = torch.ones_like(ids)
        return ids, mask, torch.arange(prompt + response).repeat(samples, 1)

    ids, mask, positions = group(prompt=48, response=8)
    layout = pack_rows(ids, mask, positions, 48)
    for config in (narrow, wide):
        assert packing_cost_reason(mask, layout, attention_weight(config)) is None
    ids, mask, positions = group(prompt=100, response=200, samples=4)
    layout = pack_rows(ids, mask, positions, 100)
    assert layout.input_ids.shape[0] == 1
    assert layout.tokens < 0.9 * int(mask.sum())  # it does save tokens
    assert packing_cost_reason(mask, layout, attention_weight(wide)) is None
    reason = packing_cost_reason(mask, layout, attention_weight(narrow))
    assert reason is not None and "\n" not in reason and "cost more" in reason
    assert packing_cost_reason(mask, layout, 0.0) is None  # tokens alone: it would pack


# ---- the trainer's path ----------------------------------------------------------------


def test_response_logprobs_takes_the_packed_path_where_it_applies(
        tiny_model_dir: Path, shared_layouts: list[str]) -> None:
    model = qwen2(tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    shared, _ = response_logprobs(model, batch, device=torch.device("cpu"), shared_prompts=True)
    assert shared_layouts[-1] == "groups"  # GRPO rows: the prompt groups ran
    ran = len(shared_layouts)
    plain, _ = response_logprobs(model, batch, device=torch.device("cpu"))
    assert len(shared_layouts) == ran  # the plain forward ran
    valid = batch["response_mask"].bool()
    torch.testing.assert_close(shared[valid], plain[valid], rtol=0, atol=1e-5)
    assert uses_shared_prompts(model, batch, None)
    assert uses_shared_prompts(model, batch, torch.bfloat16)  # autocast packs too
    no_prompt = TensorBatch(0, dict(batch.tensors))
    assert not uses_shared_prompts(model, no_prompt, None)


def test_the_layout_memo_finds_equal_rows_again_and_builds_for_others(
        tiny_model_dir: Path) -> None:
    """:class:`LayoutMemo`: rows equal in content (new tensors, as ``select`` makes them)
    get the layout built before, the same object; a changed token, another prompt width or
    another attention implementation builds anew; the oldest layouts leave past the
    capacity; the log-probs through a found layout equal those through a fresh one."""
    model = qwen2(tiny_model_dir)
    use_prompt_group_attention(model)
    batch = grpo_batch(model.config.vocab_size)
    memo = LayoutMemo(capacity=2)
    keys = ("input_ids", "attention_mask", "position_ids")

    def layout(rows: TensorBatch, on: torch.nn.Module = model) -> object:
        return memo.layout(on, *(rows[k] for k in keys), rows.prompt_width)

    first = layout(batch)
    again = TensorBatch(batch.prompt_width, {k: v.clone() for k, v in batch.tensors.items()})
    assert layout(again) is first and (memo.builds, memo.hits) == (1, 1)
    changed = TensorBatch(batch.prompt_width, {k: v.clone() for k, v in batch.tensors.items()})
    changed["input_ids"][0, -1] += 1
    assert layout(changed) is not first and memo.builds == 2
    eager = qwen2(tiny_model_dir, attn_implementation="eager")
    assert type(layout(batch, eager)).__name__ == "PackedLayout" and memo.builds == 3
    assert layout(batch) is not first and memo.builds == 4  # pushed out (capacity 2)
    cpu = torch.device("cpu")
    found, _ = response_logprobs(model, again, device=cpu, shared_prompts=True, layouts=memo)
    fresh, _ = response_logprobs(model, again, device=cpu, shared_prompts=True)
    assert memo.hits == 2 and torch.equal(found, fresh)


@pytest.mark.parametrize(("temperature", "entropy_grad", "chunk"),
                         [(1.0, False, None), (0.7, True, None), (0.7, True, 5)],
                         ids=["metric-entropy", "entropy-loss", "chunked-entropy"])
def test_log_probs_and_entropies_from_the_scoring_nodes_equal_the_plain_ones(
        tiny_model_dir: Path, temperature: float, entropy_grad: bool,
        chunk: int | None, shared_layouts: list[str]) -> None:
    """The packed path computes the log-softmax and the entropy once per scoring node
    (``(M, V)``, not ``(B, R, V)``): the same log-probs, entropies and gradients as the
    plain forward's on every response token (float32 within 1e-5)."""
    model = qwen2(tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    valid = batch["response_mask"].bool()
    results = []
    for shared in (True, False):
        model.zero_grad(set_to_none=True)
        logps, entropy = response_logprobs(
            model, batch, device=torch.device("cpu"), temperature=temperature,
            with_entropy=True, entropy_grad=entropy_grad, entropy_chunk=chunk,
            shared_prompts=shared)
        assert entropy is not None and entropy.requires_grad == entropy_grad
        loss = (logps * valid).sum() + ((entropy * valid).sum() if entropy_grad else 0.0)
        loss.backward()
        results.append((logps.detach(), entropy.detach(),
                        {k: p.grad.clone() for k, p in model.named_parameters()}))
    (logps, entropy, grads), (plain_logps, plain_entropy, plain_grads) = results
    torch.testing.assert_close(logps[valid], plain_logps[valid], rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy[valid], plain_entropy[valid], rtol=0, atol=1e-5)
    assert shared_layouts and shared_layouts[-1] == "groups"  # the shared path ran
    for name, grad in plain_grads.items():
        scale = grad.abs().max().item()
        assert (grads[name] - grad).abs().max().item() <= 1e-5 * scale + 1e-7, name


def test_models_it_cannot_pack_keep_their_own_forward_and_say_why(
        tiny_model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    batch = grpo_batch(300)
    args = (batch["input_ids"], batch["attention_mask"], batch["position_ids"],
            batch.prompt_width)
    model = qwen2(tiny_model_dir)
    model.config._attn_implementation = "flash_attention_2"
    assert fallback_reason(model, *args) == ("attention implementation 'flash_attention_2' "
                                             "is not sdpa or eager")
    with caplog.at_level(logging.INFO, logger="rft.trainer.packed_forward"):
        assert not uses_shared_prompts(model, batch, None)
        assert not uses_shared_prompts(model, batch, None)
    lines = [r.getMessage() for r in caplog.records if "prefix sharing off" in r.getMessage()]
    assert len(lines) == 1 and "flash_attention_2" in lines[0]  # one line per reason
    windowed = mistral()
    windowed.config.sliding_window = 4
    assert fallback_reason(windowed, *args) == "rows longer than the sliding window (4)"
    from transformers import Qwen2Config

    unused = Qwen2Config(sliding_window=4, use_sliding_window=False)  # full attention
    assert sliding_window(unused) is None
    assert sliding_window(windowed.config) == 4


def test_the_probe_refuses_a_model_whose_positions_packing_cannot_express() -> None:
    """ALiBi (Bloom) derives positions from the 2-D mask's cumulative sum, not from
    ``position_ids``: its packed logits differ, the probe says so, the plain forward runs."""
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    bloom = BloomForCausalLM(BloomConfig(vocab_size=50, hidden_size=32, n_layer=1, n_head=2,
                                         attn_implementation="eager"))
    reason = probe_reason(bloom)
    assert reason is not None and "BloomForCausalLM" in reason
    model_args = grpo_batch(50)
    assert fallback_reason(bloom, model_args["input_ids"], model_args["attention_mask"],
                           model_args["position_ids"], model_args.prompt_width) == reason


def test_version_guard_names_the_old_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers
    from rft.trainer import packed_forward

    assert packed_forward.version_reason() is None
    monkeypatch.setattr(transformers, "__version__", "4.46.3")
    assert packed_forward.version_reason() == "transformers 4.46.3 < 4.53"
    monkeypatch.setattr(torch, "__version__", "2.4.1+cpu")
    assert packed_forward.version_reason() == "torch 2.4.1+cpu < 2.5"


def test_metric_entropy_shares_the_log_probs_log_softmax(tiny_model_dir: Path) -> None:
    """Entropy as a metric (no gradient) is ``−Σ p log p`` from the log-probs'
    ``log_softmax``: the log-probs bit for bit as :func:`rft.ops.logprobs_from_logits`,
    the entropies as :func:`rft.ops.entropy_from_logits` (veRL's formula) to float32
    rounding, on the model's logits."""
    from rft.ops import entropy_from_logits, logprobs_from_logits

    model = qwen2(tiny_model_dir)
    batch = grpo_batch(model.config.vocab_size)
    for temperature in (1.0, 0.7):
        logps, entropy = response_logprobs(model, batch, device=torch.device("cpu"),
                                           temperature=temperature, with_entropy=True,
                                           entropy_grad=False)
        assert logps.requires_grad and entropy is not None and not entropy.requires_grad
        logits = model_logits(model, batch).float() / temperature
        labels = batch["input_ids"][:, batch.prompt_width:]
        assert torch.equal(logps, logprobs_from_logits(logits, labels))
        torch.testing.assert_close(entropy, entropy_from_logits(logits), rtol=1e-6, atol=1e-6)


# ---- two FSDP2 ranks ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora-checkpointing"])
def test_two_fsdp2_ranks_keep_the_equality(tiny_model_dir: Path, tmp_path: Path,
                                           lora: bool) -> None:
    """Two gloo ranks, FSDP2-sharded, each packing its own rows: the packed logits and the
    (reduced, full) gradients equal the plain sharded forward's to float32 rounding."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "rank0.pt"
    mp.spawn(rank_worker, args=(port, str(tiny_model_dir), lora, str(out)), nprocs=2,
             join=True)
    saved = torch.load(out)
    valid = saved["valid"]
    plain, plain_grads = saved["results"]["plain"]
    for layout in ("packed", "groups"):
        ours, grads = saved["results"][layout]
        torch.testing.assert_close(ours[valid], plain[valid], rtol=0, atol=1e-5)
        assert plain_grads.keys() == grads.keys() and plain_grads
        for name, grad in plain_grads.items():
            scale = grad.abs().max().item()
            assert scale > 0, name
            assert (grads[name] - grad).abs().max().item() <= 1e-5 * scale, (layout, name)
