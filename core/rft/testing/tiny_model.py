"""A tiny Qwen2-style model built locally, for tests and laptop runs (no model hub).

:func:`build_tiny_model` writes a directory that ``AutoTokenizer.from_pretrained`` and
``AutoModelForCausalLM.from_pretrained`` (and vLLM) load like a real Qwen2 checkpoint:

- ``tokenizer.json`` / ``tokenizer_config.json``: a byte-level BPE trained with the
  ``tokenizers`` library on a locally generated GSM8K-style corpus. It uses **Qwen2's own
  normaliser (NFC) and pre-tokenizer (Qwen2's split regex, then byte-level without prefix
  space)**. ``AutoTokenizer`` rebuilds a ``Qwen2Tokenizer`` from the vocabulary and
  merges with exactly that pipeline, so ids agree with the ``tokenizers`` object; any
  other pre-tokenizer would be silently replaced and ids would change.
- ChatML special tokens ``<|endoftext|>`` (pad / bos, id 0), ``<|im_start|>`` (1),
  ``<|im_end|>`` (2, eos) and a ChatML chat template.
- ``config.json`` / ``model.safetensors``: a randomly initialised ``Qwen2ForCausalLM``
  with tied input / output embeddings; ``generation_config.json``.

Everything is deterministic: the tokenizer depends only on the corpus (the default
corpus is fixed), the weights only on ``seed``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)
"""ChatML special tokens, in id order (0, 1, 2)."""

try:  # Qwen2's own split regex, as transformers rebuilds it.
    from transformers.models.qwen2.tokenization_qwen2 import (
        PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX,
    )
except ImportError:  # pragma: no cover - layout of older / newer transformers
    QWEN2_PRETOKENIZE_REGEX = (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    )

CHATML_TEMPLATE = (
    "{%- set ns = namespace(system_done=false) %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] + '\\n\\n' }}{%- set ns.system_done = true %}"
    "{%- endif %}"
    "{{- 'Functions you may call, one <tool_call>{\"name\": ..., \"arguments\": {...}}'"
    " + '</tool_call> block per call:\\n<tools>\\n' }}"
    "{%- for tool in tools %}"
    "{{- ((tool['function'] if tool['function'] is defined else tool) | tojson) + '\\n' }}"
    "{%- endfor %}"
    "{{- '</tools><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if loop.first and ns.system_done %}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] is defined"
    " and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set function = call['function'] if call['function'] is defined else call %}"
    "{{- '<tool_call>\\n' + ({'name': function['name'], 'arguments': function['arguments']}"
    " | tojson) + '\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then
``<|im_start|>assistant\\n`` when ``add_generation_prompt``. With ``tools`` (OpenAI
function specs) a system turn first lists them, one JSON object per line between
``<tools>`` and ``</tools>`` (after the conversation's own system message, which it then
replaces), and asks for Hermes-style calls; an assistant message with ``tool_calls``
renders each as ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`` after its
content (the format the ``hermes`` tool-call parser reads)."""

_NAMES = ("Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis",
          "Tina", "Maria", "Sam", "Lee", "Omar", "Priya", "John", "Emma", "Noah")
_ITEMS = ("clips", "apples", "books", "pencils", "cookies", "marbles", "stickers", "eggs",
          "dollars", "pages", "cars", "flowers", "cups", "shirts", "balls", "candies")
_WORDS = (
    "the a an and or of to in on at for with by from is are was were be been has have had "
    "do does did will would can could should may might must not no yes it its this that "
    "these those he she they we you i his her their our your my me him them us who what "
    "when where why how which many much more less most least each every all some any "
    "total number times half twice double triple left remaining spent earned sold bought "
    "gave got made found lost paid costs price per hour day week month year minute "
    "answer question problem step solution therefore so then first second third next "
    "finally because if than as there here time money store school friend friends family "
    "mother father brother sister class students teacher people old new big small long "
    "think reason calculate compute add subtract multiply divide equals result final "
    "please let us solve carefully show your work put the answer in box user assistant "
    "system you are a helpful good great correct wrong true false one two three four five "
    "six seven eight nine ten hundred thousand percent fraction average ratio rate speed "
    "distance miles feet inches pounds kilograms hours minutes cents dozen pair pairs"
).split()
_UNICODE = ("café naïve résumé über Straße façade déjà vu ½ ¾ € £ ° × ÷ − ≤ ≥ π √ "
            "你好 世界 数学 答案 こんにちは Привет мир ¿qué? ¡sí! 🙂")


