"""A failing and a passing example of every built-in check, on the embedded example drafter.

``eagle3-checks explain CHECK`` shows them: the example as ``eagle3-checks demo`` writes it passes the check, and the
same drafter with one defect injected (described in a line) fails it, with the code of the finding it gets. Both are
gated for real, that one check only, in a temporary folder (a few milliseconds; a forward-level check needs torch and
is only described without it). The test suite holds every check to its example.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .drafter.checkpoint import open_checkpoint
from .drafter.example import EXAMPLE, drafter_files, target_config, write_checkpoint
from .drafter.layout import FLAT, SPECULATORS, on_disk_name
from .drafter.spec import resolve_reference
from .gate import all_checks, load_target, parse_options, run_check
from .registry import Context
from .storage.safetensors import RawTensor


@dataclass
class Draft:
    """The example drafter being prepared: its tensors (by on-disk name) and config.json, before they are written."""

    layout: str
    tensors: dict[str, RawTensor]
    config: dict[str, Any]

    def name(self, role: str) -> str:
        return on_disk_name(role, self.layout, "midlayer")


def _without(key: str) -> Callable[[Draft], None]:
    def mutate(d: Draft) -> None:
        del d.config[key]
    return mutate


def _without_tensor(role: str) -> Callable[[Draft], None]:
    def mutate(d: Draft) -> None:
        del d.tensors[d.name(role)]
    return mutate


def _setting(**values: Any) -> Callable[[Draft], None]:
    return lambda d: d.config.update(values)


def _transposed_q(d: Draft) -> None:
    name = d.name("layers.0.self_attn.q_proj.weight")
    t = d.tensors[name]
    d.tensors[name] = RawTensor(t.dtype, t.shape[::-1], t.data)


def _d2t(values: Callable[[list[int]], list[int]], dtype: str = "I64") -> Callable[[Draft], None]:
    def mutate(d: Draft) -> None:
        t = d.tensors["d2t"]
        assert t.data is not None
        offsets = list(struct.unpack(f"<{len(t.data) // 8}q", t.data))
        new = values(offsets)
        data = struct.pack(f"<{len(new)}f", *new) if dtype == "F32" else struct.pack(f"<{len(new)}q", *new)
        d.tensors["d2t"] = RawTensor(dtype, (len(new),), data)
    return mutate


def _nan_fc(d: Draft) -> None:
    t = d.tensors["fc.weight"]
    d.tensors["fc.weight"] = RawTensor(t.dtype, t.shape, b"\xc0\x7f" * (t.nbytes // 2))  # bf16 NaN


def _truncate(path: Path) -> None:
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])


def _aux_ids(*ids: int) -> Callable[[Draft], None]:
    def mutate(d: Draft) -> None:
        d.config["eagle_aux_hidden_state_layer_ids"] = list(ids)
        if d.layout == FLAT:
            d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    return mutate


@dataclass(frozen=True)
class Example:
    """One check's example: the defect (a line, and the edit that makes it) and what the unmodified example has."""

    check: str
    fails: str
    mutate: Callable[[Draft], None] | None = None
    after: Callable[[Path], None] | None = None  # an edit of the written files
    passes: str = "the embedded example as `eagle3-checks demo` writes it"
    layout: str = FLAT
    options: dict[str, Any] = field(default_factory=dict)  # parse_options arguments (target_config: the example's)


