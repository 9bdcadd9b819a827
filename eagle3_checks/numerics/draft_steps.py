"""The drafter's forward pass, K draft steps, as one engine reads it: plain torch, float32, CPU (CUDA if present).

One implementation runs every :class:`~eagle3_checks.engines.reading.Reading`; where engines differ (names, defaults,
``norm_before_residual``, the state fed back to later steps, the final norm, fc norms, rope) the reading says so.
Per draft step (docs/engines.md, the forward level):

    g = concat(aux_0 .. aux_{A-1})            step 0 only; [input_norm(g)] [fc_norm_i per chunk]; h = fc(g)
    e = embed(tokens)                         step 0: input_ids (or inputs_embeds); step k: the step k-1 draft
    residual = hidden_norm(h) if norm_before_residual else h
    x = concat(input_layernorm(e), hidden_norm(h));  h = residual + o(attn(q(x), k(x), v(x)))   (RoPE on q, k)
    h = h + mlp(post_attention_layernorm(h));        later layers are plain decoder layers on h, normed before
                                                     attention by input_layernorm (SGLang 0.5.23: hidden_norm)
    logits = lm_head(norm(h))  scattered to the target vocabulary at arange(DV) + d2t, -inf elsewhere
    step k+1 gets back h ("prenorm") or norm(h) ("normed", norm_output), at positions + k + 1

All T positions draft in parallel: row t at step k is the k-th draft after the prefix ending at t. It attends to
the step-0 keys of positions <= t (the context, as a KV cache would hold them) and to its own earlier drafts, the
attention pattern of an engine's KV cache and of speculators' training mask.

Memory stays near the checkpoint's size: each file is memory-mapped once (``Weights``) and shared by every
reading; a weight is upcast to float32 only while it is used; only the embedding rows needed are gathered.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..drafter.config_values import rope_scaling_problems
from ..fast_dataclass import dataclass
from ..storage.safetensors import DTYPES
from ..storage.target_weights import EmbeddingError
from . import ATOL, RTOL
from .family_attention import ATTENTION
from .ops import EmbeddingRows, KVCache, Tensor, linear, rms_norm, size
from .ops import ForwardError as ForwardError  # raised by the pass: its callers import it from here

if TYPE_CHECKING:  # numpy with torch, inside the forward pass: importing this module (the gate does) costs neither
    import numpy as np

    from ..drafter.checkpoint import Checkpoint
    from ..engines.reading import Reading
    from ..storage.safetensors import TensorEntry

ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def default_device() -> str:
    """CUDA when present (EAGLE3_CHECKS_DEVICE overrides), else the CPU."""
    import torch

    return os.environ.get("EAGLE3_CHECKS_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")


# ----- weights -------------------------------------------------------------------------------------------------

_BLOCK = 1 << 21  # elements per upcast block (8 MB of float32): small enough to stay in cache
_TORCH_VIEW = {"BF16": ("<i2", "bfloat16"), "F8_E4M3": ("u1", "float8_e4m3fn"), "F8_E5M2": ("u1", "float8_e5m2")}


def view(e: TensorEntry, maps: dict[str, np.ndarray]) -> Tensor:
    """A safetensors entry as a zero-copy torch view of its file, memory-mapped once per file into ``maps``."""
    import numpy as np

    key = str(e.path)
    if key not in maps:
        # copy-on-write: writable for torch (no warning), and nothing is ever written back
        maps[key] = np.memmap(e.path, dtype=np.uint8, mode="c")
    return as_tensor(maps[key][e.offset:e.offset + e.nbytes], e.dtype, e.shape)


def as_tensor(buf: np.ndarray, dtype: str, shape: tuple[int, ...]) -> Tensor:
    """A writable uint8 numpy buffer as a torch tensor of a safetensors ``dtype`` and ``shape`` (zero-copy)."""
    import numpy as np
    import torch

    if dtype in _TORCH_VIEW:
        np_view, torch_dtype = _TORCH_VIEW[dtype]
        t = torch.from_numpy(buf.view(np_view)).view(getattr(torch, torch_dtype))
    else:
        t = torch.from_numpy(buf.view(np.dtype(DTYPES[dtype][2]).newbyteorder("<")))
    return t.reshape(shape)


def mm_blocks(x: Tensor, w: Tensor, device: str, buf: Tensor = None) -> tuple[Tensor, Tensor]:
    """``x @ w.T`` in float32 and the workspace to reuse: a float32 weight on the CPU is used in place; any other
    dtype is upcast one block of rows at a time into ``buf``, so the full weight never exists in float32 and the
    block stays in cache while it is multiplied."""
    import torch

    if w.dtype == torch.float32 and device == "cpu":
        return x @ w.T, buf
    # W_block @ x.T into contiguous rows of out.T: with few tokens this orientation runs about twice as fast as
    # x @ W_block.T (measured on the Kimi-sized benchmark).
    out_t = torch.empty(w.shape[0], x.shape[0], device=device)
    xt = x.T
    step = max(1, _BLOCK // w.shape[1])
    if buf is None or buf.numel() < step * w.shape[1]:
        buf = torch.empty(max(_BLOCK, w.shape[1]), device=device)
    for start in range(0, w.shape[0], step):
        block = w[start:start + step]
        tmp = buf[: block.numel()].view(block.shape)
        tmp.copy_(block)
        torch.mm(tmp, xt, out=out_t[start:start + block.shape[0]])
    return out_t.T, buf


class Weights:
    """A checkpoint's tensors, each file memory-mapped once and handed out as zero-copy torch views."""

    def __init__(self, ckpt: Checkpoint, device: str | None = None) -> None:
        self.ckpt, self.device = ckpt, device or default_device()
        self._maps: dict[str, np.ndarray] = {}
        self._buf: Tensor = None  # float32 workspace for blockwise upcasts
        self._views: dict[str, Tensor] = {}  # name -> its zero-copy view, made once (every step of every reading)
        self.cuts: dict[str, tuple[int, ...]] = {}  # on-disk name -> the leading part a reading's loader keeps

    def raw(self, name: str) -> Tensor:
        t = self._views.get(name)
        if t is None:
            e = self.ckpt.tensors[name]
            if self.ckpt.ends_past_file(e):
                raise ForwardError(f"{e.file}: {name} runs past the end of the file (truncated)")
            t = self._views[name] = view(e, self._maps)
        cut = self.cuts.get(name)
        return t if cut is None else t[tuple(slice(0, n) for n in cut)]

    def f32(self, name: str, rows: int | None = None) -> Tensor:
        """The tensor (or its first ``rows`` rows) upcast to float32 (a copy), on the device."""
        import torch

        t = self.raw(name)
        return (t if rows is None else t[:rows]).to(self.device, dtype=torch.float32)

    def linear(self, x: Tensor, name: str, bias_name: str | None = None, rows: int | None = None) -> Tensor:
        """``x @ W.T (+ b)`` in float32 for the tensor ``name`` (its first ``rows`` rows). A float32 weight is used
        in place; any other dtype is upcast one block of rows at a time into a reused buffer, so the full weight
        never exists in float32 and the block stays in cache while it is multiplied (:func:`mm_blocks`)."""
        w = self.raw(name)
        if rows is not None:
            w = w[:rows]
        out, self._buf = mm_blocks(x, w, self.device, self._buf)
        if bias_name is not None:
            out = out + self.f32(bias_name)
        return out

    def rows(self, name: str, ids: Tensor) -> Tensor:
        """Rows of a (V, H) table, gathered before the upcast."""
        import torch

        return self.raw(name)[ids.cpu()].to(self.device, dtype=torch.float32)