def default_corpus(*, num_problems: int = 600, seed: int = 1234) -> list[str]:
    """A locally generated GSM8K-style corpus (fixed for a ``seed``).

    Word problems with their worked answers in the formats rewards look for —
    ``<think>…</think>``, ``<answer>…</answer>``, ``\\boxed{…}``, ``#### n`` — plus common
    English words, digits, punctuation, whitespace runs and some non-ASCII text.
    """
    rng = random.Random(seed)
    lines: list[str] = []
    for _ in range(num_problems):
        name, other = rng.sample(_NAMES, 2)
        item = rng.choice(_ITEMS)
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        op = rng.choice("+-*/")
        if op == "+":
            question = (f"{name} has {a} {item}. {other} gives {name} {b} more. "
                        f"How many {item} does {name} have now?")
            result, work = a + b, f"{a} + {b} = {a + b}"
        elif op == "-":
            a, b = max(a, b), min(a, b)
            question = f"{name} had {a} {item} and gave {b} to {other}. How many {item} are left?"
            result, work = a - b, f"{a} - {b} = {a - b}"
        elif op == "*":
            question = f"{name} buys {a} boxes with {b} {item} each. How many {item} in total?"
            result, work = a * b, f"{a} * {b} = {a * b}"
        else:
            question = (f"{name} shares {a * b} {item} equally among {b} friends. "
                        "How many does each friend get?")
            result, work = a, f"{a * b} / {b} = {a}"
        lines.append(f"Question: {question}\nLet's think step by step.")
        style = rng.randrange(4)
        if style == 0:
            lines.append(f"<think>\n{work}\n</think>\n<answer>{result}</answer>")
        elif style == 1:
            lines.append(f"{work}. The answer is \\boxed{{{result}}}.")
        elif style == 2:
            lines.append(f"{name} computes <<{work}>>{result}.\n#### {result}")
        else:
            lines.append(f"<think> {work} </think> <answer> \\boxed{{{result}}} </answer>")
    for _ in range(200):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16)))
        lines.append(words.capitalize() + ".")
    lines.append(" ".join(str(d) for d in range(10)) + " 0123456789 3.14 1,000 -5 50% $12.50")
    lines.append("\t  indented\n\n  spaces   and\ttabs\r\nnew lines\n\n\n")
    lines.append("{ } [ ] ( ) < > = + - * / ^ _ | \\ : ; , . ? ! ' \" ` ~ @ # $ % &")
    lines.append(_UNICODE)
    return lines


def _train_tokenizer(corpus: list[str], vocab_size: int):
    """Train the byte-level BPE ``tokenizers.Tokenizer`` with Qwen2's pipeline."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None, continuing_subword_prefix="",
                                     end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def build_tiny_model(
    out_dir: str | Path,
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    intermediate_size: int | None = None,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    max_position_embeddings: int = 2048,
    seed: int = 0,
    corpus: list[str] | None = None,
) -> Path:
    """Write a tiny Qwen2 checkpoint (tokenizer + random weights) to ``out_dir``.

    :param vocab_size: target BPE vocabulary size (256 bytes + 3 specials + merges); the
        model's embedding has exactly ``len(tokenizer)`` rows.
    :param hidden_size: model width; ``intermediate_size`` defaults to ``4 * hidden_size``.
    :param num_layers, num_heads, num_kv_heads: decoder depth, query heads, key/value
        heads (grouped-query attention as in Qwen2).
    :param seed: seed of the weight initialisation (the tokenizer does not depend on it).
    :param corpus: tokenizer training texts; ``None``: :func:`default_corpus`.
    :return: ``out_dir`` as a :class:`~pathlib.Path`.
    """
    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _train_tokenizer(corpus if corpus is not None else default_corpus(), vocab_size)
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=max_position_embeddings,
        clean_up_tokenization_spaces=False,
    )
    hf_tokenizer.chat_template = CHATML_TEMPLATE
    hf_tokenizer.save_pretrained(str(out))
    # Load as a real Qwen2 checkpoint does (same ids: see the module docstring).
    config_path = out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "Qwen2Tokenizer"
    tokenizer_config["chat_template"] = CHATML_TEMPLATE
    tokenizer_config.pop("auto_map", None)
    config_path.write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n",
                           encoding="utf-8")

    config = Qwen2Config(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},  # (rope_theta before 5.0)
        tie_word_embeddings=True,
        bos_token_id=ids[ENDOFTEXT],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[ENDOFTEXT],
        use_sliding_window=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        model.float()
    model.generation_config = GenerationConfig(
        bos_token_id=ids[ENDOFTEXT],
        eos_token_id=[ids[IM_END], ids[ENDOFTEXT]],
        pad_token_id=ids[ENDOFTEXT],
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    )
    model.save_pretrained(str(out))
    return out


def teach_replies(model_dir: str | Path, examples: list[tuple[list[int], list[int]]], *,
                  max_steps: int = 600, lr: float = 3e-3, seed: int = 0) -> int:
    """Fine-tune the model at ``model_dir`` in place until greedy decoding answers each
    ``(prompt ids, reply ids)`` example with exactly its reply; return the steps taken.

    For tests of behaviour a random model never shows (tool calls, reasoning): full-batch
    Adam on the reply tokens' cross-entropy ``−Σ log p(reply_t | prompt, reply_<t)``,
    stopped once every reply token is the argmax given the ones before it (then greedy
    decoding reproduces the replies token for token). Raises ``RuntimeError`` when
    ``max_steps`` do not get there.
    """
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    length = max(len(p) + len(r) for p, r in examples)
    tokens = torch.zeros(len(examples), length, dtype=torch.long)  # (B, L), right-padded
    targets = torch.full((len(examples), length), -100, dtype=torch.long)  # (B, L)
    attention = torch.zeros(len(examples), length, dtype=torch.long)  # (B, L)
    for row, (prompt, reply) in enumerate(examples):
        sequence = list(prompt) + list(reply)
        tokens[row, :len(sequence)] = torch.tensor(sequence)
        attention[row, :len(sequence)] = 1
        targets[row, len(prompt) - 1:len(sequence) - 1] = torch.tensor(reply)  # next token
    reply_positions = targets != -100  # (B, L)
    for step in range(max_steps):
        logits = model(input_ids=tokens, attention_mask=attention).logits  # (B, L, V)
        if bool((logits.argmax(-1)[reply_positions] == targets[reply_positions]).all()):
            model.eval()
            model.save_pretrained(str(model_dir))
            return step
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                                 ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    raise RuntimeError(f"teach_replies: the model at {model_dir} did not learn the replies in "
                       f"{max_steps} steps")
