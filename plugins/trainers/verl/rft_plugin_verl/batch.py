"""Experiences → veRL's batch (a ``TensorDict`` in veRL's no-padding layout).

rft pads a batch as veRL's rollout does (:class:`rft.experience.Batch`: prompts
left-padded to ``P``, responses right-padded to ``T``), so the columns map one to one:

=====================  ==========================================  ==========
veRL key               from                                        shape
=====================  ==========================================  ==========
``input_ids``          ``Batch.input_ids``                         (B, P + T)
``attention_mask``     ``Batch.attention_mask``                    (B, P + T)
``position_ids``       ``Batch.position_ids``                      (B, P + T)
                       (vision models: over the 3-D rope index)    (B, 4, P + T)
``multi_modal_inputs`` the rows' vision tensors (vision models)    B dicts
``prompts``            ``input_ids[:, :P]``                        (B, P)
``responses``          ``input_ids[:, P:]``                        (B, T)
``response_mask``      ``Batch.response_mask`` (the action mask)   (B, T)
``old_log_probs``,     computed by the trainer, or the
``ref_log_prob``,      experiences' (advantages, returns)          (B, T)
``advantages``, …
=====================  ==========================================  ==========

then veRL's own ``left_right_2_no_padding`` packs ``input_ids`` / ``position_ids`` into
nested (jagged) tensors; what the trainer sends with each call (mini-batch size, epochs,
temperature, …) are veRL's non-tensor keys (``tensordict_utils.assign_non_tensor``).
"""

from __future__ import annotations

from typing import Any

import torch
from rft.errors import RftError
from rft.experience import Batch, Experience

from rft_plugin_verl.vision import VisionRows

PER_TOKEN = ("logprobs", "action_mask", "token_level_reward", "advantages", "returns")
"""``Experience`` fields with one value per response token."""


def check_experiences(experiences: list[Experience], vocab_size: int | None) -> None:
    """One-line :class:`RftError` naming the first malformed experience (a per-token field
    whose length is not the response's, a token id outside the vocabulary, a non-finite
    reward) — before veRL's workers would fail on it with a traceback."""
    for i, e in enumerate(experiences):
        where = f"experience {i} (eid {e.eid.uid})"
        for name in PER_TOKEN:
            value = getattr(e, name)
            if value is not None and (value.dim() != 1 or value.numel() != e.response_length):
                raise RftError(f"{where}: {name} has shape {tuple(value.shape)} but the "
                               f"response has {e.response_length} tokens")
        if e.reward is not None and not torch.isfinite(torch.tensor(float(e.reward))):
            raise RftError(f"{where}: reward is {e.reward}")
        if vocab_size is not None and e.tokens.numel() and (
                int(e.tokens.min()) < 0 or int(e.tokens.max()) >= vocab_size):
            raise RftError(f"{where}: token ids must be in [0, {vocab_size}), got "
                           f"{int(e.tokens.min())}..{int(e.tokens.max())}")


def to_tensordict(batch: Batch, extra: dict[str, torch.Tensor] | None = None,
                  vision: VisionRows | None = None) -> Any:
    """``batch`` (and ``extra`` per-row tensors, ``(B, T)`` or ``(B,)``) as veRL's
    no-padding ``TensorDict``. ``vision``: the actor is a vision-language model — the
    position ids become ``(B, 4, L)`` (text over the 3-D rope index) and each row's vision
    tensors go in ``multi_modal_inputs`` (:mod:`rft_plugin_verl.vision`)."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    width = batch.prompt_width
    tensors: dict[str, torch.Tensor] = {
        "input_ids": batch.input_ids,  # (B, P + T)
        "attention_mask": batch.attention_mask,  # (B, P + T)
        "position_ids": batch.position_ids,  # (B, P + T)
        "prompts": batch.input_ids[:, :width],  # (B, P)
        "responses": batch.input_ids[:, width:],  # (B, T)
        "response_mask": batch.response_mask.float(),  # (B, T)
    }
    for name, value in (extra or {}).items():
        tensors[name] = value.float() if value.is_floating_point() else value
    positions = vision.position_ids(batch) if vision is not None else None  # (B, 4, P + T)
    if positions is not None:
        tensors["position_ids"] = positions
    data = left_right_2_no_padding(TensorDict(tensors, batch_size=[batch.input_ids.shape[0]]))
    if vision is not None and positions is not None:
        # ragged over the sequence (dim 2): veRL's jagged stack of the rows' (4, L_b)
        # picks the "4" axis as ragged when all rows have the same length, and its
        # micro-batching then fails in torch's unbind (pytorch#153238)
        rows = [p[:, m.bool()] for p, m in zip(positions, batch.attention_mask)]  # (4, L_b)
        data["position_ids"] = tu.nested_tensor_from_tensor_list(rows, ragged_idx=2)
        tu.assign_non_tensor_stack(data, "multi_modal_inputs", vision.multi_modal_inputs(batch))
    return data


def response_tensor(nested: torch.Tensor, data: Any) -> torch.Tensor:
    """A per-token model output of veRL (no-padding, one row per sequence, prompt and
    response) as ``(B, T)`` over the response positions."""
    from verl.workers.utils.padding import no_padding_2_padding

    return no_padding_2_padding(nested, data).float()  # (B, T)
