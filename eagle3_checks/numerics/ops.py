"""The forward pass's torch primitives, shared by each family's attention (:mod:`.family_attention`) and the pass
itself (:mod:`.draft_steps`): RMSNorm, rotate-half RoPE, a linear layer from a reading's tensors, and causal
attention over the drafter's KV-cache pattern. torch is imported inside each, as everywhere outside a forward pass."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:  # the types only: torch is imported inside each function, where a pass runs
    from ..engines.reading import Reading
    from .draft_steps import Weights

# A torch tensor. torch is imported only where a pass runs, and is not installed where the package's types are
# checked (CI's lint step), so a tensor is typed by this name: what is not a tensor (a reading, a checkpoint, a
# target) has its own type.
Tensor: TypeAlias = Any


class EmbeddingRows(Protocol):
    """An embedding table the forward pass reads rows of: the target's embed_tokens (storage.target_weights.
    TargetEmbedding, read from its files), or a table an engine's own compute is given."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def rows(self, ids: list[int]) -> Any: ...  # numpy float32 (len(ids), hidden)


class ForwardError(Exception):
    """The forward pass cannot run on these inputs (the message says why)."""


def size(reading: Reading, name: str, value: int | None) -> int:
    """A size the forward pass needs (``value``, the reading's field ``name``): a reading that states none cannot be
    computed (ForwardError, never a TypeError deep inside the pass)."""
    if value is None:
        raise ForwardError(f"{reading.engine} {reading.version} reads no {name} for this drafter: its forward pass "
                           "cannot be computed")
    return value


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm in float32 (the weight upcast)."""
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def rope_tables(positions: Tensor, freqs: Tensor, scale: float, device: Any) -> tuple[Tensor, Tensor]:
    """The (T, hd) cos and sin of rotate-half RoPE at integer positions (T,), scaled: made once per layer call, for
    q and k alike."""
    import torch

    angles = positions.to(device, torch.float32)[:, None] * freqs.to(device)[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos() * scale, emb.sin() * scale


def rope(x: Tensor, positions: Tensor, freqs: Tensor, scale: float,
         tables: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Rotate-half RoPE on (heads, T, hd) at integer positions (T,) (``tables``: :func:`rope_tables` of them)."""
    import torch

    cos, sin = tables or rope_tables(positions, freqs, scale, x.device)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """The drafter's KV cache over draft steps: the context's keys and values (step 0), then each step's own."""

    def __init__(self) -> None:
        self.k_ctx: Tensor = None  # torch tensors once the context is cached
        self.v_ctx: Tensor = None
        self.pos_ctx: Tensor = None  # the context's positions (T,), for a sliding window
        self.k_own: list[Tensor] = []
        self.v_own: list[Tensor] = []


def attention(q: Tensor, k: Tensor, v: Tensor, cache: KVCache, step: int, scale: float | None = None,
              positions: Tensor = None, window: tuple[int, str] | None = None) -> Tensor:
    """q (nh, T, hd), k/v (nkv, T, hd): row t attends to the context keys <= t (step 0) and its own drafts. ``scale``:
    the logits' scale (default 1/sqrt(hd); MLA: DeepSeek's yarn softmax scale); v may be narrower than q and k.
    ``window`` (W, where from) with ``positions`` (T,), this step's: a sliding window of W keys, the query included
    (a context key at position p is attended when anchor - p < W): measured from the query's position ("query", as a
    KV cache by position serves it) or from the row's own context position ("row", speculators' training mask); a
    row's own drafts lie within it."""
    import torch

    nh, t, hd = q.shape
    group = nh // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    if step == 0:
        cache.k_ctx, cache.v_ctx = k, v
        cache.pos_ctx = positions
    else:
        cache.k_own.append(k)
        cache.v_own.append(v)
    scores = (q @ cache.k_ctx.transpose(1, 2)) * scale  # (nh, T, T)
    allowed = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    if window is not None and positions is not None and cache.pos_ctx is not None:
        size, anchor_from = window
        anchor = (cache.pos_ctx if anchor_from == "row" else positions).to(q.device)
        allowed &= (anchor[:, None] - cache.pos_ctx.to(q.device)[None, :]) < size
    scores = scores.masked_fill(~allowed, float("-inf"))
    own = [(q * ko).sum(-1, keepdim=True) * scale for ko in cache.k_own]  # each (nh, T, 1)
    probs = torch.softmax(torch.cat([scores, *own], dim=-1), dim=-1)
    out = probs[..., :t] @ cache.v_ctx
    for j, vo in enumerate(cache.v_own):
        out = out + probs[..., t + j:t + j + 1] * vo
    return out


def linear(x: Tensor, reading: Reading, weights: Weights, role: str) -> Tensor:
    bias_role = role[: -len(".weight")] + ".bias"
    return weights.linear(x, reading.tensors[role], reading.tensors.get(bias_role))
