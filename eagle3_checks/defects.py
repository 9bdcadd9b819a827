"""The defect catalogue: every defect the project injects into the embedded example drafter, each named once.

A :class:`Defect` is a name (``d2t-absolute``), the finding code it must raise (``vocab.t2d/absolute-ids``), a line
describing it and the edit that makes it: a function over a :class:`Draft` (the drafter's tensors by on-disk name, its
config.json and its layout, before they are written), built from the small edits below (:func:`config`,
:func:`without`, :func:`transpose`, :func:`d2t_values`, ...). A few defects edit the written files instead
(``after``: a truncated file, a shard deleted).

Three things use it. ``eagle3-checks explain CHECK`` shows each check's example (:data:`EXAMPLES`): the check names a
defect of the catalogue in its registration (``@check(example=...)``), and the example drafter as
``eagle3-checks demo`` writes it passes the check while the same drafter with that defect fails it, both gated for
real, that one check only, in a temporary folder (a forward-level check needs torch and is only described without
it). The test suite injects every defect into the drafters of both layouts and holds each to its codes. The
conformance checkpoint set (``conformance/checkpoints.py``) builds its defect cases from it.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .drafter.checkpoint import open_checkpoint

# the catalogue's pieces, defined below the checks (a check may declare its example with them), re-exported here
from .drafter.defect_kit import LAYOUTS as LAYOUTS
from .drafter.defect_kit import REMOVE as REMOVE
from .drafter.defect_kit import REPLAYED as REPLAYED
from .drafter.defect_kit import Defect as Defect
from .drafter.defect_kit import Draft as Draft
from .drafter.defect_kit import Edit as Edit
from .drafter.defect_kit import (
    _array,
    adding,
    combined,
    config,
    d2t_values,
    layer_config,
    renaming,
    stated_aux_ids,
    target_ids,
    transpose,
    without,
)
from .drafter.defect_kit import aux_ids as aux_ids
from .drafter.defect_kit import eagle_config as eagle_config
from .drafter.defect_kit import replaying as replaying
from .drafter.example import EXAMPLE, target_config
from .drafter.layout import FLAT, SPECULATORS
from .fast_dataclass import dataclass
from .gate import all_checks, open_target, parse_options, reference_for, run_check
from .registry import Check, Context
from .storage.safetensors import RawTensor, from_numpy


def _lm_head_rows_shuffled(d: Draft) -> None:
    """lm_head's rows in another order (a seeded permutation): every shape, name and value statistic unchanged."""
    t = d.tensors["lm_head.weight"]
    assert t.data is not None
    rows = np.frombuffer(t.data, np.uint8).reshape(t.shape[0], -1)  # whole rows of bytes, in any dtype
    order = np.random.default_rng(0).permutation(t.shape[0])
    d.tensors["lm_head.weight"] = RawTensor(t.dtype, t.shape, rows[order].tobytes())


def example_data(layout: str, root: Path) -> Path:
    """States recorded from the clean example drafter of ``layout`` itself (acceptance.synthetic: each next token
    its own step-0 choice), for the defects gated on data; written under ``root`` once."""
    from .acceptance.synthetic import write_self_labelled

    folder = root / f"example-data-{layout}"
    if not (folder / "done").exists():
        clean = Draft.example(layout).save(root / f"example-clean-{layout}")
        write_self_labelled(open_checkpoint(clean), folder)
        (folder / "done").write_text("")
    return folder


def _past_the_vocabulary(ids: np.ndarray) -> None:
    ids[-1] += EXAMPLE.vocab_size


def _swap_10_11(ids: np.ndarray) -> None:
    ids[[10, 11]] = ids[[11, 10]]


def _21_as_20(ids: np.ndarray) -> None:
    ids[21] = ids[20]


def _t2d_swapped(d: Draft) -> None:
    """t2d marks one token d2t does not reach instead of one it does."""
    mask = _array(d.tensors["t2d"], "?").copy()
    on, off = np.flatnonzero(mask)[50], np.flatnonzero(~mask)[-1]
    mask[on], mask[off] = False, True
    d.tensors["t2d"] = from_numpy(mask)