EXAMPLES = {e.check: e for e in (
    Example("files", "the flat example with model.safetensors cut 100 bytes short", after=_truncate),
    Example("keys", "the flat example without midlayer.mlp.up_proj.weight",
            _without_tensor("layers.0.mlp.up_proj.weight")),
    Example("shapes", "the flat example with q_proj saved transposed, (64, 96) instead of (96, 64)", _transposed_q),
    Example("dtypes", "the flat example with d2t saved as float32", _d2t(lambda v: v, "F32")),
    Example("vocab.d2t", "the flat example with d2t = arange(128) (target id 2i)", _d2t(lambda v: list(range(len(v))))),
    Example("vocab.t2d", "the flat example with d2t holding absolute target ids (t2d kept)",
            _d2t(lambda v: [i + o for i, o in enumerate(v)])),
    Example("config.fields", "the flat example without intermediate_size", _without("intermediate_size")),
    Example("config.architectures", 'the flat example naming ["Eagle3DraftModel"] (the speculators class)',
            _setting(architectures=["Eagle3DraftModel"])),
    Example("config.layers", "the flat example stating num_hidden_layers 2 (the file holds one layer)",
            _setting(num_hidden_layers=2)),
    Example("config.vocab-sizes", "the flat example stating draft_vocab_size 136 (lm_head has 128 rows)",
            _setting(draft_vocab_size=136)),
    Example("config.aux-layers", "the flat example with aux-layer ids [1, 1, 5]", _aux_ids(1, 1, 5)),
    Example("config.head-dim", "the flat example without head_dim (heads of 24; hidden_size / heads is 16)",
            _without("head_dim"), passes='the embedded example: it states "head_dim": 24'),
    Example("config.tied-embeddings", "the flat example with tie_word_embeddings true (128-token draft vocabulary)",
            _setting(tie_word_embeddings=True)),
    Example("config.rope", "the flat example with rope_theta 1e6 and rope_parameters.rope_theta 10000",
            _setting(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    Example("target.aux-layers", "the flat example with aux id 12 for its 8-layer target", _aux_ids(1, 3, 12),
            options={"target_config": True}),
    Example("target.vocab", "the flat example stating vocab_size 1024 for its 512-token target",
            _setting(vocab_size=1024), options={"target_config": True}),
    Example("target.hidden-size", "the flat example stating target_hidden_size 96 for its 64-wide target",
            _setting(target_hidden_size=96), options={"target_config": True}),
    Example("engine.loads", "the flat example without head_dim: vLLM cuts q/k/v/o to heads of 16",
            _without("head_dim")),
    Example("engine.semantics", "the speculators example without norm_before_residual (vLLM defaults it to True)",
            _without("norm_before_residual"), layout=SPECULATORS),
    Example("engine.aux-layers", "the flat example with its aux ids in eagle_config only (where vLLM 0.33 does not "
            "read them)", _without("eagle_aux_hidden_state_layer_ids"), options={"aux_convention": "vllm"}),
    Example("engine.serving", "the speculators example naming a local path as its verifier",
            lambda d: d.config["speculators_config"]["verifier"].update(name_or_path="/models/llama-target"),
            layout=SPECULATORS),
    Example("reference.diff", "the flat example stating rope_theta 10000 against the tiny-example spec (1e6)",
            _setting(rope_theta=10000.0), options={"reference": "tiny-example"}),
    Example("scan.values", "the flat example with fc.weight all NaN", _nan_fc, options={"level": "scan"}),
    Example("forward.equivalence", "the speculators example without norm_before_residual (vLLM defaults it to "
            "True, speculators trained with False)", _without("norm_before_residual"), layout=SPECULATORS),
)}


def run_example(check_id: str, failing: bool, root: Path | None = None) -> Any:
    """The CheckResult of ``check_id`` on its example (``failing``: with the defect), gated for that check only."""
    example = EXAMPLES[check_id]
    c = next(c for c in all_checks() if c.id == check_id)
    with tempfile.TemporaryDirectory(prefix="eagle3-example-", dir=root) as tmp:
        tensors, cfg = drafter_files(EXAMPLE, example.layout)
        draft = Draft(example.layout, tensors, cfg)
        if failing and example.mutate:
            example.mutate(draft)
        path = write_checkpoint(Path(tmp) / f"example-{example.layout}", draft.tensors, draft.config)
        if failing and example.after:
            example.after(path)
        options = dict(example.options)
        target = None
        if options.pop("target_config", False):
            target_path = Path(tmp) / "target.json"
            target_path.write_text(json.dumps(target_config(EXAMPLE)))
            options["target_config"] = str(target_path)
        gate_options = parse_options(**{"reference": "none", **options})
        if gate_options.target_config:
            target = load_target(gate_options.target_config)
        ckpt = open_checkpoint(path)
        reference, note = resolve_reference(gate_options.reference, ckpt)
        ctx = Context(ckpt, reference, note, target, gate_options)
        engine = gate_options.engines()[0] if c.per_engine else None
        return run_check(c, dataclasses.replace(ctx, engine=engine), {})
