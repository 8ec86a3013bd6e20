"""SFT rows with images (``format.image_key`` on a train-only stage's dataset or a ``mix``
expert buffer): the prompt through the model's processor, the reply as for text.

One row is one :class:`~rft.experience.Experience` whose prompt ids are the processor's
(image placeholders expanded; :func:`rft.multimodal.processor.render_prompt`), whose
response ids are the reply's (:func:`rft.buffer.chat_render.reply_ids`, the same as for a
text row) and whose ``multi_modal_inputs`` are the images' tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from rft.buffer.chat_render import reply_ids
from rft.buffer.errors import TasksetError
from rft.chat_template import dataset_chat_template
from rft.config.schema import FormatConfig
from rft.experience import EID, Experience
from rft.multimodal.media import MediaError, load_images
from rft.multimodal.processor import render_prompt


def image_sft_experience(row: dict[str, Any], index: int, fmt: FormatConfig,
                         processor: Any, folder: str | None, where: str) -> Experience:
    """One SFT row with its images as an experience (module docstring).

    :raises TasksetError: one line naming the row and ``format.image_key`` for a missing or
        bad image; the text checks of :func:`rft.buffer.sft_data.sft_example`.
    """
    from rft.buffer.sft_data import present, sft_example

    example = sft_example(row, index, fmt, where)
    if example.concatenated:
        raise TasksetError(f"{where}: row {index + 1}: format.enable_concatenated_multi_turn "
                           f"is not supported with format.image_key")
    key = str(fmt.image_key)
    values = present(row)
    if key not in values:
        raise TasksetError(f"{where}: row {index + 1} has no key {key!r} (format.image_key); "
                           f"keys: {', '.join(values) or 'none'}")
    try:
        images = load_images(values[key], folder)
    except MediaError as exc:
        raise TasksetError(f"{where}: row {index + 1}: {key!r} (format.image_key): {exc}"
                           ) from exc
    prompt_ids, inputs = render_prompt(processor, example.prompt, images)
    response = reply_ids(processor.tokenizer, example.prompt, example.reply,
                         tools=example.tools, chat_template=dataset_chat_template(fmt),
                         where=f"{where}: row {index + 1}", what="the reply")
    return Experience(tokens=torch.tensor(prompt_ids + response, dtype=torch.long),
                      prompt_length=len(prompt_ids), reward=0.0,
                      eid=EID(batch="sft", task=index, run=0), multi_modal_inputs=inputs)