def _filled(role: str, value: bytes) -> Edit:
    """Every value of a bf16 tensor the same two bytes."""
    def edit(d: Draft) -> None:
        t = d.tensors[d.name(role)]
        d.tensors[d.name(role)] = RawTensor(t.dtype, t.shape, value * (t.nbytes // 2))
    return edit


def full_vocab_lm_head(d: Draft) -> None:
    """lm_head over the target's whole vocabulary instead of the draft vocabulary."""
    d.add("lm_head.weight", (d.shape.vocab_size, d.shape.hidden_size))


# ----- edits of the written files -------------------------------------------------------------------------------------

def _cut(nbytes: int) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        f = path / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-nbytes])
    return edit


def _second_shard_deleted(path: Path) -> None:
    sorted(path.glob("model-*.safetensors"))[1].unlink()


def _index_escapes(path: Path) -> None:
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"][next(iter(index["weight_map"]))] = "../elsewhere/model.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def _config_deleted(path: Path) -> None:
    (path / "config.json").unlink()


# ----- the catalogue --------------------------------------------------------------------------------------------------

def _fc_unwritten(record: dict) -> None:
    record["unwritten"] = [{"param": "model.fc.weight", "shard": None, "role": "fc.weight"}]


H, HT = EXAMPLE.hidden_size, EXAMPLE.ht
TARGET = {"target_config": True}