# ----- inputs ----------------------------------------------------------------------------------------------------

@dataclass
class Inputs:
    aux_hidden_states: Tensor  # (T, A*Ht) float32
    input_ids: Tensor  # (T,) int64
    position_ids: Tensor  # (T,) int64
    inputs_embeds: Tensor = None  # (T, H) float32, when the checkpoint has no embed_tokens
    stand_in_seed: int | None = None  # embed later-step tokens with a seeded stand-in table (a side lacks embed_tokens)
    later_tokens: list[Tensor] | None = None  # token ids (T,) for steps 1.. (teacher forcing); default: each argmax
    # the target's embed_tokens (eagle3_checks.storage.target_weights.TargetEmbedding: rows(ids) -> float32 rows), for a
    # checkpoint without its own: engines embed the drafted tokens (and the prompt) with the target's
    target_embedding: EmbeddingRows | None = None


def random_inputs(width: int, hidden: int, vocab: int, tokens: int = 8, seed: int = 0,
                  with_embeds: bool = False) -> Inputs:
    import torch

    g = torch.Generator().manual_seed(seed)
    return Inputs(
        aux_hidden_states=torch.randn(tokens, width, generator=g),
        input_ids=torch.randint(0, vocab, (tokens,), generator=g),
        position_ids=torch.arange(tokens),
        inputs_embeds=torch.randn(tokens, hidden, generator=g) if with_embeds else None,
        stand_in_seed=seed if with_embeds else None,
    )


