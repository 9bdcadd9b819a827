"""The pieces a defect of the embedded example drafter is made of, below the checks: the drafter being edited
(:class:`Draft`), the small edits (:func:`config`, :func:`without`, :func:`transpose`, :func:`d2t_values`, ...) and
:class:`Defect` itself, so that a check may declare its example beside its registration
(``@check(example=Defect(...))``) instead of in the catalogue (:mod:`eagle3_checks.defects`, which re-exports all of
it).
"""

from __future__ import annotations

import json
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np

from ..fast_dataclass import dataclass
from ..storage.safetensors import RawTensor, from_numpy
from .example import EXAMPLE, DrafterShape, drafter_files, write_checkpoint
from .layout import FLAT, SPECULATORS

LAYOUTS = (SPECULATORS, FLAT)


# ----- the drafter being edited ---------------------------------------------------------------------------------------

@dataclass
class Draft:
    """A drafter being prepared: its tensors (by on-disk name), its config.json and its layout, before they are
    written (:meth:`save`). ``shape``: the :class:`DrafterShape` it was made from."""

    layout: str
    tensors: dict[str, RawTensor]
    config: dict[str, Any]
    shape: DrafterShape = EXAMPLE

    @classmethod
    def example(cls, layout: str = FLAT, shape: DrafterShape = EXAMPLE, seed: int = 0,
                first_layer: str = "midlayer") -> Draft:
        """The embedded example drafter of ``shape`` in ``layout`` (a flat one may call layer 0 ``layers.0.``)."""
        tensors, config_json = drafter_files(shape, layout, seed, first_layer)
        return cls(layout, tensors, config_json, shape)

    def name(self, role: str) -> str:
        """The on-disk name of a role (flat drafters may call layer 0 ``midlayer``)."""
        if self.layout == FLAT and role.startswith("layers.0.") and role not in self.tensors:
            return "midlayer." + role[len("layers.0."):]
        return role

    @property
    def layer_config(self) -> dict[str, Any]:
        """The dict that holds the decoder-layer fields (nested in a speculators config)."""
        return self.config["transformer_layer_config"] if self.layout == SPECULATORS else self.config

    def add(self, name: str, shape: tuple[int, ...]) -> None:
        """A tensor the example does not have, with reproducible values (norm scales near 1)."""
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        if name.endswith("norm.weight") or "aux_norm" in name:
            values = 1.0 + 0.05 * rng.standard_normal(shape)
        else:
            values = rng.standard_normal(shape) / np.sqrt(shape[-1])
        self.tensors[name] = from_numpy(values.astype(np.float32), self.shape.dtype)

    def save(self, path: Path, shards: int = 1) -> Path:
        """Write config.json and the safetensors file(s) (behind an index when ``shards`` > 1) into ``path``."""
        return write_checkpoint(path, self.tensors, self.config, shards)


Edit = Callable[[Draft], None]
REMOVE = object()  # a config value that deletes the key


# ----- edits, to combine into defects ---------------------------------------------------------------------------------

def _update(target: dict[str, Any], fields: dict[str, Any]) -> None:
    for key, value in fields.items():
        if value is REMOVE:
            target.pop(key, None)
        else:
            target[key] = value


def config(**fields: Any) -> Edit:
    """Set (or, with REMOVE, delete) top-level config.json fields."""
    return lambda d: _update(d.config, fields)


def layer_config(**fields: Any) -> Edit:
    """Set (or delete) decoder-layer fields: top level in a flat config, transformer_layer_config otherwise."""
    return lambda d: _update(d.layer_config, fields)


def eagle_config(**fields: Any) -> Edit:
    """Set (or delete) fields of a flat config's eagle_config block."""
    return lambda d: _update(d.config.setdefault("eagle_config", {}), fields)


def without(*roles: str) -> Edit:
    """Delete tensors by role."""
    def edit(d: Draft) -> None:
        for role in roles:
            del d.tensors[d.name(role)]
    return edit


def adding(shapes: dict[str, tuple[int, ...]]) -> Edit:
    """Add (or replace) tensors by on-disk name and shape (:meth:`Draft.add`'s values)."""
    def edit(d: Draft) -> None:
        for name, shape in shapes.items():
            d.add(name, shape)
    return edit


def renaming(mapping: Callable[[str], str]) -> Edit:
    """Rename every tensor."""
    def edit(d: Draft) -> None:
        d.tensors = {mapping(name): t for name, t in d.tensors.items()}
    return edit


def aux_ids(top: list[int] | None = None, eagle: list[int] | None = None) -> Edit:
    """Aux-layer ids at the top level and/or in eagle_config (None: absent there)."""
    return combined(config(eagle_aux_hidden_state_layer_ids=REMOVE if top is None else top),
                    eagle_config(eagle_aux_hidden_state_layer_ids=REMOVE if eagle is None else eagle))


def stated_aux_ids(*ids: int) -> Edit:
    """Aux-layer ids stated where the layout states them: the top level, and a flat config's eagle_config too."""
    def edit(d: Draft) -> None:
        d.config["eagle_aux_hidden_state_layer_ids"] = list(ids)
        if d.layout == FLAT:
            d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = list(ids)
    return edit


def combined(*edits: Edit) -> Edit:
    """Apply edits in order."""
    def edit(d: Draft) -> None:
        for e in edits:
            e(d)
    return edit


def transpose(role: str) -> Edit:
    """Store a tensor with its shape reversed (the bytes unchanged), as a transposing exporter would."""
    def edit(d: Draft) -> None:
        t = d.tensors[d.name(role)]
        d.tensors[d.name(role)] = RawTensor(t.dtype, t.shape[::-1], t.data)
    return edit


