"""Which chat template renders a conversation: one precedence for rollouts and training data.

For the policy model (rollouts, the OpenAI endpoint, and — unless a dataset names its own —
SFT / DPO / expert data), the first that is set wins:

1. ``explorer.rollout_model.chat_template`` (a template string for the rollout engine);
2. ``model.chat_template_path`` (a Jinja file; the guide: it overrides the next one);
3. ``model.custom_chat_template`` (a template string);
4. the tokenizer's own template (``chat_template`` in ``tokenizer_config.json`` /
   ``chat_template.jinja`` of the model folder).

A training dataset (``buffer.trainer_input.experience_buffer`` or an auxiliary buffer) may
set ``format.chat_template``: its rows are then rendered with that string, ahead of all
four (:func:`dataset_chat_template`). Tasksets' rollouts always use the model's template.
"""

from __future__ import annotations

import os
from typing import Any

from rft.config.schema import FormatConfig, RftConfig


def read_template_file(path: str | None) -> str | None:
    """The text of a Jinja template file (``None`` for no path)."""
    if not path:
        return None
    with open(os.path.expanduser(path), encoding="utf-8") as handle:
        return handle.read()


def model_chat_template(config: RftConfig) -> str | None:
    """The policy model's template by the precedence of the module docstring; ``None``: the
    tokenizer's own."""
    m, rm = config.model, config.explorer.rollout_model
    return (rm.chat_template or read_template_file(m.chat_template_path)
            or m.custom_chat_template)


def dataset_chat_template(fmt: FormatConfig) -> str | None:
    """The template a dataset's rows are rendered with on top of the model's:
    ``format.chat_template``; ``None``: the tokenizer's (which carries the model's)."""
    return fmt.chat_template or None


def load_tokenizer(config: RftConfig) -> Any:
    """The policy model's tokenizer with :func:`model_chat_template` applied (for reading
    training data where no engine holds one, e.g. the trainer's auxiliary buffers)."""
    from transformers import AutoTokenizer

    path = config.explorer.rollout_model.model_path or config.model.model_path
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=config.model.trust_remote_code)
    template = model_chat_template(config)
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer


__all__ = ["dataset_chat_template", "load_tokenizer", "model_chat_template",
           "read_template_file"]
