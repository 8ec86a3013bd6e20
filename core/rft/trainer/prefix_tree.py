"""Prefix-tree packing of a batch's rows: every token that rows share with their prefix is
computed once.

A row of a :class:`~rft.trainer.batching.TensorBatch` is a left-padded prompt (columns
``0 … P−1``) and a right-padded response (``P … P+R−1``); its *sequence* is its valid
tokens, each a pair ``(token id, position id)``. Two rows whose sequences agree on their
first ``k`` pairs have the same hidden states there (a causal decoder's output at ``t``
depends on pairs ``0 … t`` only), so those ``k`` tokens need one computation. Rows are
merged into a trie — GRPO's ``n`` rollouts of a prompt share the prompt; the turns of a
multi-turn episode share their history (turn ``k + 1``'s prompt holds turn ``k``'s whole
row) — and each trie node is one token of a *pack*::

    rows   a b c d        (prompt p1 p2, responses a…, b…)
           p1 p2 a1 a2
           p1 p2 b1
    pack   p1 p2 a1 a2 b1                 allowed[q, k] = k is q or an ancestor of q
    mask   p1: p1                         (the 4-D mask the model's attention reads)
           p2: p1 p2
           a1: p1 p2 a1
           a2: p1 p2 a1 a2
           b1: p1 p2       b1

Rows sorted in lexicographic order of their sequences: the longest prefix a row shares
with any earlier row is the one it shares with the row just before it (the trie in one
pass). A row starts a new pack unless it shares at least the shorter prompt of the two
rows with the previous row (rows that share only a system prompt are not worth one
quadratic mask), and when the pack would pass ``max_pack_tokens`` or its mask would hold
more than ``mask_budget`` times the elements of the plain forward's masks of its rows
(``N² ≤ mask_budget · k · W²`` for ``k`` rows of padded width ``W``): a pack's attention
and mask grow with ``N²``, so a group of many long responses becomes several packs, each
with the shared prompt once.

The model's output at a row's sequence index ``t`` scores index ``t + 1``; the response
token at column ``P + j`` is scored by the output at index ``ℓ_p + j − 1`` (``ℓ_p``: the
row's prompt length), which :attr:`PackedLayout.source` records.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedLayout:
    """Packs of trie nodes and where each row's scoring outputs sit in them."""

    input_ids: torch.Tensor
    """``(G, N)`` token ids of ``G`` packs, right-padded with 0 to the longest, ``N``."""
    position_ids: torch.Tensor
    """``(G, N)`` the rows' own position ids of each node (0 on padding)."""
    allowed: torch.Tensor
    """``(G, 1, N, N)`` bool: query node ``q`` may attend key node ``k`` (an ancestor or
    itself; a padding node sees itself only, so no softmax row is empty)."""
    source: torch.Tensor
    """``(B, R)`` flat index ``g·N + n`` of the node whose output scores response column
    ``P + j`` of row ``b``; ``-1`` where that column is padding."""
    lengths: tuple[int, ...]
    """Each pack's real length (nodes before its padding)."""

    @property
    def tokens(self) -> int:
        """Nodes computed (the packs' real lengths summed)."""
        return sum(self.lengths)


