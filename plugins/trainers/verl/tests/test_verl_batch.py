"""Experiences → veRL's batch: malformed experiences are one line before veRL sees them;
rft's padded layout packs into veRL's no-padding layout and veRL's per-token outputs come
back as ``(B, T)`` over the response positions (fast: veRL's padding helpers only)."""

from __future__ import annotations

import pytest
import torch
from rft.errors import RftError
from rft.experience import EID, Experience, pad_batch
from rft_plugin_verl.batch import check_experiences, response_tensor, to_tensordict


def experiences() -> list[Experience]:
    g = torch.Generator().manual_seed(0)
    shapes = [(3, 4), (1, 2), (5, 3)]  # (prompt, response)
    return [Experience(tokens=torch.randint(1, 50, (p + r,), generator=g), prompt_length=p,
                       reward=1.0, eid=EID(task=i)) for i, (p, r) in enumerate(shapes)]


def test_malformed_experiences_are_one_line() -> None:
    rows = experiences()
    check_experiences(rows, vocab_size=50)
    rows[1].logprobs = torch.zeros(5)
    with pytest.raises(RftError, match=r"^experience 1 \(eid .*\): logprobs has shape \(5,\) "
                                       r"but the response has 2 tokens$"):
        check_experiences(rows, vocab_size=50)
    rows = experiences()
    rows[2].tokens[0] = 50
    with pytest.raises(RftError, match=r"^experience 2 .*token ids must be in \[0, 50\)"):
        check_experiences(rows, vocab_size=50)
    rows = experiences()
    rows[0].reward = float("nan")
    with pytest.raises(RftError, match=r"^experience 0 .*: reward is nan$"):
        check_experiences(rows, vocab_size=None)


def test_no_padding_layout_round_trip() -> None:
    """Each sequence packed without padding; a per-token model output (here the input ids
    themselves) read back at the response positions, shifted by one as veRL's log-probs are
    (position ``t`` scores token ``t + 1``): row ``b`` holds tokens ``P_b − 1 …
    P_b + R_b − 2``, zeros after its response."""
    rows = experiences()
    batch = pad_batch(rows, pad_token_id=0)
    data = to_tensordict(batch, {"advantages": torch.ones_like(batch.response_mask)})
    assert data["input_ids"].is_nested
    assert data["input_ids"].offsets().diff().tolist() == [7, 3, 8]  # prompt + response
    assert torch.equal(data["advantages"], torch.ones(3, 4))
    back = response_tensor(data["input_ids"], data)  # (B, T)
    assert back.shape == (3, 4)
    for b, e in enumerate(rows):
        p, r = e.prompt_length, e.response_length
        assert back[b, :r].tolist() == e.tokens[p - 1: p + r - 1].float().tolist()
        assert back[b, r:].abs().sum() == 0
