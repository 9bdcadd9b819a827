"""Hypothesis strategies for EAGLE-3 drafter checkpoints, and a helper to fuzz any converter.

Public API (needs ``hypothesis``):

* :func:`drafter_shapes` draws the sizes and flags of a valid drafter: GQA ratios, ``head_dim`` different from
  hidden_size / heads, a draft vocabulary equal to or smaller than the target's, with or without ``embed_tokens``
  and ``t2d``, attention/MLP biases, ``norm_before_fc`` or ``fc_norm``, 2 to 4 aux layers, one or two decoder
  layers, bf16/fp16/fp32 weights, a target wider than the drafter;
* :func:`drafters` draws a :class:`DrafterCase` (a shape, a layout, sharded or not, a seed) that writes itself into
  a directory; every case is a valid drafter for its layout's trainer;
* :func:`fuzz_converter` checks a converter callable on drawn sources: every converted checkpoint must pass the
  gate for the target engine and compute what its source computes (forward equivalence, when torch is installed).

Example, a test a user can copy::

    from eagle3_checks.strategies import fuzz_converter

    def my_converter(src, dst):
        ...  # write a flat vLLM checkpoint at dst from the drafter at src

    def test_my_converter():
        fuzz_converter(my_converter, engine="vllm", layouts=("speculators",))
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given
from hypothesis import settings as Settings
from hypothesis import strategies as st

from .drafter.example import EXAMPLE, DrafterShape, drafter_files, write_checkpoint
from .drafter.layout import FLAT, SPECULATORS
from .fast_dataclass import dataclass
from .gate import gate, parse_options
from .numerics import torch_missing


@st.composite
def drafter_shapes(draw, layout: str | None = None) -> DrafterShape:
    """A valid drafter's sizes and flags (for ``layout``, when given: a speculators config cannot state a target
    wider than the drafter, since speculators 0.9 sizes fc from hidden_size)."""
    heads = draw(st.sampled_from([2, 4, 8]))
    kv_heads = draw(st.sampled_from([k for k in (1, 2, 4, 8) if heads % k == 0 and k <= heads]))
    hidden = draw(st.sampled_from([32, 48, 64]))
    head_dim = draw(st.sampled_from([8, 16, 24]))  # often not hidden / heads
    vocab = draw(st.sampled_from([96, 160, 256]))
    draft = draw(st.sampled_from([vocab, vocab // 2, 40]))
    aux = draw(st.sampled_from([(1, 3, 5), (2, 4), (1, 2, 4, 6)]))
    norm = draw(st.sampled_from(["none", "norm_before_fc", "fc_norm"]))
    wider = layout != SPECULATORS and draw(st.booleans())
    return replace(
        EXAMPLE,
        hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=draw(st.sampled_from([48, 96])), vocab_size=vocab, draft_vocab_size=draft,
        target_hidden_size=hidden + 16 if wider else None, aux_layer_ids=aux, target_layers=8,
        num_layers=draw(st.sampled_from([1, 2])), dtype=draw(st.sampled_from(["BF16", "F16", "F32"])),
        attention_bias=draw(st.booleans()), mlp_bias=draw(st.booleans()),
        norm_before_fc=norm == "norm_before_fc", fc_norm=norm == "fc_norm",
        norm_before_residual=draw(st.booleans()), embed_tokens=draw(st.booleans()),
        t2d=draw(st.booleans()),
    )


@dataclass(frozen=True)
class DrafterCase:
    """A drawn drafter: writes itself with :meth:`write`."""

    shape: DrafterShape
    layout: str
    shards: int
    seed: int

    def write(self, path: str | Path) -> Path:
        tensors, config = drafter_files(self.shape, self.layout, self.seed)
        if self.layout == FLAT and len(self.shape.aux_layer_ids) != 3:
            config["num_aux_hidden_states"] = len(self.shape.aux_layer_ids)
        return write_checkpoint(Path(path), tensors, config, self.shards)


@st.composite
def drafters(draw, layouts: tuple[str, ...] = (SPECULATORS, FLAT)) -> DrafterCase:
    layout = draw(st.sampled_from(layouts))
    return DrafterCase(draw(drafter_shapes(layout)), layout, draw(st.sampled_from([1, 2])),
                       draw(st.integers(0, 2**16)))


def fuzz_converter(convert: Callable[[Path, Path], object], *, engine: str = "vllm",
                   layouts: tuple[str, ...] = (SPECULATORS, FLAT), cases=None, settings=None,
                   forward: bool | None = None) -> None:
    """Run ``convert(src_dir, dst_dir)`` on drawn drafters; each result must pass the gate for ``engine`` (header
    level, and forward equivalence against the source when torch is installed, or ``forward=True``). Raises
    AssertionError with the findings and hypothesis' shrunk, falsifying drafter."""

    level = "forward" if (forward if forward is not None else torch_missing() is None) else "header"

    def check(case: DrafterCase) -> None:
        with tempfile.TemporaryDirectory(prefix="eagle3-fuzz-") as tmp:
            src, dst = case.write(Path(tmp) / "source"), Path(tmp) / "converted"
            convert(src, dst)
            options = parse_options(reference="none", level=level, engine=engine,
                                    source=str(src) if level == "forward" else None)
            result = gate(dst, options)
            if result.exit_code:
                bad = [f"{f.check}: {f.message}" for f in result.findings() if f.severity.value == "error"]
                raise AssertionError(f"the converted {case.layout} drafter fails the {engine} gate:\n  "
                                     + "\n  ".join(bad))

    # ``settings``: a hypothesis settings object, e.g. settings(max_examples=20). Each example converts and gates a
    # drafter on disk (a forward pass included), so hypothesis' per-example deadline is off.
    base = settings if settings is not None else Settings()
    given(cases if cases is not None else drafters(layouts))(
        Settings(base, deadline=None,
                 suppress_health_check=[*base.suppress_health_check, HealthCheck.too_slow])(check))()
