"""A tiny random Qwen2-VL model and its processor, built offline (tests, the VLM example).

:func:`build_tiny_vision_model` writes a folder that loads like a real Qwen2-VL
checkpoint (``AutoProcessor`` — see :func:`rft.multimodal.processor.load_processor`
without torchvision — and ``AutoModelForImageTextToText``):

- the tokenizer of :func:`rft.testing.tiny_model.build_tiny_model` (its corpus plus
  :data:`VISION_WORDS`) plus Qwen2-VL's vision
  special tokens ``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``,
  ``<|video_pad|>`` and a ChatML chat template whose ``{"type": "image"}`` content parts
  render as ``<|vision_start|><|image_pad|><|vision_end|>`` (the processor expands the pad
  into one token per merged patch group);
- ``preprocessor_config.json``: Qwen2-VL's image processor with small patches (4 px,
  merge 2: one image token per 8×8 pixels) and a pixel range of
  ``[min_pixels, max_pixels]`` (images are resized into it);
- ``config.json`` / ``model.safetensors``: a random ``Qwen2VLForConditionalGeneration``
  (a ``vision_depth``-block vision tower, a ``num_layers``-layer language model, 3-D
  rope sections) in float32.

Deterministic: the tokenizer depends on the corpus only, the weights on ``seed`` only.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rft.testing.tiny_model import CHATML_TEMPLATE, build_tiny_model, default_corpus

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
VISION_TOKENS: tuple[str, ...] = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)

MM_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' or 'image' in part %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' or 'video' in part %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in part %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML with image / video content parts (Qwen2-VL's placeholder layout)."""

VISION_WORDS = ("red green blue yellow black white orange purple colour color shape "
                "square circle disc triangle largest smallest biggest image picture left "
                "right top bottom Which What How many Answer with one word")
"""Words of visual questions added to the tokenizer's corpus (each becomes one token, so a
toy answer like ``red`` or ``yellow`` is a single token)."""


def vision_corpus() -> list[str]:
    """:func:`~rft.testing.tiny_model.default_corpus` plus :data:`VISION_WORDS`, each word
    alone and in a sentence, 64 times: frequent enough to be merged into whole tokens."""
    words = VISION_WORDS.split()
    return default_corpus() + [w for w in words for _ in range(64)] + [" ".join(words)] * 64


def build_tiny_vision_model(
    out_dir: str | Path,
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    vision_depth: int = 2,
    vision_dim: int = 32,
    patch_size: int = 4,
    merge_size: int = 2,
    min_pixels: int = 8 * 8,
    max_pixels: int = 64 * 64,
    seed: int = 0,
) -> Path:
    """Write the tiny Qwen2-VL checkpoint and processor to ``out_dir`` (module docstring).

    :param hidden_size, num_layers, num_heads, num_kv_heads: the language model (head
        size ``hidden_size / num_heads``, split into the 3-D rope sections t / h / w).
    :param vision_depth, vision_dim: blocks and width of the vision tower (2 heads).
    :param patch_size, merge_size: pixels per patch side; patches merged per side into
        one image token.
    :param min_pixels, max_pixels: the image processor's pixel range (images are resized
        to a multiple of ``patch_size · merge_size`` inside it).
    :return: ``out_dir`` as a :class:`~pathlib.Path`.
    """
    from transformers import (
        AutoTokenizer,
        GenerationConfig,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    out = Path(out_dir)
    build_tiny_model(out, vocab_size=vocab_size, hidden_size=hidden_size,
                     num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
                     seed=seed, corpus=vision_corpus())  # the tokenizer (weights: below)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>",
                                                                *VISION_TOKENS]})
    tokenizer.chat_template = MM_CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out))
    vocab = tokenizer.get_vocab()
    ids = {t: vocab[t] for t in VISION_TOKENS}
    eos, pad = vocab["<|im_end|>"], vocab["<|endoftext|>"]

    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch_size, merge_size=merge_size, temporal_patch_size=2,
        min_pixels=min_pixels, max_pixels=max_pixels,
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels})
    image_processor.save_pretrained(str(out))
    preprocessor = out / "preprocessor_config.json"
    settings = json.loads(preprocessor.read_text(encoding="utf-8"))
    settings["image_processor_type"] = "Qwen2VLImageProcessor"  # the auto class picks a backend
    preprocessor.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n",
                            encoding="utf-8")
    (out / "chat_template.jinja").write_text(MM_CHAT_TEMPLATE, encoding="utf-8")
    (out / "processor_config.json").write_text(
        json.dumps({"processor_class": "Qwen2VLProcessor"}, indent=2) + "\n", encoding="utf-8")

    head_dim = hidden_size // num_heads
    temporal = head_dim // 2 - 2 * (head_dim // 6)
    sections = [temporal, head_dim // 6, head_dim // 6]  # Σ = head_dim / 2
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": hidden_size,
            "intermediate_size": 4 * hidden_size, "num_hidden_layers": num_layers,
            "num_attention_heads": num_heads, "num_key_value_heads": num_kv_heads,
            "max_position_embeddings": 2048, "bos_token_id": pad, "eos_token_id": eos,
            "pad_token_id": pad,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                "mrope_section": sections},
        },
        vision_config={
            "depth": vision_depth, "embed_dim": vision_dim, "hidden_size": hidden_size,
            "num_heads": 2, "mlp_ratio": 2, "patch_size": patch_size,
            "spatial_merge_size": merge_size, "temporal_patch_size": 2, "in_channels": 3,
        },
        image_token_id=ids[IMAGE_PAD], video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START], vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
        model.float()
    model.generation_config = GenerationConfig(
        bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad, do_sample=True,
        temperature=1.0, top_p=1.0, top_k=0)
    for stale in out.glob("model*.safetensors*"):
        stale.unlink()
    model.save_pretrained(str(out))
    return out


__all__ = ["CHATML_TEMPLATE", "MM_CHAT_TEMPLATE", "build_tiny_vision_model"]