CATALOGUE: tuple[Defect, ...] = (
    # ----- files
    Defect("truncated", "files/truncated", "with model.safetensors cut 100 bytes short", after=_cut(100)),
    Defect("shard-missing", "files/missing-shard", "written in 3 shards, the second one deleted",
           after=_second_shard_deleted, shards=3),
    Defect("shard-escapes", "files/index-mismatch",
           "written in 3 shards, its index placing a tensor outside the checkpoint folder", after=_index_escapes,
           shards=3),
    Defect("config-missing", "files/config-missing", "without config.json", after=_config_deleted),
    # ----- tensor names
    Defect("missing-up-proj", "keys/missing-tensor", "without midlayer.mlp.up_proj.weight",
           without("layers.0.mlp.up_proj.weight")),
    Defect("d2t-missing", "keys/missing-tensor", "without d2t (its draft vocabulary is 128 of 512 tokens)",
           without("d2t")),
    Defect("hidden-norm-missing", "keys/missing-tensor", "without layer 0's hidden_norm",
           without("layers.0.hidden_norm.weight")),
    Defect("model-prefix", "keys/model-prefix", "with every tensor name prefixed model.",
           renaming(lambda n: f"model.{n}")),
    Defect("midlayer-names-in-speculators", "keys/flat-names",
           "with its layer named midlayer.* (the flat layout's name)",
           renaming(lambda n: n.replace("layers.0.", "midlayer.", 1)), layouts=(SPECULATORS,)),
    Defect("unknown-tensor", "keys/unknown-tensor", "with a tensor no engine parameter matches (extra_proj)",
           adding({"extra_proj.weight": (H, H)})),
    Defect("unknown-layer-tensor", "keys/unknown-tensor",
           "with a tensor in its layer that no engine parameter matches (mlp.extra_proj)",
           adding({"midlayer.mlp.extra_proj.weight": (H, H)}), layouts=(FLAT,)),
    Defect("input-norm-undeclared", "keys/undeclared-input-norm", "with input_norm.weight but no norm_before_fc",
           adding({"input_norm.weight": (3 * HT,)})),
    # ----- shapes
    Defect("transposed-q-proj", "shapes/mismatch", "with q_proj saved transposed, (128, 96) instead of (96, 128)",
           transpose("layers.0.self_attn.q_proj.weight")),
    Defect("fc-two-aux", "config.aux-layers/fc-width", "with fc sized for 2 aux states while 3 ids are stated",
           adding({"fc.weight": (H, 2 * HT)}), also=("shapes/mismatch",)),
    Defect("lm-head-full-vocab", "shapes/mismatch", "with lm_head over the full 512-token vocabulary",
           full_vocab_lm_head),
    Defect("embed-tokens-short", "shapes/mismatch", "with embed_tokens one row short of vocab_size",
           adding({"embed_tokens.weight": (EXAMPLE.vocab_size - 1, H)})),
    # ----- dtypes
    Defect("d2t-float", "dtypes/d2t-not-integer", "with d2t saved as float32",
           d2t_values(lambda v: v.astype(np.float32))),
    Defect("d2t-float-off-reference", "reference.diff/dtype",
           "with d2t saved as float32, diffed against the tiny-example spec (int64)",
           d2t_values(lambda v: v.astype(np.float32)), also=("dtypes/d2t-not-integer",),
           options={"reference": "tiny-example"}),
    # ----- the vocabulary mapping
    Defect("d2t-arange", "vocab.d2t/arange", "with d2t = arange(128) (target id 2i)",
           d2t_values(lambda v: np.arange(len(v), dtype=np.int64))),
    Defect("d2t-absolute", "vocab.t2d/absolute-ids", "with d2t holding absolute target ids (t2d kept)",
           d2t_values(lambda v: v + np.arange(len(v)))),
    Defect("d2t-absolute-no-t2d", "vocab.d2t/out-of-range", "with d2t holding absolute target ids, and no t2d",
           combined(d2t_values(lambda v: v + np.arange(len(v))), without("t2d"))),
    Defect("d2t-out-of-range", "vocab.d2t/out-of-range", "with draft id 127 mapped past the target vocabulary",
           target_ids(_past_the_vocabulary)),
    Defect("d2t-unsorted", "vocab.d2t/unsorted", "with the target ids of draft ids 10 and 11 swapped",
           target_ids(_swap_10_11)),
    Defect("d2t-duplicated", "vocab.d2t/duplicate-ids", "with draft ids 20 and 21 mapped to one target id",
           target_ids(_21_as_20)),
    Defect("t2d-inconsistent", "vocab.t2d/disagrees", "with t2d marking one token d2t does not reach",
           _t2d_swapped),
    # ----- config.json
    Defect("intermediate-size-missing", "config.fields/missing-field", "without intermediate_size",
           layer_config(intermediate_size=REMOVE)),
    Defect("speculators-class-in-flat", "config.architectures/speculators-class-in-flat",
           'naming ["Eagle3DraftModel"] (the speculators class)', config(architectures=["Eagle3DraftModel"]),
           layouts=(FLAT,)),
    Defect("flat-class-in-speculators", "config.architectures/flat-class-in-speculators",
           'naming ["LlamaForCausalLMEagle3"] (a flat class)', config(architectures=["LlamaForCausalLMEagle3"]),
           layouts=(SPECULATORS,)),
    Defect("unserved-architecture", "config.architectures/not-a-drafter-class",
           'naming ["LlamaModel"] (no engine serves it)', config(architectures=["LlamaModel"]), layouts=(FLAT,)),
    Defect("num-hidden-layers-off", "config.layers/count-mismatch",
           "stating num_hidden_layers 2 (the file holds one layer)", layer_config(num_hidden_layers=2)),
    Defect("draft-vocab-size-unstated", "config.vocab-sizes/draft-vocab-unstated",
           "without draft_vocab_size (lm_head has 128 rows)", config(draft_vocab_size=REMOVE)),
    Defect("draft-vocab-size-off", "config.vocab-sizes/draft-vocab-mismatch",
           "stating draft_vocab_size 136 (lm_head has 128 rows)",
           config(draft_vocab_size=EXAMPLE.draft_vocab_size + 8)),
    Defect("vocab-size-halved", "config.vocab-sizes/vocab-size-mismatch",
           "stating vocab_size 256 (its d2t covers 512 tokens)", layer_config(vocab_size=EXAMPLE.vocab_size // 2)),
    Defect("aux-ids-repeated", "config.aux-layers/repeated", "with aux-layer ids [1, 1, 5]", stated_aux_ids(1, 1, 5)),
    Defect("head-dim-missing", "config.head-dim/missing",
           "without head_dim (heads of 24; hidden_size / heads is 16)", layer_config(head_dim=REMOVE),
           also=("shapes/mismatch", "engine.loads/narrowed"), clean='it states "head_dim": 24'),
    Defect("tied-embeddings", "config.tied-embeddings/draft-vocab",
           "with tie_word_embeddings true (128-token draft vocabulary)", config(tie_word_embeddings=True)),
    Defect("tied-embeddings-without-lm-head", "config.tied-embeddings/draft-vocab",
           "with tie_word_embeddings true and no lm_head (128-token draft vocabulary)",
           combined(config(tie_word_embeddings=True), without("lm_head.weight"))),
    Defect("rope-theta-conflict", "config.rope/theta-conflict",
           "with rope_theta 1e6 and rope_parameters.rope_theta 10000",
           config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), layouts=(FLAT,)),
    # ----- the target model
    Defect("aux-id-beyond-target", "target.aux-layers/out-of-range", "with aux id 12 for its 8-layer target",
           stated_aux_ids(1, 3, EXAMPLE.target_layers + 4), also=("engine.aux-layers/beyond-last-layer",),
           options=TARGET),
    Defect("vocab-size-above-target", "target.vocab/mismatch", "stating vocab_size 1024 for its 512-token target",
           layer_config(vocab_size=2 * EXAMPLE.vocab_size), options=TARGET),
    Defect("target-hidden-size-off", "target.hidden-size/target-hidden-size",
           "stating target_hidden_size 96 for its 64-wide target", config(target_hidden_size=96), options=TARGET),
    # ----- what the engines do with it
    Defect("norm-before-residual-absent", "engine.semantics/norm-before-residual",
           "without norm_before_residual (vLLM defaults it to True, speculators trained with False)",
           config(norm_before_residual=REMOVE), also=("forward.equivalence/differs",), layouts=(SPECULATORS,)),
    # ----- gated on recorded states: the acceptance level
    Defect("norm-before-residual-absent-measured", "acceptance.engine-drop/drop",
           "without norm_before_residual (vLLM 0.33 defaults it to True), gated with --max-drop 0.02 on states "
           "recorded from it", config(norm_before_residual=REMOVE),
           also=("engine.semantics/norm-before-residual", "forward.equivalence/differs"), layouts=(SPECULATORS,),
           data=True, options={"max_drop": 0.02}),
    Defect("norm-before-residual-flipped", "acceptance.trained-with/norm-before-residual",
           "stating norm_before_residual true, gated on states recorded from it as trained (false)",
           config(norm_before_residual=True), layouts=(SPECULATORS,), data=True),
    Defect("lm-head-rows-shuffled", "acceptance.figures/accepts-nothing",
           "with lm_head's rows shuffled, gated on states recorded from it with --min-acceptance 1.5",
           _lm_head_rows_shuffled, also=("acceptance.figures/below-minimum",), data=True,
           options={"min_acceptance": 1.5}),
    Defect("aux-ids-in-eagle-config-only", "engine.aux-layers/ids-not-read",
           "with its aux ids in eagle_config only (where vLLM 0.33 does not read them)",
           config(eagle_aux_hidden_state_layer_ids=REMOVE), layouts=(FLAT,), options={"aux_convention": "vllm"}),
    Defect("trainer-release-unknown", "config.trainer-release/unknown-release",
           "a speculators config without speculators_version, whose norm_output true feeds the normed state back "
           "from speculators 0.7.0 on (models/eagle3/config.py:76) and means nothing to the releases before",
           config(speculators_version=REMOVE, norm_output=True), layouts=(SPECULATORS,)),
    Defect("unrecorded-release", "engine.release/nearest",
           "gated for vLLM 0.20.0, a release older than every recording, judged as the oldest recorded one",
           options={"engine": "vllm@0.20.0"}, in_options=True),
    Defect("live-engine-disagrees", "engine.live/unwritten",
           "judged live by an engine that leaves fc.weight unwritten (vLLM 0.33.0's own recording of the example, "
           "replayed with that change)", layouts=(FLAT,), options=TARGET, replay=_fc_unwritten,
           also=("engine.live/disagrees",)),
    Defect("local-verifier", "engine.serving/local-verifier", "naming a local path as its verifier",
           lambda d: d.config["speculators_config"]["verifier"].update(name_or_path="/models/llama-target"),
           layouts=(SPECULATORS,)),
    # ----- a reference spec, the weights' values
    Defect("rope-theta-off-reference", "reference.diff/semantic",
           "stating rope_theta 10000 against the tiny-example spec (1e6)", config(rope_theta=10000.0),
           layouts=(FLAT,), options={"reference": "tiny-example"}),
    Defect("fc-nan", "scan.values/non-finite", "with fc.weight all NaN", _filled("fc.weight", b"\xc0\x7f"),
           options={"level": "scan"}),
    Defect("fc-all-zero", "scan.values/all-zero", "with fc.weight all zeros", _filled("fc.weight", b"\0\0"),
           options={"level": "scan"}),
)
# and the examples checks declare beside their registration (@check(example=Defect(...))), built-in or a plugin's
CATALOGUE += tuple(c.example for c in all_checks() if isinstance(c.example, Defect))
DEFECTS: dict[str, Defect] = {d.name: d for d in CATALOGUE}
assert len(DEFECTS) == len(CATALOGUE), "two defects of one name"


def inject(draft: Draft, name: str) -> Draft:
    """Make the catalogue's defect ``name`` in ``draft`` (one that edits the drafter, not its written files)."""
    defect = DEFECTS[name]
    if defect.after or defect.shards != 1:
        raise ValueError(f"defect {name} edits the written files: write it with Defect.write")
    return defect.apply(draft)


# ----- each check's example -------------------------------------------------------------------------------------------

PASSES = "the embedded example as `eagle3-checks demo` writes it"


@dataclass(frozen=True)
class Example:
    """One check's example: the catalogue's defect that fails it (its ``@check(example=...)``), on the example
    drafter of one layout."""

    check: str
    defect: Defect
    layout: str

    @property
    def code(self) -> str | None:
        """The defect's code of this check (None: the defect declares none)."""
        return next((c for c in self.defect.codes if c.partition("/")[0] == self.check), None)

    @property
    def fails(self) -> str:
        return f"the {self.layout} example {self.defect.description}"

    @property
    def passes(self) -> str:
        return f"the embedded example: {self.defect.clean}" if self.defect.clean else PASSES


def example_of(c: Check) -> Example | None:
    """The example of check ``c``: the catalogue's defect it names, on the flat example where the defect applies."""
    defect = c.example if isinstance(c.example, Defect) else DEFECTS.get(c.example)
    if defect is None:
        return None
    return Example(c.id, defect, FLAT if FLAT in defect.layouts else defect.layouts[0])


class _Examples(Mapping[str, Example]):
    """Each check's example by check id, derived from the registry (every check registered when it is read) and the
    catalogue: a check without one (a plugin's) is absent."""

    def _table(self) -> dict[str, Example]:
        return {c.id: e for c in all_checks() if (e := example_of(c)) is not None}

    def __getitem__(self, check_id: str) -> Example:
        return self._table()[check_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


EXAMPLES: Mapping[str, Example] = _Examples()


def run_example(check_id: str, failing: bool, root: Path | None = None) -> Any:
    """The CheckResult of ``check_id`` on its example (``failing``: with the defect), gated for that check only."""
    example = EXAMPLES[check_id]
    c = next(c for c in all_checks() if c.id == check_id)
    with tempfile.TemporaryDirectory(prefix="eagle3-example-", dir=root) as tmp:
        draft = Draft.example(example.layout)
        path = Path(tmp) / f"example-{example.layout}"
        if failing:
            example.defect.write(draft, path)
        else:
            draft.save(path)
        target_path = Path(tmp) / "target.json"
        target_path.write_text(json.dumps(target_config(EXAMPLE)))
        data = example_data(example.layout, Path(tmp)) if example.defect.data else None
        asked = example.defect.gate_options(target_path, data, made=failing) \
            if failing or not example.defect.in_options else {}
        gate_options = parse_options(**{"reference": "none", **asked})
        target, _ = open_target(gate_options.target_config, None)
        ckpt = open_checkpoint(path)
        reference, note = reference_for(gate_options.reference, ckpt, target)
        ctx = Context(ckpt, reference, note, target, gate_options)
        engine = c.engines(gate_options)[0]
        return run_check(c, dataclasses.replace(ctx, engine=engine), {})
