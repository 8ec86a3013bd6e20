"""Experience codec: an :class:`~rft.experience.Experience` as a JSON-able dict and back
(the row format of the ``sql`` and ``file`` storages)."""

from __future__ import annotations

from typing import Any

import torch

from rft.experience import EID, Experience
from rft.multimodal.inputs import MultiModalInputs

_TENSOR_FIELDS = ("token_level_reward", "logprobs", "action_mask", "advantages", "returns",
                  "teacher_logprobs", "token_versions")
_DTYPES = {"action_mask": torch.bool, "token_versions": torch.long}
"""Tensor fields that are not float32."""


def experience_to_dict(exp: Experience) -> dict[str, Any]:
    """JSON-able form of an experience (tensors as lists)."""
    data: dict[str, Any] = {
        "tokens": exp.tokens.tolist(),
        "prompt_length": exp.prompt_length,
        "reward": exp.reward,
        "eid": {"batch": exp.eid.batch, "task": exp.eid.task, "run": exp.eid.run,
                "step": exp.eid.step, "suffix": exp.eid.suffix,
                "taskset": exp.eid.taskset},
        "model_version": exp.model_version,
        "info": exp.info,
        "metrics": exp.metrics,
        "response_text": exp.response_text,
    }
    for name in _TENSOR_FIELDS:
        value = getattr(exp, name)
        data[name] = None if value is None else value.tolist()
    if exp.multi_modal_inputs is not None:  # vision inputs: float32 patches, int64 grids
        data["multi_modal_inputs"] = {k: v.tolist() for k, v in
                                      exp.multi_modal_inputs.model_kwargs().items()}
    return data


def experience_from_dict(data: dict[str, Any]) -> Experience:
    """Inverse of :func:`experience_to_dict`."""
    tensors: dict[str, torch.Tensor | None] = {}
    for name in _TENSOR_FIELDS:
        value = data.get(name)
        tensors[name] = (None if value is None
                         else torch.tensor(value, dtype=_DTYPES.get(name, torch.float32)))
    vision = data.get("multi_modal_inputs")
    return Experience(
        tokens=torch.tensor(data["tokens"], dtype=torch.long),
        prompt_length=int(data["prompt_length"]),
        reward=data.get("reward"),
        eid=EID(**data.get("eid", {})),
        model_version=int(data.get("model_version", 0)),
        info=data.get("info") or {},
        metrics=data.get("metrics") or {},
        response_text=data.get("response_text"),
        token_level_reward=tensors["token_level_reward"],
        logprobs=tensors["logprobs"],
        action_mask=tensors["action_mask"],
        advantages=tensors["advantages"],
        returns=tensors["returns"],
        teacher_logprobs=tensors["teacher_logprobs"],
        token_versions=tensors["token_versions"],
        multi_modal_inputs=(None if vision is None else MultiModalInputs(**{
            k: torch.tensor(v, dtype=torch.long if k.endswith("grid_thw") else torch.float32)
            for k, v in vision.items()})),
    )
