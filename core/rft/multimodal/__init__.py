"""Vision-language inputs: where images travel from a dataset row to the model's forward.

- :mod:`rft.multimodal.inputs`: :class:`MultiModalInputs`, the processor's vision tensors
  of one sequence (kept on :class:`rft.experience.Experience` and joined per micro-batch);
- :mod:`rft.multimodal.media`: image / video references of a row loaded and checked;
- :mod:`rft.multimodal.processor`: the model's own processor (chat rendering with image
  placeholders, their expansion into vision tokens, pixel tensors).

docs/multimodal.md describes the whole path.
"""

from rft.multimodal.inputs import MultiModalInputs, VisionPrompt, forward_inputs, join_inputs

__all__ = ["MultiModalInputs", "VisionPrompt", "forward_inputs", "join_inputs"]