def _stand_in_rows(ids: list[int], hidden: int, seed: int) -> Tensor:
    """A deterministic embedding for each token id: what later draft steps use when the checkpoint has no
    embed_tokens (engines would use the target's, which is not here). Identical for every reading."""
    import torch

    rows = [torch.randn(hidden, generator=torch.Generator().manual_seed(seed * 1_000_003 + int(i))) for i in ids]
    return torch.stack(rows)


# ----- the computation ---------------------------------------------------------------------------------------------

def _act(name: str) -> Callable[[Tensor], Tensor]:
    import torch.nn.functional as F

    table: dict[str, Callable[[Tensor], Tensor]] = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu,
             "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}
    if name not in table:
        raise ForwardError(f"hidden_act {name!r} is not implemented by eagle3-checks' forward pass")
    return table[name]


def inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> tuple[Tensor, float]:
    """RoPE inverse frequencies and attention factor, as transformers' rope init functions compute them."""
    import torch


    problems = rope_scaling_problems(scaling)
    if problems:
        raise ForwardError(f"rope scaling: {problems[0]} (see config.rope)")
    base = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    kind = (scaling or {}).get("rope_type", "default")
    if kind not in ROPE_TYPES:
        raise ForwardError(f"rope_type {kind!r} is not implemented by eagle3-checks' forward pass "
                           f"(implemented: {', '.join(ROPE_TYPES)})")
    if kind == "default":
        return base.float(), 1.0
    assert scaling is not None  # any other rope_type was read from it
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return (base / factor).float(), 1.0
    if kind == "llama3":
        low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
        old = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / base
        out = torch.where(wavelen > old / low, base / factor, base)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        return torch.where(medium, smoothed, out).float(), 1.0
    # yarn (transformers' _compute_yarn_parameters, which vLLM mirrors; readings fill in what their engine does)
    if "original_max_position_embeddings" not in scaling:
        raise ForwardError("yarn rope_scaling without original_max_position_embeddings")
    old = float(scaling["original_max_position_embeddings"])
    beta_fast, beta_slow = float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1)

    def get_mscale(m: float) -> float:
        return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0

    mscale = scaling.get("attention_factor")
    if mscale is None:
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        mscale = get_mscale(m) / get_mscale(m_all) if m and m_all else get_mscale(1.0)
    truncate = scaling.get("truncate", True)

    def dim_for(rot: float) -> float:
        return (head_dim * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(theta))

    low, high = dim_for(beta_fast), dim_for(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # as transformers and SpecForge do, against a zero-width ramp
    ramp = (torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)
    extrapolation = 1 - ramp.clamp(0, 1)
    freqs = (base / factor) * (1 - extrapolation) + base * extrapolation
    return freqs.float(), float(mscale)


def _layer(h: Tensor, e: Tensor, layer: int, positions: Tensor, step: int, reading: Reading, weights: Weights,
           cache: KVCache, rope: tuple[Tensor, float]) -> Tensor:
    def W(role: str) -> Tensor:  # one weight upcast at a time
        return weights.f32(reading.tensors[role])

    p = f"layers.{layer}."
    eps = reading.rms_norm_eps
    if layer == 0:
        hidden = rms_norm(h, W(p + "hidden_norm.weight"), eps)
        residual = hidden if reading.norm_before_residual else h
        x = torch_cat([rms_norm(e, W(p + "input_layernorm.weight"), eps), hidden])
    else:  # later layers: input_layernorm (vLLM, speculators) or hidden_norm (SGLang 0.5.23)
        residual = h
        x = rms_norm(h, W(p + reading.later_norm + ".weight"), eps)
    # the attention is the family's (drafter/families/): Llama/Qwen3 q/k/v with RoPE, or DeepSeek MLA
    attn = ATTENTION[reading.family](x, p, reading, weights, positions, cache, step, rope)
    h = residual + linear(attn, reading, weights, p + "self_attn.o_proj.weight")
    x = rms_norm(h, W(p + "post_attention_layernorm.weight"), eps)
    act = _act(reading.hidden_act)
    gate = linear(x, reading, weights, p + "mlp.gate_proj.weight")
    up = linear(x, reading, weights, p + "mlp.up_proj.weight")
    return h + linear(act(gate) * up, reading, weights, p + "mlp.down_proj.weight")


def _target_rows(embedding: EmbeddingRows, ids: Tensor, reading: Reading) -> Tensor:
    """The target's embedding rows of ``ids`` as float32 torch rows; its width must be the drafter's hidden size."""
    import torch

    try:
        vocab, hidden = embedding.shape
        if hidden != reading.hidden_size:
            raise ForwardError(f"the target's embed_tokens is {hidden} wide, the drafter's hidden size is "
                               f"{reading.hidden_size}: is --target the drafter's target?")
        return torch.from_numpy(embedding.rows([int(i) for i in ids.tolist()]))
    except EmbeddingError as exc:
        raise ForwardError(str(exc)) from exc


def _head_rows(inputs: Inputs, reading: Reading, dv: int) -> Tensor:
    """The first ``dv`` rows of the target's embedding, as a tied lm_head the worker replaced serves them."""
    import torch

    if inputs.target_embedding is None:
        raise ForwardError("lm_head is tied to the embedding, which the engine replaces by the target's: give the "
                           "target checkpoint (--target)")
    return _target_rows(inputs.target_embedding, torch.arange(dv), reading)


def _embed_drafted(tokens: Tensor, inputs: Inputs, reading: Reading, weights: Weights, hidden: int) -> Tensor:
    """The embedding of the tokens drafted by one step, for the next: a seeded stand-in where the caller asks for one
    (both sides of a comparison embed alike), the drafter's embed_tokens, or the target's."""
    dev = weights.device
    if inputs.stand_in_seed is not None:
        return _stand_in_rows(tokens.tolist(), hidden, inputs.stand_in_seed).to(dev)
    if "embed_tokens.weight" in reading.tensors:
        return weights.rows(reading.tensors["embed_tokens.weight"], tokens)
    if inputs.target_embedding is not None:
        return _target_rows(inputs.target_embedding, tokens, reading).to(dev)
    raise ForwardError("later draft steps embed the drafted tokens with embed_tokens, which this checkpoint does not "
                       "carry (engines use the target's): give the target checkpoint (--target), or use one step")


def torch_cat(parts: list[Tensor]) -> Tensor:
    import torch

    return torch.cat(parts, dim=-1)


def run(reading: Reading, weights: Weights, inputs: Inputs, steps: int = 2, as_served: bool = False,
        targets: Tensor = None, states: list[Tensor] | None = None) -> list[Tensor]:
    """Target-vocabulary logits (T, V) for each draft step, as ``reading`` computes them. ``as_served``: a reading
    whose loader narrows tensors runs with them cut as it cuts them (what the engine silently serves). ``targets``:
    the target id of each draft id where the caller knows them otherwise than arange + d2t (the trainer's reading
    of a d2t written as absolute ids: acceptance/evaluate.py, ``absolute_ids``). ``states``: a list that gets the
    state each step hands to the next (T, H), the last step's included (what an engine's own compute is held to,
    eagle3_checks.live.compute)."""
    import torch

    if not (reading.computable if as_served else reading.servable):
        unfilled = [r for r, how in reading.unfilled.items() if not how.startswith("shared")]
        raise ForwardError("; ".join(reading.refusals) or ("parameters left unfilled: " + ", ".join(unfilled)
                                                            if unfilled else "tensors narrowed by its loader: "
                                                            + ", ".join(reading.narrowed)))
    weights.cuts = dict(reading.narrowed_to) if as_served else {}
    dev = weights.device
    hidden = size(reading, "hidden_size", reading.hidden_size)
    dv = size(reading, "draft_vocab_size", reading.draft_vocab_size)
    v = size(reading, "vocab_size", reading.vocab_size)
    width = reading.num_aux * size(reading, "target_hidden_size", reading.target_hidden_size)

    def W(role: str) -> Tensor:
        return weights.f32(reading.tensors[role])

    with torch.no_grad():
        eps = reading.rms_norm_eps
        g = inputs.aux_hidden_states.to(dev, torch.float32)
        if g.shape[-1] != width:
            raise ForwardError(f"aux_hidden_states has width {g.shape[-1]}; {reading.engine} expects "
                               f"{reading.num_aux} x {reading.target_hidden_size} = {width}")
        if "fc.weight" not in reading.tensors and "fc.weight" not in reading.unfilled:
            # no fc built (vLLM with eagle_config.use_aux_hidden_state false): combine_hidden_states hands the
            # state on as it is, before any input norm (vLLM 0.33.0 llama_eagle3.py:397-402), and the model asserts
            # that it is as wide as the embedding (:270-273)
            if width != hidden:
                raise ForwardError(f"{reading.engine} builds no fc for this drafter and is fed {reading.num_aux} x "
                                   f"{reading.target_hidden_size} states where the model asserts {reading.hidden_size}")
            h = g
        else:
            if reading.input_norm:
                g = rms_norm(g, W("input_norm.weight"), eps)
            if reading.fc_norm:
                g = torch.cat([rms_norm(c, W(f"fc_norm.{i}.weight"), eps)
                               for i, c in enumerate(g.chunk(reading.num_aux, dim=-1))], dim=-1)
            h = weights.linear(g, reading.tensors["fc.weight"],
                               reading.tensors.get("fc.bias") if reading.fc_bias else None)
        has_embed = "embed_tokens.weight" in reading.tensors
        if inputs.inputs_embeds is not None:
            e = inputs.inputs_embeds.to(dev, torch.float32)
        elif has_embed:
            e = weights.rows(reading.tensors["embed_tokens.weight"], inputs.input_ids)
        elif inputs.target_embedding is not None:
            e = _target_rows(inputs.target_embedding, inputs.input_ids, reading).to(dev)
        else:
            raise ForwardError("the checkpoint has no embed_tokens: inputs_embeds are required")
        if targets is None:
            d2t = weights.raw(reading.tensors["d2t"]).to(dev, torch.int64) if "d2t" in reading.tensors \
                else torch.zeros(dv, dtype=torch.int64, device=dev)
            targets = torch.arange(dv, device=dev) + d2t
        else:
            targets = targets.to(dev, torch.int64)
        if targets.min() < 0 or targets.max() >= v:
            raise ForwardError(f"d2t maps draft ids outside the target vocabulary [0, {v})")
        # the Llama family's RoPE tables (an MLA reading carries its own rope in reading.mla)
        rope = (inv_freq(size(reading, "head_dim", reading.head_dim), reading.rope_theta, reading.rope_scaling)
                if reading.mla is None else (None, 1.0))
        caches = [KVCache() for _ in range(reading.num_layers)]
        head_role = "embed_tokens.weight" if reading.lm_head_from_embed else "lm_head.weight"
        out = []
        for step in range(steps):
            positions = inputs.position_ids.to(dev) + step
            x = h
            for layer in range(reading.num_layers):
                x = _layer(x, e, layer, positions, step, reading, weights, caches[layer], rope)
            normed = rms_norm(x, W("norm.weight"), eps)
            if head_role in reading.tensors:
                draft = weights.linear(normed if reading.final_norm else x, reading.tensors[head_role], rows=dv)
            else:  # a tied lm_head the worker replaced by the target's embedding (its first DV rows: SGLang 0.5.23
                # llama_eagle3.py:303-304 ties it, llama.py:910-918 replaces it, logits_processor keeps DV columns)
                draft = (normed if reading.final_norm else x) @ _head_rows(inputs, reading, dv).to(dev).T
            logits = torch.full((draft.shape[0], v), float("-inf"), device=dev)
            logits[:, targets] = draft
            out.append(logits.cpu())
            if states is not None:
                states.append((normed if reading.feedback == "normed" else x).cpu())
            if step + 1 < steps:
                tokens = logits.argmax(-1) if inputs.later_tokens is None else inputs.later_tokens[step].to(dev)
                e = _embed_drafted(tokens, inputs, reading, weights, hidden)
                h = normed if reading.feedback == "normed" else x
    return out


# ----- comparing two sets of logits -------------------------------------------------------------------------------

# RTOL and ATOL, the tolerance of the comparison: eagle3_checks.numerics (the header level's checks quote it).


@dataclass(frozen=True)
class StepDiff:
    step: int
    total: int
    mismatched: int
    max_abs: float
    max_abs_at: tuple[int, int]
    max_rel: float
    top1_agree: int
    rows: int
    masks_equal: bool
    nonfinite: str = ""  # NaN or +inf logits on either side, where (-inf is the mask outside the draft vocabulary)

    @property
    def ok(self) -> bool:
        return self.masks_equal and self.mismatched == 0 and not self.nonfinite

    def describe(self) -> str:
        if self.nonfinite:
            return f"step {self.step}: {self.nonfinite}"
        if not self.masks_equal:
            return (f"step {self.step}: the two map draft tokens to different target ids (different -inf masks); "
                    f"top-1 agreement {self.top1_agree}/{self.rows}")
        pct = 100.0 * self.mismatched / max(self.total, 1)
        return (f"step {self.step}: mismatched logits {self.mismatched} / {self.total} ({pct:.1f}%), greatest "
                f"absolute difference {self.max_abs:.3g} at {self.max_abs_at}, greatest relative difference "
                f"{self.max_rel:.3g}; top-1 agreement {self.top1_agree}/{self.rows}")


def nonfinite(logits: Tensor) -> str | None:
    """Where a (T, V) logits tensor holds NaN or +inf, in words (None when it holds none). -inf is not counted: it
    is the mask outside the draft vocabulary. NaN compares unequal to everything, so without this test two all-NaN
    readings would 'agree' (no element exceeds the tolerance)."""
    import torch

    nan, pos = torch.isnan(logits), torch.isposinf(logits)
    bad = nan | pos
    count = int(bad.sum())
    if not count:
        return None
    first = int(bad.flatten().nonzero()[0])
    kinds = " and ".join(f"{n} {what}" for n, what in ((int(nan.sum()), "NaN"), (int(pos.sum()), "+inf")) if n)
    return (f"{kinds} of {logits.numel()} logits, the first at (token {first // logits.shape[1]}, target id "
            f"{first % logits.shape[1]})")


def compare(actual: Tensor, expected: Tensor, step: int,
            names: tuple[str, str] = ("the candidate", "the reference")) -> StepDiff:
    import torch

    bad = [f"{name}: {where}" for name, x in zip(names, (actual, expected), strict=True) if (where := nonfinite(x))]
    if bad:
        top1 = int((actual.nan_to_num().argmax(-1) == expected.nan_to_num().argmax(-1)).sum())
        return StepDiff(step, int(actual.numel()), 0, math.nan, (0, 0), math.nan, top1, actual.shape[0], True,
                        "non-finite logits (" + "; ".join(bad) + ")")
    a_inf, b_inf = torch.isinf(actual), torch.isinf(expected)
    top1 = int((actual.argmax(-1) == expected.argmax(-1)).sum())
    rows = actual.shape[0]
    if not torch.equal(a_inf, b_inf):
        return StepDiff(step, 0, 0, math.inf, (0, 0), math.inf, top1, rows, False)
    a, b = actual[~a_inf], expected[~b_inf]
    diff = (a - b).abs()
    scale = float(b.abs().max()) if b.numel() else 1.0
    allowed = ATOL * max(1.0, scale) + RTOL * b.abs()
    mismatched = int((diff > allowed).sum())
    full = (actual - expected).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    flat = int(full.argmax())
    at = (flat // actual.shape[1], flat % actual.shape[1])
    rel = float((diff / b.abs().clamp_min(1e-12)).max()) if b.numel() else 0.0
    return StepDiff(step, int(b.numel()), mismatched, float(diff.max()) if diff.numel() else 0.0, at, rel, top1, rows,
                    True)
