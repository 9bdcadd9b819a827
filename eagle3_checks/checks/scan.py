"""scan.values: every weight is a number, not zero, and not left as initialised.

One streaming pass over every floating tensor (:mod:`eagle3_checks.numerics.value_stats`): NaN and Inf counts with the
first index, all-zero tensors, norms far from their usual scale, and tensors whose statistics match a common
initialiser exactly (they were never trained). Per-tensor statistics go into the report.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable

from ..drafter.layout import SPECULATORS, is_norm
from ..engines.reading import layer_fields
from ..registry import Context, Data, Finding, NotApplicable, check, error, info, note, warning

PROGRESS_FROM = 1 << 30  # show progress on a terminal for checkpoints over ~1 GB

_NONFINITE_WHY = ("a NaN or Inf propagates through every draft step: all drafted tokens are garbage and none is "
                  "accepted; speculators initialises embed_tokens and lm_head to NaN until the verifier's weights "
                  "are loaded, so an export before that step ships NaN")


def _index(flat: int, shape: tuple[int, ...]) -> str:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim if dim else 0)
        flat //= dim if dim else 1
    return "(" + ", ".join(map(str, reversed(out))) + ("," if len(shape) == 1 else "") + ")"


def _progress(done: int, total: int) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    sys.stderr.write(f"\r  scanning weights [{'#' * filled}{'.' * (width - filled)}] "
                     f"{done / 1e9:.1f}/{total / 1e9:.1f} GB")
    sys.stderr.flush()


def _gaussian_extreme(n: int) -> float:
    """The expected largest |x| / sigma among n normal draws (the Gumbel approximation for 2n tails)."""
    a = math.sqrt(2 * math.log(2 * n))
    return a - (math.log(math.log(2 * n)) + math.log(4 * math.pi)) / (2 * a)


def _untrained(role: str | None, st, init_range: float) -> str | None:
    """The initialiser a tensor's statistics match, if they match one closely.

    A normal(0, sigma) match needs all of: the mean near 0, the std within about four standard errors of sigma
    (never tighter than 2%), the excess kurtosis near 0 (four standard errors, at least 0.1), and the largest
    magnitude, over every element, where the Gaussian extreme puts it (within -20%/+25%). Trained weights have
    heavier tails and outliers, so they fail the kurtosis or the extreme. A uniform(-b, b) match needs the kurtosis
    of a uniform (-1.2) and max / std = sqrt(3).
    """
    n = st.sample
    if n < 4096 or not st.std > 0 or not math.isfinite(st.std) or is_norm(role):
        return None
    std_tol = max(0.02, 4 / math.sqrt(2 * n))
    kurt_tol = max(0.1, 4 * math.sqrt(24 / n))
    extreme = _gaussian_extreme(st.numel)

    def normal(sigma: float) -> bool:
        return (abs(st.mean) < 4 * sigma / math.sqrt(n) + 0.01 * sigma and abs(st.std / sigma - 1) < std_tol
                and abs(st.kurtosis) < kurt_tol and 0.8 <= st.max_abs / st.std / extreme <= 1.25)

    candidates = [(init_range, f"normal(0, {init_range:g}) (transformers' initializer_range)")]
    if role == "embed_tokens.weight":
        candidates.append((1.0, "nn.Embedding's normal(0, 1) initialisation"))
    for sigma, label in candidates:
        if normal(sigma):
            return label
    # uniform(-b, b): excess kurtosis -1.2 and std = b / sqrt(3) (nn.Linear's default, b = 1 / sqrt(fan_in))
    if abs(st.kurtosis + 1.2) < 0.05 and abs(st.max_abs / st.std - math.sqrt(3)) < 0.05:
        return f"uniform(-{st.max_abs:.3g}, {st.max_abs:.3g}) (nn.Linear's default initialisation)"
    return None


@check(
    "scan.values",
    "Every weight is finite, non-zero and trained",
    example="fc-nan",
    level="scan",
    guards="NaN weights (speculators initialises embed_tokens and lm_head to NaN until the verifier's are loaded), "
    "Inf, all-zero tensors, norms far from their scale, tensors that still hold their random initialisation "
    "(an exporter that saved an untrained embed_tokens: TorchSpec #38).",
    evidence=("speculators model.py: embed_tokens and lm_head initialised to NaN", "TorchSpec #38"),
    fix="re-export the tensors named from the trained model, after the verifier's weights were loaded",
    codes={
        "not-scanned": note("tensors whose bytes run past the end of the file"),
        "unsupported-dtype": note("tensors of a dtype the scan does not read"),
        "unreadable": "a tensor's bytes cannot be read",
        "non-finite": "NaN or Inf values",
        "all-zero": "a weight that is all zeros",
        "zero-bias": "a bias that is all zeros",
        "norm-at-init": "a norm left at 1.0",
        "norm-scale": "a norm far from its usual scale",
        "untrained": "statistics of a random initialiser: never trained",
    },
)
def values(ctx: Context) -> Iterable[Finding | Data]:
    # the scan pass (and numpy, its threads) is imported when the scan runs, never by a header-level gate
    from ..numerics.value_stats import scan, supported

    ckpt = ctx.ckpt
    # bytes past the end of a file are the files check's finding (truncated): scan what is there
    if not ckpt.tensors:
        raise NotApplicable("the checkpoint lists no tensors (see files and keys)")
    entries = [e for e in ckpt.tensors.values() if not ckpt.ends_past_file(e)]
    if not entries:
        raise NotApplicable("no tensor's bytes can be read (see files)")
    if len(entries) < len(ckpt.tensors):
        missed = sorted(set(ckpt.tensors) - {e.name for e in entries})
        yield Data({"not_scanned": missed})
        yield info(f"{len(missed)} tensor(s) not scanned, their bytes run past the end of the file (see files): "
                   f"{', '.join(missed[:5])}{' ...' if len(missed) > 5 else ''}", code="not-scanned")
    show = bool(ctx.options and ctx.options.progress) and sum(e.nbytes for e in entries) > PROGRESS_FROM
    result = scan(entries, _progress if show else None)
    if show:
        sys.stderr.write("\n")
    skipped = sorted({e.dtype for e in entries if e.kind == "f" and not supported(e.dtype)})
    if skipped:
        names = sorted(e.name for e in entries if e.dtype in skipped)
        yield info(f"{len(names)} tensor(s) of dtype {', '.join(skipped)} not scanned (a scale format without "
                   f"NaN/Inf semantics here): {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}",
                   code="unsupported-dtype")
    cfg = ckpt.config
    layer = layer_fields(cfg.raw, cfg.layout == SPECULATORS) if cfg is not None else {}
    init_range = layer.get("initializer_range", 0.02)  # transformers' default
    if not isinstance(init_range, (int, float)) or isinstance(init_range, bool) or not 0 < init_range < 10:
        init_range = 0.02
    for name, st in result.stats.items():
        e = ckpt.tensors[name]
        role = ckpt.names[name].role
        where = dict(file=e.file, key=name)
        if st.error:
            yield error(f"{name}: cannot be read ({st.error})", **where, why="the weights are incomplete",
                        fix="copy the file again from its source", code="unreadable")
            continue
        if st.nan or st.inf:
            parts = [f"{n} {kind}" for n, kind in ((st.nan, "NaN"), (st.inf, "Inf")) if n]
            yield error(f"{name}: {' and '.join(parts)} of {st.numel} values, the first at index "
                        f"{_index(st.first_nonfinite or 0, e.shape)}", **where, expected="finite values",
                        code="non-finite", found=", ".join(parts), why=_NONFINITE_WHY,
                        fix="re-export from the trained model; for speculators, after load_verifier_weights()")
            continue
        if st.all_zero:
            bias = bool(role and role.endswith(".bias"))
            make = warning if bias else error
            yield make(f"{name}: every value is zero", **where, expected="trained values", found="all zeros",
                       why=("a bias left at its zero initialisation" if bias else
                            "a zero weight makes its layer output nothing: the drafter was never trained here, "
                            "or the export lost the data"),
                       fix="re-export the tensor from the trained model", code="zero-bias" if bias else "all-zero")
            continue
        if is_norm(role):
            if st.constant and st.max_abs == 1.0:
                yield warning(f"{name}: every value is 1.0, RMSNorm's initial value", code="norm-at-init", **where,
                              expected="trained scales", found="all ones",
                              why="a norm that never moved from its initialisation was not trained (or the export "
                              "wrote a fresh module)", fix="re-export the trained norm weights")
            elif st.max_abs > 64 or st.max_abs < 1e-2:
                yield warning(f"{name}: largest scale {st.max_abs:.3g}, far from an RMSNorm's usual range", **where,
                              expected="scales around 1 (0.01 to 64)", found=f"max |w| = {st.max_abs:.3g}",
                              why="a norm this far from 1 points at a tensor from another role, or a broken export",
                              fix="check that this tensor is the norm it is named as", code="norm-scale")
            continue
        init = _untrained(role, st, float(init_range))
        if init:
            yield warning(f"{name}: its statistics match {init} (mean {st.mean:.3g}, std {st.std:.3g}, excess "
                          f"kurtosis {st.kurtosis:.2f})", code="untrained", **where, expected="trained weights",
                          found=f"an untouched {init}",
                          why="a tensor still at its random initialisation was never trained: the exporter saved a "
                          "fresh module (TorchSpec #38: an untrained embed_tokens served by vLLM)",
                          fix="re-export the tensor from the trained model")
    yield Data({"bytes_scanned": result.bytes_read,
                "tensors": {name: st.as_dict() for name, st in result.stats.items()}})
