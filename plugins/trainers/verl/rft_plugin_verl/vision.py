"""Vision-language rows for veRL's actor (Qwen2-VL / Qwen2.5-VL).

veRL 0.9.1's FSDP engine runs a Qwen2-VL actor through its own patched forward
(``verl.models.transformers.qwen2_vl``), which takes from each micro-batch:

- ``multi_modal_inputs``: one dict per row (``pixel_values`` ``(N_b, D)``,
  ``image_grid_thw`` ``(n_b, 3)``, …; ``{}`` for a text row), a non-tensor stack that
  veRL concatenates in row order (``verl.utils.model.extract_multi_modal_inputs``) — the
  same joining as :func:`rft.multimodal.join_inputs`;
- ``position_ids`` ``(B, 4, L)``: per row the text positions (row 0, ``Batch.position_ids``)
  stacked on the 3-D rope index ``(t, h, w)`` of Qwen2-VL (rows 1–3), computed by veRL's
  own ``get_rope_index`` from the row's tokens and image grids — the positions Qwen2-VL's
  own forward derives for the torch trainer.

The processor (for the merge size and the vision token ids) is the model's, loaded with
:func:`rft.multimodal.processor.load_processor` (image-only without torchvision).
"""

from __future__ import annotations

import torch
from rft.experience import Batch


class VisionRows:
    """The per-row vision inputs and 3-D positions of batches for one model.

    :param model_path: the actor's checkpoint folder (its processor is read once).
    """

    def __init__(self, model_path: str) -> None:
        from rft.multimodal.processor import load_processor

        self.processor = load_processor(model_path)

    def position_ids(self, batch: Batch) -> torch.Tensor:
        """``(B, 4, L)``: text positions over veRL's 3-D rope index, row by row (padding
        columns: 0 for the text row, 1 for the rope rows, as veRL's dataset has them)."""
        from verl.models.transformers.qwen2_vl import get_rope_index

        rows = []
        for b, inputs in enumerate(batch.multi_modal_inputs):
            grid = None if inputs is None else inputs.image_grid_thw
            videos = None if inputs is None else inputs.video_grid_thw
            rope = get_rope_index(self.processor, input_ids=batch.input_ids[b],
                                  image_grid_thw=grid, video_grid_thw=videos,
                                  attention_mask=batch.attention_mask[b])  # (3, L)
            rows.append(torch.cat([batch.position_ids[b].unsqueeze(0), rope], dim=0))  # (4, L)
        return torch.stack(rows)  # (B, 4, L)

    @staticmethod
    def multi_modal_inputs(batch: Batch) -> list[dict[str, torch.Tensor]]:
        """One dict of the row's vision tensors per row (``{}`` for a text row)."""
        return [{} if inputs is None else inputs.model_kwargs()
                for inputs in batch.multi_modal_inputs]