def unpackable_reason(attention_mask: torch.Tensor, prompt_width: int) -> str | None:
    """Why the rows are not a left-padded prompt followed by a right-padded response (so
    that column ``c − 1`` of a valid response column ``c`` is the previous valid token);
    ``None`` if they are. ``attention_mask``: ``(B, P+R)``."""
    mask = attention_mask.bool()
    prompt, response = mask[:, :prompt_width], mask[:, prompt_width:]
    if prompt_width == 0 or not bool(prompt[:, -1].all()):
        return "a row has an empty prompt"
    if bool((prompt[:, 1:] < prompt[:, :-1]).any()):
        return "a prompt is not left-padded"
    if bool((response[:, 1:] > response[:, :-1]).any()):
        return "a response is not right-padded"
    return None


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor,
              position_ids: torch.Tensor, prompt_width: int,
              max_pack_tokens: int | None = None, mask_budget: float | None = 4.0
              ) -> PackedLayout:
    """The prefix-tree packs of ``(B, P+R)`` rows (module docstring); the rows must pass
    :func:`unpackable_reason`. ``max_pack_tokens``: start a new pack rather than grow one past
    this many nodes; ``mask_budget``: nor past ``N² > mask_budget · k · (P+R)²`` (``None``:
    no limit)."""
    rows, total = input_ids.shape
    width = total - prompt_width
    mask = attention_mask.bool().cpu()
    ids_list = input_ids.cpu().tolist()
    pos_list = position_ids.cpu().tolist()
    valid_list = mask.tolist()
    prompt_lengths = mask[:, :prompt_width].sum(-1).tolist()
    response_lengths = mask[:, prompt_width:].sum(-1).tolist()
    sequences: list[list[tuple[int, int]]] = [
        [(i, p) for i, p, v in zip(ids_list[b], pos_list[b], valid_list[b], strict=True) if v]
        for b in range(rows)]
    order = sorted(range(rows), key=lambda b: sequences[b])
    packs: list[list[tuple[int, int]]] = []  # per pack, its nodes' (id, position)
    paths: list[list[int]] = [[] for _ in range(rows)]  # per row, its nodes in its pack
    pack_of = [0] * rows
    pack_rows_count: list[int] = []  # rows per pack
    previous: int | None = None
    for b in order:
        seq = sequences[b]
        shared = 0
        if previous is not None:
            before = sequences[previous]
            limit = min(len(before), len(seq))
            while shared < limit and before[shared] == seq[shared]:
                shared += 1
        grown = len(packs[-1]) + len(seq) - shared if packs else 0
        joins = (previous is not None
                 and shared >= min(prompt_lengths[previous], prompt_lengths[b])
                 and (max_pack_tokens is None or grown <= max_pack_tokens)
                 and (mask_budget is None
                      or grown ** 2 <= mask_budget * (pack_rows_count[-1] + 1) * total ** 2))
        if joins and previous is not None:
            pack_rows_count[-1] += 1
            pack = packs[-1]
            start = len(pack)
            paths[b] = paths[previous][:shared] + list(range(start, start + len(seq) - shared))
            pack.extend(seq[shared:])
        else:
            packs.append(list(seq))
            pack_rows_count.append(1)
            paths[b] = list(range(len(seq)))
        pack_of[b] = len(packs) - 1
        previous = b
    longest = max((len(p) for p in packs), default=0)
    count = len(packs)
    flat_nodes = [node for pack in packs for node in pack]
    starts = [0] * count  # each pack's first node in ``flat_nodes``
    for g in range(1, count):
        starts[g] = starts[g - 1] + len(packs[g - 1])
    lengths = torch.tensor([len(p) for p in packs], dtype=torch.long)  # (G,)
    columns = torch.arange(longest)  # (N,)
    real = columns[None, :] < lengths[:, None]  # (G, N)
    nodes = torch.tensor(flat_nodes, dtype=torch.long).reshape(-1, 2)  # (ΣN_g, 2)
    pack_ids = torch.zeros(count, longest, dtype=input_ids.dtype)
    pack_pos = torch.zeros(count, longest, dtype=position_ids.dtype)
    pack_ids[real] = nodes[:, 0].to(input_ids.dtype)
    pack_pos[real] = nodes[:, 1].to(position_ids.dtype)
    # every row's path as one padded (B, L) tensor. Key k is an ancestor of query q (or q)
    # iff some row's path holds both and k is no deeper: allowed = (MᵀM > 0) ∧ (d_k ≤ d_q)
    # with M (G, rows, N) the rows' membership of their pack's nodes, d a node's depth.
    path_lengths = torch.tensor([len(p) for p in paths], dtype=torch.long)  # (B,)
    span = int(path_lengths.max()) if rows else 0
    path = torch.zeros(rows, span, dtype=torch.long)  # (B, L)
    steps = torch.arange(span)  # (L,)
    on_path = steps[None, :] < path_lengths[:, None]  # (B, L)
    path[on_path] = torch.tensor([n for p in paths for n in p], dtype=torch.long)
    pack_index = torch.tensor(pack_of, dtype=torch.long)  # (B,)
    slot = torch.zeros(rows, dtype=torch.long)  # (B,) the row's place among its pack's rows
    seen = [0] * count
    for b in range(rows):
        slot[b] = seen[pack_of[b]]
        seen[pack_of[b]] += 1
    member = torch.zeros(count, max(seen, default=0), longest)  # (G, rows, N)
    pack_at = pack_index[:, None].expand(rows, span)[on_path]  # (T,) per path step
    member[pack_at, slot[:, None].expand(rows, span)[on_path], path[on_path]] = 1.0
    depth = torch.zeros(count, longest, dtype=torch.long)  # (G, N)
    depth[pack_at, path[on_path]] = steps[None, :].expand(rows, span)[on_path]
    together = torch.bmm(member.transpose(1, 2), member) > 0  # (G, N, N)
    allowed = (together & (depth[:, None, :] <= depth[:, :, None])) | torch.eye(
        longest, dtype=torch.bool)  # (G, N, N)
    # the output at a row's sequence index ℓ_p − 1 + j scores its response column P + j
    first = torch.tensor(prompt_lengths, dtype=torch.long) - 1  # (B,)
    scored = torch.tensor(response_lengths, dtype=torch.long)  # (B,)
    offsets = torch.arange(width)  # (R,)
    at = (first[:, None] + offsets[None, :]).clamp(max=max(span - 1, 0))  # (B, R)
    node = path.gather(1, at) if span else at  # (B, R)
    source = pack_index[:, None] * longest + node  # (B, R)
    source = source.masked_fill(offsets[None, :] >= scored[:, None], -1)
    return PackedLayout(input_ids=pack_ids.to(input_ids.device),
                        position_ids=pack_pos.to(position_ids.device),
                        allowed=allowed[:, None].to(input_ids.device),
                        source=source.to(input_ids.device),
                        lengths=tuple(len(p) for p in packs))
