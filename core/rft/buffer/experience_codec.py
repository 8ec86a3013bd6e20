"""Experience codec: an :class:`~rft.experience.Experience` as a JSON-able dict and back
(the row format of the ``sql`` and ``file`` storages)."""

from __future__ import annotations

from typing import Any

import torch

from rft.experience import EID, Experience

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
                "step": exp.eid.step, "suffix": exp.eid.suffix},
        "model_version": exp.model_version,
        "info": exp.info,
        "metrics": exp.metrics,
        "response_text": exp.response_text,
    }
    for name in _TENSOR_FIELDS:
        value = getattr(exp, name)
        data[name] = None if value is None else value.tolist()
    return data


def experience_from_dict(data: dict[str, Any]) -> Experience:
    """Inverse of :func:`experience_to_dict`."""
    tensors = {}
    for name in _TENSOR_FIELDS:
        value = data.get(name)
        if value is not None:
            tensors[name] = torch.tensor(value, dtype=_DTYPES.get(name, torch.float32))
    return Experience(
        tokens=torch.tensor(data["tokens"], dtype=torch.long),
        prompt_length=int(data["prompt_length"]),
        reward=data.get("reward"),
        eid=EID(**data.get("eid", {})),
        model_version=int(data.get("model_version", 0)),
        info=data.get("info") or {},
        metrics=data.get("metrics") or {},
        response_text=data.get("response_text"),
        **tensors,
    )