def _array(t: RawTensor, dtype: str) -> np.ndarray:
    """The values of a tensor the example wrote (its bytes are in memory)."""
    assert t.data is not None
    return np.frombuffer(t.data, dtype)


def d2t_values(transform: Callable[[np.ndarray], np.ndarray]) -> Edit:
    """Rewrite d2t (int64 offsets) through ``transform``; its result's dtype is written."""
    def edit(d: Draft) -> None:
        offsets = _array(d.tensors["d2t"], "<i8")
        d.tensors["d2t"] = from_numpy(transform(offsets.copy()))
    return edit


def target_ids(transform: Callable[[np.ndarray], None]) -> Edit:
    """Edit the target ids d2t maps the draft ids to (``transform`` changes them in place); d2t keeps offsets."""
    def ids(offsets: np.ndarray) -> np.ndarray:
        absolute = offsets + np.arange(len(offsets))
        transform(absolute)
        return absolute - np.arange(len(offsets))
    return d2t_values(ids)


@dataclass(frozen=True)
class Defect:
    """One defect: its name, the finding code it must raise, a line describing it, and the edit that makes it."""

    name: str  # kebab-case
    code: str  # the finding code it must raise: CHECK_ID/SLUG
    # the defect, as it completes "the flat example ...": "without intermediate_size" (explain shows it so)
    description: str
    edit: Edit | None = None
    also: tuple[str, ...] = ()  # other codes it must raise (other checks it fails for the same reason)
    after: Callable[[Path], None] | None = None  # an edit of the written files
    shards: int = 1  # the safetensors files the drafter is written in
    layouts: tuple[str, ...] = LAYOUTS  # the layouts it applies to
    # parse_options arguments the gate needs to see it; target_config True: the example's target config
    options: dict[str, Any] = field(default_factory=dict)
    clean: str = ""  # what the drafter has instead, when worth saying ('it states "head_dim": 24')
    # gated with recorded states (the acceptance level): the clean example drafter's own, from example_data()
    data: bool = False
    # the defect is in how the gate is run (its options), not in the files: the example without it is gated without
    # them
    in_options: bool = False
    # judged live (engine.live) by a stand-in interpreter that replays vLLM 0.33.0's own recording of the flat example
    # (live/example-flat.vllm-0.33.0.json, the conformance recording), the recording edited by this when the defect
    # is made; the example without the defect replays it as recorded
    replay: Callable[[dict], None] | None = None

    @property
    def codes(self) -> tuple[str, ...]:
        return (self.code, *self.also)

    def apply(self, draft: Draft) -> Draft:
        """Make the defect in ``draft`` (its ``after`` edit, if any, is :meth:`write`'s)."""
        if draft.layout not in self.layouts:
            raise ValueError(f"defect {self.name} applies to {', '.join(self.layouts)} drafters, not {draft.layout}")
        if self.edit:
            self.edit(draft)
        return draft

    def write(self, draft: Draft, path: Path) -> Path:
        """``draft`` with the defect, written into ``path``."""
        self.apply(draft).save(path, self.shards)
        if self.after:
            self.after(path)
        return path

    def gate_options(self, target: str | Path | None = None, data: str | Path | None = None,
                     made: bool = True) -> dict[str, Any]:
        """The parse_options arguments (``target``: the target config file, for a defect that needs one; ``data``:
        the recorded states, for one gated on them: :func:`example_data`; ``made`` False: for the example without
        the defect)."""
        options = dict(self.options)
        if self.replay is not None:
            options.update(engine="vllm@installed", engine_python=str(replaying(self.replay if made else None)))
        if self.data:
            if data is None:
                raise ValueError(f"defect {self.name} is gated on recorded states: pass example_data()'s folder")
            options["data"] = str(data)
        if options.pop("target_config", False):
            if target is None:
                raise ValueError(f"defect {self.name} needs a target config")
            options["target_config"] = str(target)
        return options


REPLAYED = Path(__file__).parents[1] / "live" / "example-flat.vllm-0.33.0.json"
_STAND_INS: dict[Any, Path] = {}


def replaying(edit: Callable[[dict], None] | None) -> Path:
    """A stand-in for an interpreter with vLLM 0.33.0 installed, for the examples of engine.live: it answers the
    version query and, run as the recorder, writes vLLM 0.33.0's own recording of the flat example (edited by
    ``edit``) as each candidate's. Written once per process, into a temporary folder removed at exit."""
    if edit not in _STAND_INS:
        import atexit
        import shutil
        import sys

        record = json.loads(REPLAYED.read_text())
        if edit is not None:
            edit(record)
        folder = Path(tempfile.mkdtemp(prefix="eagle3-stand-in-"))
        atexit.register(shutil.rmtree, folder, True)
        script = folder / "python"
        script.write_text(f"""#!{sys.executable}
import json, sys
from pathlib import Path
RECORD = json.loads({json.dumps(json.dumps(record))})
if sys.argv[1:2] == ["-c"]:
    print(RECORD["version"])
    sys.exit(0)
out = Path(sys.argv[3])
out.mkdir(parents=True)
for entry in json.loads(Path(sys.argv[2]).read_text()):
    (out / f"{{entry['name']}}.json").write_text(json.dumps({{**RECORD, "checkpoint": entry["name"]}}))
(out / "index.json").write_text(json.dumps({{"run_seconds": 0.0}}))
""")
        script.chmod(0o755)
        _STAND_INS[edit] = script
    return _STAND_INS[edit]
