"""Operations of Llama-layout decoder layers (Qwen2, Llama) used by the explorer's lean
decoder (:mod:`rft.engines.lean_decoder`); the same arithmetic as ``transformers``'
modules. (The trainer packs shared prefixes through the model's own forward instead:
:mod:`rft.trainer.packed_forward`.)"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight ⊙ x / sqrt(mean(x²) + eps)``, computed in float32 (as the model's
    RMSNorm), then back to ``x``'s dtype; ``x`` ``(…, H)``."""
    dtype = x.dtype
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[a, b] → [−b, a]`` over the last dimension (RoPE's rotation)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
