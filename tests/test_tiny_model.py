"""The tiny local Qwen2 model: tokenizer ids survive ``AutoTokenizer``, builds reproduce."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rft.testing.tiny_model import (  # noqa: E402
    CHATML_TEMPLATE,
    ENDOFTEXT,
    IM_END,
    IM_START,
    build_tiny_model,
    default_corpus,
)

SAMPLES = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether?",
    "<think>\n48 / 2 = 24\n48 + 24 = 72\n</think>\n<answer>72</answer>",
    "Weng earns $12 an hour. 12/60 = $<<12/60=0.2>>0.2 per minute.\n#### 10",
    "The answer is \\boxed{1,234.56}.",
    "   leading spaces,\ttabs\t\tand\n\n\nnewlines\r\n  trailing   ",
    "1234567890 00 007 3.14159 -42 1e10",
    "Café naïve über Straße — déjà vu ½ × π ≤ √2",
    "数学题的答案是 42。こんにちは Привет 🙂🙃 ¿qué?",
    "e\u0301 (decomposed é) and \u00e9 (composed) and \u212b (angstrom sign)",
    "don't won't I'M they'Re we'VE it's",
    f"{IM_START}user\nWhat is 2+2?{IM_END}\n{IM_START}assistant\n",
    "",
    " ",
    "\n",
]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir: Path):  # noqa: F811
    return (Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json")),
            AutoTokenizer.from_pretrained(tiny_model_dir),
            AutoModelForCausalLM.from_pretrained(tiny_model_dir))


def test_autotokenizer_ids_equal_tokenizers_ids(loaded) -> None:
    raw, hf, _ = loaded
    assert type(hf).__name__ == "Qwen2Tokenizer"  # rebuilt like a real Qwen2 checkpoint
    for text in SAMPLES:
        expected = raw.encode(text).ids
        assert hf.encode(text, add_special_tokens=False) == expected, text
        assert hf(text)["input_ids"] == expected, text  # no BOS added


def test_decode_round_trips_nfc_text(loaded) -> None:
    import unicodedata

    raw, hf, _ = loaded
    for text in SAMPLES:
        ids = raw.encode(text).ids
        assert hf.decode(ids) == unicodedata.normalize("NFC", text)


def test_pretokenizer_is_qwen2s(tiny_model_dir: Path) -> None:  # noqa: F811
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    spec = json.loads((tiny_model_dir / "tokenizer.json").read_text())
    assert spec["normalizer"]["type"] == "NFC"
    split, byte_level = spec["pre_tokenizer"]["pretokenizers"]
    assert split["pattern"]["Regex"] == PRETOKENIZE_REGEX
    assert byte_level["type"] == "ByteLevel" and byte_level["add_prefix_space"] is False
    assert spec["decoder"]["type"] == "ByteLevel"


def test_digits_are_single_tokens(loaded) -> None:
    raw, hf, _ = loaded
    ids = raw.encode("2024").ids
    assert [hf.decode([i]) for i in ids] == ["2", "0", "2", "4"]


def test_special_tokens_and_model_config(loaded) -> None:
    _, hf, model = loaded
    assert hf.convert_tokens_to_ids([ENDOFTEXT, IM_START, IM_END]) == [0, 1, 2]
    assert hf.eos_token == IM_END and hf.pad_token == ENDOFTEXT and hf.bos_token is None
    assert hf.encode(f"{IM_START}{IM_END}", add_special_tokens=False) == [1, 2]
    assert len(hf) == model.config.vocab_size == model.get_input_embeddings().weight.shape[0]
    assert model.config.model_type == "qwen2"
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.config.eos_token_id == 2
    assert set(model.generation_config.eos_token_id) == {0, 2}
    assert model.dtype == torch.float32
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64


def test_chat_template_is_chatml(loaded) -> None:
    _, hf, _ = loaded
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 7*6?"}]
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                    "<|im_start|>user\nWhat is 7*6?<|im_end|>\n<|im_start|>assistant\n")
    assert hf.chat_template == CHATML_TEMPLATE


def test_corpus_covers_gsm8k_markers() -> None:
    text = "\n".join(default_corpus())
    for marker in ("<think>", "</think>", "<answer>", "\\boxed{", "####", "<<"):
        assert marker in text
    assert default_corpus() == default_corpus()


def test_build_is_deterministic(tmp_path: Path, tiny_model_dir: Path) -> None:  # noqa: F811
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes()
        assert (other / name).read_bytes() == (tiny_model_dir / name).read_bytes()
    first = load_file(str(tiny_model_dir / "model.safetensors"))
    same = load_file(str(again / "model.safetensors"))
    different = load_file(str(other / "model.safetensors"))
    assert first.keys() == same.keys() == different.keys()
    assert all(torch.equal(first[k], same[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"],
                           different["model.embed_tokens.weight"])


def test_build_options_and_speed(tmp_path: Path) -> None:
    start = time.perf_counter()
    corpus = ["one two three four five six seven eight nine ten"] * 20 + ["12345 + 678 = 1023"]
    path = build_tiny_model(tmp_path / "m", vocab_size=300, hidden_size=32, num_layers=1,
                            num_heads=2, num_kv_heads=1, seed=3, corpus=corpus)
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert len(tokenizer) <= 300 and model.config.vocab_size == len(tokenizer)
    assert model.config.num_hidden_layers == 1 and model.config.hidden_size == 32
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    for text in SAMPLES:  # text outside the corpus still round-trips (byte level)
        assert tokenizer.encode(text, add_special_tokens=False) == raw.encode(text).ids


def test_model_forward_runs(loaded) -> None:
    _, hf, model = loaded
    ids = torch.tensor([hf.encode("What is 2 + 3?")])  # (1, T)
    with torch.no_grad():
        logits = model(ids).logits  # (1, T, V)
    assert logits.shape == (1, ids.shape[1], len(hf))
    assert torch.isfinite(logits).all()
