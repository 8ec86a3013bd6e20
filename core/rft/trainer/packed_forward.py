"""The trainer's forward over prefix-tree packs (:mod:`rft.trainer.prefix_tree`): rows
that share a prefix (GRPO's ``n`` rollouts of a prompt, the turns of an episode) run it
once, through the model's own forward and attention. Rows that share whole prompts
(GRPO) run as prompt groups instead where the model has sdpa attention
(:mod:`rft.trainer.prompt_groups`: cascade attention, no dense mask;
:func:`shared_layout` chooses).

Each pack is one sequence of the model's input, ``(G, N)``; its 4-D attention mask
``(G, 1, N, N)`` lets every token see its ancestors in the tree and itself, and its
position ids are the rows' own, so each response continues its prompt's positions. The
model's attention implementation reads the mask as given (``transformers`` returns a
4-D mask as-is): ``sdpa`` as a boolean mask, ``eager`` as an additive one (``0`` /
``finfo.min``). For every query the keys and positions are those of its row in the
plain forward, so the logits are the model's and, through ``index_select``'s backward
(the outputs a node feeds are summed), so are the gradients — to rounding: the kernels
run over other shapes and sum in another order (``tests/test_prefix_packing.py``:
float32 within 1e-5; bfloat16 within the plain forward's own noise).

Nothing here depends on the architecture: LoRA (peft), gradient checkpointing (the mask
is an ordinary argument of each layer), FSDP2 (each rank packs its own rows), autocast
and the reference model's forward all go through the model's ``forward``.
:func:`fallback_reason` says when the model's plain forward runs instead
(``trainer.prefix_sharing: auto``): an attention implementation that does not take a
4-D mask (flash-attention, flex), sliding windows shorter than a row, versions older than
torch 2.5 / transformers 4.53, or a model whose packed logits do not match its plain
ones on a probe batch (position handling the packing cannot express, e.g. ALiBi).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import torch
from torch import nn

from rft.attention_switch import major_minor, old_torch_reason
from rft.trainer.prefix_tree import PackedLayout, pack_rows, unpackable_reason
from rft.trainer.prompt_groups import NAME as PROMPT_GROUPS
from rft.trainer.prompt_groups import MIN_SAVING, PromptGroups, group_rows

logger = logging.getLogger(__name__)

MIN_TRANSFORMERS = (4, 53)
"""Oldest transformers that passes a 4-D attention mask to every layer unchanged
(``masking_utils``)."""
MASKED_IMPLEMENTATIONS = frozenset({"sdpa", "eager", PROMPT_GROUPS})
"""Attention implementations that read an explicit 4-D mask."""

_PROBED: weakref.WeakKeyDictionary[nn.Module, str | None] = weakref.WeakKeyDictionary()
_LOGGED: set[str] = set()


def version_reason() -> str | None:
    """Why the installed torch / transformers cannot run packed forwards; ``None`` if
    they can."""
    import transformers

    too_old = old_torch_reason()  # the SDPA features the packed masks rely on
    if too_old is not None:
        return too_old
    if major_minor(transformers.__version__) < MIN_TRANSFORMERS:
        return (f"transformers {transformers.__version__} < "
                f"{'.'.join(map(str, MIN_TRANSFORMERS))}")
    return None


def attention_implementation(model: nn.Module) -> str | None:
    """The attention implementation ``model`` runs (its config's ``_attn_implementation``;
    ``None`` without a config)."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) if config is not None else None


def fallback_reason(model: nn.Module, batch_input_ids: torch.Tensor,
                    attention_mask: torch.Tensor, position_ids: torch.Tensor,
                    prompt_width: int) -> str | None:
    """Why :func:`shared_prompt_logits` cannot stand in for ``model``'s forward over this
    batch (``(B, P+R)`` tensors); ``None`` if it can."""
    reason = version_reason()
    if reason is not None:
        return reason
    implementation = attention_implementation(model)
    if implementation not in MASKED_IMPLEMENTATIONS:
        return f"attention implementation {implementation!r} is not sdpa or eager"
    # the probe before the batch's own checks: under FSDP2 every rank runs its forwards at
    # its first call whatever its rows (the probe's forwards are collectives)
    reason = probe_reason(model)
    if reason is not None:
        return reason
    if position_ids.dim() != 2:
        return "position ids are not 2-D (multimodal RoPE)"
    reason = unpackable_reason(attention_mask, prompt_width)
    if reason is not None:
        return reason
    window = sliding_window(getattr(model, "config", None))
    if window is not None and int(position_ids.max()) + 1 > window:
        return f"rows longer than the sliding window ({window})"
    return None


