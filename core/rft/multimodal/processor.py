"""The model's own processor: chat rendering with image placeholders and pixel tensors.

:func:`load_processor` is ``AutoProcessor.from_pretrained``. Qwen2-VL-family processors
also own a *video* processor, which transformers builds only with torchvision installed;
without it (the CPU set of this project removes torchvision, docs/multimodal.md) the same
processor class is built with its image processor and tokenizer only — the chat expansion
and the pixel tensors are the class's own code, only videos are then refused.

:func:`render_prompt` renders a chat whose user turns carry images (``{"type": "image"}``
content parts) and returns the prompt token ids, with every image placeholder expanded
into the vision tokens the model expects, and the :class:`MultiModalInputs` — the same
call on the engine and the trainer side, so both see the same ids.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any


from rft.errors import RftError
from rft.multimodal.inputs import MultiModalInputs


def _image_only(processor_class: type, path: str) -> Any:
    """``processor_class`` (a ``ProcessorMixin`` subclass) with its image processor and
    tokenizer only (no video processor): a subclass that declares just those two."""
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.processing_utils import ProcessorMixin

    tokenizer = AutoTokenizer.from_pretrained(path)
    image_processor = AutoImageProcessor.from_pretrained(path)
    template_file = Path(path) / "chat_template.jinja"
    chat_template = (template_file.read_text(encoding="utf-8") if template_file.is_file()
                     else getattr(tokenizer, "chat_template", None))

    def get_attributes(cls: type) -> list[str]:
        return ["image_processor", "tokenizer"]

    def init(self: Any, image_processor: Any, tokenizer: Any, chat_template: Any = None,
             **_: Any) -> None:
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)

    image_only = type(processor_class.__name__, (processor_class,),
                      {"get_attributes": classmethod(get_attributes), "__init__": init,
                       "video_processor": None})
    return image_only(image_processor, tokenizer, chat_template=chat_template)


def load_processor(path: str, *, key: str = "model.model_path") -> Any:
    """The processor saved with the model at ``path`` (``AutoProcessor``; image-only when
    transformers cannot build the video processor here, see the module docstring).

    :raises RftError: one line naming ``key`` when ``path`` has no usable processor.
    """
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path)
    except (AttributeError, ImportError) as exc:  # video processor without torchvision
        config = Path(path) / "processor_config.json"
        if not config.is_file():
            raise RftError(f"{key}: cannot load the processor of {path!r}: "
                           f"{str(exc).splitlines()[0]}") from exc
        import transformers

        name = json.loads(config.read_text(encoding="utf-8")).get("processor_class", "")
        processor_class = getattr(transformers, str(name), None)
        if not isinstance(processor_class, type):
            raise RftError(f"{key}: unknown processor class {name!r} in {config}") from exc
        return _image_only(processor_class, path)
    except (OSError, ValueError) as exc:
        raise RftError(f"{key}: cannot load the processor of {path!r}: "
                       f"{str(exc).splitlines()[0]}") from exc


def is_multimodal_model(path: str) -> bool:
    """Whether the model folder at ``path`` is a vision-language model (its config has a
    ``vision_config``)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        return "vision_config" in json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def image_messages(messages: Sequence[dict[str, Any]], num_images: int
                   ) -> list[dict[str, Any]]:
    """``messages`` with ``num_images`` image parts put before the text of the first user
    turn (Trinity-RFT's ``simple_mm_workflow`` layout) unless some turn already has image
    parts; string contents become ``[{"type": "text", "text": …}]``."""
    out: list[dict[str, Any]] = []
    has_parts = any(isinstance(m.get("content"), list) and any(
        isinstance(p, dict) and p.get("type") == "image" for p in m["content"])
        for m in messages)
    placed = has_parts or num_images == 0
    for message in messages:
        content = message.get("content")
        parts: list[dict[str, Any]] = (list(content) if isinstance(content, list)
                                       else [{"type": "text", "text": content or ""}])
        if not placed and message.get("role") == "user":
            parts = [{"type": "image"} for _ in range(num_images)] + parts
            placed = True
        out.append({**message, "content": parts})
    return out


def render_prompt(processor: Any, messages: Sequence[dict[str, Any]], images: Sequence[Any],
                  *, add_generation_prompt: bool = True
                  ) -> tuple[list[int], MultiModalInputs | None]:
    """The prompt ids of ``messages`` with ``images`` (PIL images, in placeholder order)
    and their vision inputs: the processor's chat template, then the processor itself
    (which expands each image placeholder into ``t·h·w / merge²`` image tokens)."""
    chat = image_messages(messages, len(images))
    text = processor.apply_chat_template(chat, tokenize=False,
                                         add_generation_prompt=add_generation_prompt)
    outputs = processor(text=[text], images=list(images) or None, return_tensors="pt")
    ids = outputs["input_ids"][0]  # (L,)
    return [int(t) for t in ids.tolist()], MultiModalInputs.from_processor(outputs)


PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json",
                   "video_preprocessor_config.json", "chat_template.jinja",
                   "chat_template.json")
"""The processor's own files beside a checkpoint (the tokenizer's are saved with it)."""


def copy_processor_files(source: str, target: str) -> list[str]:
    """Copy the processor files of the model folder ``source`` into ``target`` (an
    exported / checkpointed model); return the names copied (none for a text model or a
    hub id)."""
    copied = []
    for name in PROCESSOR_FILES:
        path = Path(source) / name
        if path.is_file():
            shutil.copyfile(path, Path(target) / name)
            copied.append(name)
    return copied
