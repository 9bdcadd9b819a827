"""dtypes: floating weights agree with each other and with the config; d2t is int64, t2d bool."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ..drafter.config_values import TLC
from ..registry import Context, Finding, check, error, warning

_VOCAB = ("d2t", "t2d")


@check(
    "dtypes",
    "Tensor dtypes: one floating dtype matching the config, int64 d2t, bool t2d",
    example="d2t-float",
    guards="A float or bf16 d2t (SGLang cannot index with it; bf16 turns id 162995 into 162816), weights "
    "saved in a different precision than the config states, non-float weights without quantisation.",
    evidence=("bfloat16 holds integers exactly only up to 256: target id 162995 of a Kimi-K2 d2t comes back as 162816 "
              "from a bf16 round trip",),
    fix="save d2t as int64 offsets, t2d as bool, every weight in the dtype config.json states",
    codes={
        "non-float-weight": "a weight that is not floating point",
        "mixed-weights": "a weight saved in another dtype than the rest",
        "config-dtype-missing": "config.json states no dtype",
        "config-dtype-unknown": "config.json states a dtype engines do not know",
        "config-dtype-differs": "the weights are not in the dtype config.json states",
        "dtype-and-torch-dtype": "config.json states dtype and torch_dtype differently",
        "d2t-narrow": "d2t in an integer type narrower than int64",
        "t2d-integer": "t2d as integers rather than a bool mask",
        "d2t-not-integer": "d2t is not an integer tensor",
        "t2d-not-bool": "t2d is neither bool nor integer",
    },
)
def dtypes(ctx: Context) -> Iterable[Finding]:
    ckpt = ctx.ckpt
    weights = {n: e for n, e in ckpt.tensors.items() if ckpt.names[n].role not in _VOCAB}
    floats = {n: e for n, e in weights.items() if e.kind == "f"}
    for name, e in sorted(weights.items()):
        if e.kind != "f":
            yield error(
                f"{name}: dtype {e.dtype} is not a floating dtype",
                code="non-float-weight", file=e.file, key=name, expected="BF16, F16 or F32", found=e.dtype,
                why="engines load drafter weights as floating point; an integer tensor here is quantised data "
                "without its scales or a corrupted export",
                fix="re-export the weights in the model's floating dtype",
            )
    common = Counter(e.dtype for e in floats.values()).most_common(1)
    main = common[0][0] if common else None
    for name, e in sorted(floats.items()):
        if e.dtype != main:
            yield warning(
                f"{name}: dtype {e.dtype} while the other weights are {main}",
                code="mixed-weights", file=e.file, key=name, expected=main, found=e.dtype,
                why="engines cast every weight to one dtype; a tensor saved apart from the rest usually means a "
                "conversion step touched it separately",
                fix=f"save every floating weight as {main}",
            )
    cfg = ckpt.config
    if cfg is not None and main is not None:
        stated = cfg.dtype
        v = cfg.entry("dtype")
        if v is None:
            yield warning(
                "config.json states no dtype (torch_dtype or dtype)",
                file="config.json", key="torch_dtype", expected=f'"{main}"', found="absent",
                why="engines then pick the target's dtype, and a reference diff cannot tell the precision",
                code="config-dtype-missing", fix=f"add \"torch_dtype\" matching the weights ({main})",
            )
        elif stated is None:
            yield error(
                f"config.json dtype {v.value!r} is not a floating dtype engines know",
                file="config.json", key=v.key, expected="bfloat16, float16 or float32",
                code="config-dtype-unknown", found=repr(v.value), fix="state the dtype the weights are saved in",
            )
        elif stated != main:
            yield warning(
                f"weights are {main} but config.json states {v.value}",
                file="config.json", key=v.key, expected=main, found=stated,
                why="vLLM casts to its own dtype with only a logged warning; the stated dtype no longer "
                "describes the file",
                code="config-dtype-differs", fix=f"save the weights as {stated} or state {main} in config.json",
            )
    raw = (cfg.raw if cfg is not None else None) or {}
    for where, node in (("", raw), (f"{TLC}.", raw.get(TLC))):
        if isinstance(node, dict) and "dtype" in node and "torch_dtype" in node \
                and node["dtype"] is not None and node["torch_dtype"] is not None \
                and node["dtype"] != node["torch_dtype"]:
            yield warning(
                f"config.json states {where}dtype {node['dtype']!r} and {where}torch_dtype {node['torch_dtype']!r}",
                file="config.json", key=f"{where}torch_dtype", expected="one dtype, or the two equal",
                code="dtype-and-torch-dtype", found=f"{node['dtype']!r} vs {node['torch_dtype']!r}",
                why="readers differ in which of the two they take (transformers renamed torch_dtype to dtype), so "
                "the precision the drafter is served in depends on the engine's version",
                fix=f"keep one of them, stating the weights' dtype{f' ({main})' if main else ''}")
    for role, want in (("d2t", "I64"), ("t2d", "BOOL")):
        vocab = ckpt.entry(role)
        if vocab is None or vocab.dtype == want:
            continue
        e = vocab
        if role == "d2t" and e.kind in "iu":
            yield warning(
                f"{e.name}: dtype {e.dtype}, every producer writes I64",
                code="d2t-narrow", file=e.file, key=e.name, expected="I64", found=e.dtype,
                why="engines copy d2t into an int64 buffer; a narrower type overflows on large vocabularies",
                fix="save d2t as int64",
            )
        elif role == "t2d" and e.kind in "iu":
            yield warning(
                f"{e.name}: dtype {e.dtype}, a mask is saved as BOOL",
                code="t2d-integer", file=e.file, key=e.name, expected="BOOL", found=e.dtype,
                why="readers that index with t2d treat an integer tensor as ids, not a mask", fix="save t2d as bool",
            )
        else:
            yield error(
                f"{e.name}: dtype {e.dtype}, expected {want}",
                code="d2t-not-integer" if role == "d2t" else "t2d-not-bool",
                file=e.file, key=e.name, expected=want, found=e.dtype,
                why="a float d2t cannot index in SGLang, and bf16 rounds ids above 256 to other tokens "
                "(162995 becomes 162816)" if role == "d2t" else "t2d is a boolean mask over the target vocabulary",
                fix="save d2t as int64 offsets" if role == "d2t" else "save t2d as bool",
            )