def sliding_window(config: object) -> int | None:
    """The sliding window some layer of the model applies (the packed mask has none);
    ``None`` when every layer attends fully (``layer_types`` without sliding layers, or
    ``use_sliding_window: false``)."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or []
    if not isinstance(window, int) or window <= 0:
        return None
    if getattr(config, "use_sliding_window", None) is False:
        return None
    if layer_types and "sliding_attention" not in layer_types:
        return None
    return window


def probe_reason(model: nn.Module) -> str | None:
    """Whether packed and plain logits agree on a small probe batch (two rows sharing a
    prompt), once per model; the reason when they do not."""
    if model in _PROBED:
        return _PROBED[model]
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 0)
    if vocab < 12:
        _PROBED[model] = None
        return None
    device = next(model.parameters()).device
    ids = torch.tensor([[3, 4, 5, 6, 7], [3, 4, 5, 8, 0]], device=device)  # (2, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]], device=device)
    positions = torch.tensor([[0, 1, 2, 3, 4], [0, 1, 2, 3, 0]], device=device)
    was_training = model.training
    model.train(False)
    try:
        with torch.no_grad():
            plain = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                          use_cache=False).logits[:, 2:4].float()  # (2, 2, V)
            layouts: list[SharedLayout] = [pack_rows(ids, mask, positions, 3)]
            groups = (group_rows(ids, mask, positions, 3)
                      if attention_implementation(model) == PROMPT_GROUPS else None)
            if groups is not None:
                layouts.append(groups)
            try:
                outputs = [packed_logits(model, layout) for layout in layouts]  # (2, 2, V)
            except (RuntimeError, ValueError, TypeError, IndexError) as exc:
                failure = (f"{type(model).__name__} does not take a 4-D mask or the prompt "
                           "groups' keyword "
                           f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
                _PROBED[model] = failure
                return failure
    finally:
        model.train(was_training)
    valid = mask[:, 3:].bool()  # (2, 2): the response columns scored
    scale = float(plain.abs().max()) + 1e-6
    error = max(float((packed - plain)[valid].abs().max()) for packed in outputs)
    verdict = (None if error <= 1e-3 * scale else
               f"packed logits differ from {type(model).__name__}'s forward by {error:.2g}")
    _PROBED[model] = verdict
    return verdict


def log_fallback(reason: str) -> None:
    """One line per distinct reason: ``trainer.prefix_sharing: auto`` runs the model's plain
    forward (``reason``)."""
    if reason not in _LOGGED:
        _LOGGED.add(reason)
        logger.info("[trainer] prefix sharing off (trainer.prefix_sharing: auto): %s; "
                    "running the model's plain forward", reason)


def _mask(model: nn.Module, allowed: torch.Tensor) -> torch.Tensor:
    """``allowed`` ``(G, 1, N, N)`` as the mask the model's attention implementation reads:
    boolean for sdpa, additive float32 for eager."""
    if attention_implementation(model) != "eager":  # sdpa and the prompt groups' sdpa
        return allowed
    blocked = torch.finfo(torch.float32).min
    return torch.zeros(allowed.shape, dtype=torch.float32,
                       device=allowed.device).masked_fill(~allowed, blocked)


@dataclass(frozen=True)
class NodeLogits:
    """The model's outputs at the pack columns that score some response token, each
    computed once, and where every response column of the rows reads its own."""

    logits: torch.Tensor
    """``(M, V)``: one row per scoring node (a shared prompt's last node scores the first
    token of each of its responses, so ``M ≤`` the valid response tokens)."""
    index: torch.Tensor
    """``(B, R)`` long: the row of :attr:`logits` scoring response column ``P + j`` of row
    ``b`` (``0`` where that column is padding)."""
    valid: torch.Tensor
    """``(B, R)`` bool: the response columns that hold a token."""

    def expand(self) -> torch.Tensor:
        """The logits per response column, ``(B, R, V)``, zeros at padding columns."""
        rows, width = self.index.shape
        picked = self.logits.index_select(0, self.index.reshape(-1))  # (B·R, V)
        picked = picked.reshape(rows, width, -1)  # (B, R, V)
        return picked * self.valid.unsqueeze(-1).to(picked.dtype)


def packed_node_logits(model: nn.Module, layout: PackedLayout) -> NodeLogits:
    """The model's logits over ``layout``'s packs at the nodes that score a response token
    (:class:`NodeLogits`): only those pack columns go through the LM head
    (``logits_to_keep`` as an index tensor; a model without it computes every column and
    the others are dropped). Per-token losses computed on ``(M, V)`` instead of
    ``(B, R, V)`` skip the padding columns and the copies of a node's row."""
    columns = layout.input_ids.shape[1]
    valid = layout.source >= 0  # (B, R)
    keep = torch.unique(layout.source[valid] % columns)  # (K,) sorted pack columns
    inputs = {"input_ids": layout.input_ids, "attention_mask": _mask(model, layout.allowed),
              "position_ids": layout.position_ids, "use_cache": False}
    try:
        logits = model(**inputs, logits_to_keep=keep).logits  # (G, K, V)
    except TypeError:  # custom modelling code without ``logits_to_keep``
        logits = model(**inputs).logits  # (G, N, V)
    if logits.shape[1] != keep.numel():  # every column computed (a head that takes
        logits = logits[:, keep]  # ``logits_to_keep`` in **kwargs and ignores it: a critic)
    # renumber the pack columns: flat g·N + n → g·K + (n's place in ``keep``)
    place = torch.zeros(columns, dtype=torch.long, device=keep.device)
    place[keep] = torch.arange(keep.numel(), device=keep.device)
    source = layout.source.clamp(min=0)  # (B, R) flat g·N + n
    index = (source // columns) * keep.numel() + place[source % columns]  # (B, R)
    flat = logits.reshape(-1, logits.shape[-1])  # (G·K, V)
    return NodeLogits(logits=flat, index=index.masked_fill(~valid, 0), valid=valid)


SharedLayout = PackedLayout | PromptGroups
"""The two layouts that compute a shared prefix once: prefix-tree packs with a dense 4-D
mask (any tree: multi-turn episodes) and prompt groups with cascade attention (whole
prompts shared: GRPO)."""


def group_node_logits(model: nn.Module, groups: PromptGroups) -> NodeLogits:
    """The model's logits over ``groups`` (:mod:`rft.trainer.prompt_groups`) at the columns
    that score some response token (:class:`NodeLogits`): a group's last prompt column
    scores the first token of each of its rows; a row's response column ``j`` its token
    ``j + 1`` — only the columns some row needs go through the LM head."""
    P = groups.masks.prompt_width
    device = groups.input_ids.device
    valid = groups.response_valid  # (B, R)
    count, columns = groups.input_ids.shape
    steps = torch.arange(valid.shape[1], device=device)  # (R,)
    column = (groups.offset[:, None] + steps[None, :] - 1).clamp(max=columns - 1)  # (B, R)
    column[:, 0] = P - 1  # the column scoring token j
    keep = torch.unique(column[valid])  # (K,) ascending
    placeholder = torch.ones(count, 1, 1, 1, dtype=torch.bool, device=device)
    inputs = {"input_ids": groups.input_ids, "attention_mask": placeholder,
              "position_ids": groups.position_ids, "use_cache": False,
              "prompt_groups": groups.masks}
    try:
        logits = model(**inputs, logits_to_keep=keep).logits  # (G, K, V)
    except TypeError:  # custom modelling code without ``logits_to_keep``
        logits = model(**inputs).logits  # (G, N, V)
    if logits.shape[1] != keep.numel():  # a head that computes every column
        logits = logits[:, keep]
    place = torch.zeros(columns, dtype=torch.long, device=device)
    place[keep] = torch.arange(keep.numel(), device=device)
    index = groups.group[:, None] * keep.numel() + place[column]  # (B, R)
    flat = logits.reshape(-1, logits.shape[-1])  # (G·K, V)
    return NodeLogits(logits=flat, index=index.masked_fill(~valid, 0), valid=valid)


def shared_node_logits(model: nn.Module, layout: SharedLayout) -> NodeLogits:
    """:func:`group_node_logits` or :func:`packed_node_logits`, by the layout."""
    if isinstance(layout, PromptGroups):
        return group_node_logits(model, layout)
    return packed_node_logits(model, layout)


def packed_logits(model: nn.Module, layout: SharedLayout) -> torch.Tensor:
    """The model's logits over ``layout``, gathered to ``(B, R, V)``: the output scoring
    each response token (zeros at padding columns); :func:`shared_node_logits`
    expanded."""
    return shared_node_logits(model, layout).expand()


def shared_layout(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor, prompt_width: int) -> SharedLayout:
    """The layout of ``(B, P+R)`` rows: prompt groups where the model has the cascade
    attention (:func:`rft.trainer.prompt_groups.use_prompt_group_attention`) and whole
    prompts are shared enough (:func:`rft.trainer.prompt_groups.group_rows`), else the
    prefix-tree packs."""
    if attention_implementation(model) == PROMPT_GROUPS:
        groups = group_rows(input_ids, attention_mask, position_ids, prompt_width)
        if groups is not None:
            return groups
    return pack_rows(input_ids, attention_mask, position_ids, prompt_width)


def shared_prompt_logits(model: nn.Module, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor, position_ids: torch.Tensor,
                         prompt_width: int, layout: SharedLayout | None = None
                         ) -> torch.Tensor:
    """Logits ``(B, R, V)`` scoring the response tokens of ``(B, P+R)`` rows, shared
    prefixes computed once (module docstring); the batch must pass
    :func:`~rft.trainer.prefix_tree.unpackable_reason`. ``layout``: the rows' layout when
    already built (:func:`shared_layout`)."""
    if layout is None:
        layout = shared_layout(model, input_ids, attention_mask, position_ids, prompt_width)
    return packed_logits(model, layout)


def attention_weight(config: object) -> float:
    """``α``: the cost of one query-key pair of attention relative to one token through
    the linear layers, per layer, from the model's shape (0 if it does not say)::

        α = (4·d + 8·H) / (2·W),   W = h·(d + 2·d_kv) + d·h + 3·h·i

    with ``h`` the hidden size, ``H`` query heads of ``d / H`` dims, ``d_kv`` the key /
    value width, ``i`` the MLP width (gated: three matrices): a pair costs ``q·k`` and
    ``p·v`` (``2d`` FLOPs each) plus the softmax and mask per head; a token ``2W`` FLOPs.
    """
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    if hidden <= 0 or heads <= 0:
        return 0.0
    head_dim = int(getattr(config, "head_dim", 0) or 0) or hidden // heads
    kv_heads = int(getattr(config, "num_key_value_heads", 0) or 0) or heads
    inner = int(getattr(config, "intermediate_size", 0) or 0) or 4 * hidden
    width, kv_width = heads * head_dim, kv_heads * head_dim
    weights = hidden * (width + 2 * kv_width) + width * hidden + 3 * hidden * inner
    return (4 * width + 8 * heads) / (2 * weights)


def packing_cost_reason(attention_mask: torch.Tensor, layout: PackedLayout,
                        alpha: float) -> str | None:
    """Why the plain forward is the cheaper one for these rows (``None``: pack them), by
    the cost of what each computes — tokens through the linear layers plus ``α`` (see
    :func:`attention_weight`) per attention pair, the shapes as they run::

        plain  = B·W + α·B·W²            (B rows padded to W columns)
        packed = G·N + α·G·N²            (G packs padded to N nodes, dense masks)

    Packing must cost at most ``1 −`` :data:`MIN_SAVING` of the plain forward: the
    prompt tokens it saves outweigh the attention its dense masks add."""
    rows, width = attention_mask.shape
    packs, nodes = layout.input_ids.shape
    plain = rows * width * (1.0 + alpha * width)
    packed = packs * nodes * (1.0 + alpha * nodes)
    if packed <= (1.0 - MIN_SAVING) * plain:
        return None
    return ("a micro-batch's packs would cost more than its rows (shared prefixes too "
            "short for the attention the packs' dense masks add; trainer.prefix_sharing's "
            "cost rule)")


def worth_packing(config: object, attention_mask: torch.Tensor,
                  layout: PackedLayout) -> bool:
    """Whether ``layout``'s packs should run instead of the plain rows (``attention_mask``
    ``(B, W)``) of a model with this ``config``: they compute enough fewer tokens
    (:func:`saves_tokens`, else silently not) and cost less by the cost rule
    (:func:`packing_cost_reason` with :func:`attention_weight` of ``config``; when not,
    the reason is logged once). The torch and verl trainers' one rule."""
    if not saves_tokens(attention_mask, layout):
        return False
    reason = packing_cost_reason(attention_mask, layout, attention_weight(config))
    if reason is not None:
        log_fallback(reason)
        return False
    return True


def saves_tokens(attention_mask: torch.Tensor, layout: PackedLayout) -> bool:
    """Whether ``layout`` computes at least :data:`MIN_SAVING` fewer tokens than the plain
    forward's valid ones (else the packing's quadratic mask is not worth it)."""
    plain = int(attention_mask.sum())
    return layout.tokens <= (1.0 - MIN_SAVING) * plain
