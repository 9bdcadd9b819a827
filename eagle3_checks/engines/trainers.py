"""Who trained a drafter, from evidence only: what each modelled trainer release writes, and how the gate weighs
what a checkpoint shows.

A checkpoint rarely says who trained it. speculators writes ``speculators_version`` into every config it saves;
SpecForge writes no release number; a third party that flattens a speculators drafter for vLLM keeps whatever
fields it likes. The gate names a trainer only on evidence, weighed in this order (the first that decides wins):

1. ``--trainer NAME[@VERSION]`` (the user states it) and ``--source`` (the original the checkpoint was converted
   from: its own evidence);
2. what eagle3-checks ``convert`` records (``eagle3_checks_provenance``), and the trainer's own config saved
   beside config.json (``config_speculators.json``);
3. the layout: a speculators config is one speculators saved (its ``speculators_version``, when stated);
4. ``speculators_version`` in a flat config;
5. fields, files and tensor names only one modelled trainer writes (:data:`WRITES`; a field more than one trainer
   writes, as ``use_sliding_window``, is no evidence for either): an inference, which the report says;
6. ``transformers_version`` read against the transformers versions each trainer release pins (:data:`PINS`,
   :data:`speculators_pins`): SpecForge pins one exactly, which dates its checkpoints to the commits of its main
   branch that pinned it.

Where nothing decides, the trainer is unknown, and every candidate's reading is kept: the checks state what each
would mean where they differ (:func:`readings`). Each :class:`Identity` carries its basis (``read``: stated by the
checkpoint, its files, the user or the source; ``inferred``: from fields or versions that do not state it;
``assumed``: nothing decided) and what would settle it.
"""

from __future__ import annotations

from dataclasses import field, fields, replace
from typing import Any

from ..basis import ASSUMED, INFERRED, READ
from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import PROVENANCE, TLC
from ..drafter.layout import FLAT, MLA, SPECULATORS
from ..fast_dataclass import dataclass
from . import specforge, speculators
from .profile import version_key
from .reading import Reading, differences, shown

OUTSIDE = "(outside its dating)"  # a release the checkpoint's fields and transformers_version date it away from
BESIDE = "config_speculators.json"  # storage.folder.BESIDE_CONFIGS: the speculators config saved beside a flat one
SETTLE = "--trainer NAME@VERSION (who trained it), or --source (the checkpoint it was converted from)"

# What a trainer writes, by kind: a config field of its own; a field the serving engines read (any converter to their
# layout writes it, whoever trained the weights); a field of the decoder layer's config (transformers' classes write
# them for any trainer); a file beside the weights; a tensor name (the layout's: any converter writes it). Only the
# first and files can be evidence of a trainer: the others are the formats' own.
FIELD, SERVED_FIELD, LAYER_FIELD, FILE, TENSOR = "field", "served field", "layer field", "file", "tensor"
EVIDENCE_KINDS = (FIELD, FILE)


@dataclass(frozen=True)
class Writes:
    """One thing a trainer's releases write into what they save: a config field (top level), a field of the decoder
    layer's config (speculators' ``transformer_layer_config``, a flat config's top level), a file beside the weights,
    or a tensor name; read from the releases' packages (file and line of the first release that writes it)."""

    trainer: str
    kind: str
    name: str
    since: str  # the first release that writes it ("" for SpecForge's main branch before 0.1.0)
    cite: str
    until: str = ""  # the last release that writes it ("": the newest)

    def written_by(self, version: str | None) -> bool:
        if version is None or not version_key(version):
            return True
        key = version_key(version)
        return (not self.since or version_key(self.since) <= key) and (not self.until or key <= version_key(self.until))


_S, _F = speculators.NAME, specforge.NAME
_SC = "speculators 0.9.0 models/eagle3/config.py"
_SF = "SpecForge 0.2.0 modeling/draft/llama3_eagle.py"
WRITES: tuple[Writes, ...] = (
    # speculators: Eagle3SpeculatorConfig's own fields and SpeculatorModelConfig's (config.py), written whole by
    # save_pretrained (the default tests hold 0.9.0's list to what it writes)
    Writes(_S, FIELD, "speculators_model_type", "0.2.0", f"{_SC}:27"),
    Writes(_S, FIELD, "speculators_version", "0.2.0", "speculators 0.9.0 config.py:277-280"),
    Writes(_S, FIELD, "speculators_config", "0.2.0", "speculators 0.9.0 config.py:281"),
    Writes(_S, FIELD, TLC, "0.2.0", f"{_SC}:33"),
    Writes(_S, SERVED_FIELD, "draft_vocab_size", "0.2.0", f"{_SC}:38"),
    Writes(_S, SERVED_FIELD, "norm_before_residual", "0.2.0", f"{_SC}:43"),
    Writes(_S, SERVED_FIELD, "target_hidden_size", "0.2.0", f"{_SC}:48"),
    Writes(_S, SERVED_FIELD, "eagle_aux_hidden_state_layer_ids", "0.2.0", f"{_SC}:53"),
    Writes(_S, FIELD, "embed_requires_grad", "0.4.0", f"{_SC}:84 (0.4.0 models/eagle3/config.py:58)"),
    Writes(_S, SERVED_FIELD, "norm_before_fc", "0.5.0", f"{_SC}:58 (0.5.0 models/eagle3/config.py:58)"),
    Writes(_S, SERVED_FIELD, "fc_norm", "0.7.0", f"{_SC}:66 (0.7.0 models/eagle3/config.py:66)"),
    Writes(_S, SERVED_FIELD, "norm_output", "0.7.0", f"{_SC}:76 (0.7.0 models/eagle3/config.py:76)"),
    # SpeculatorModelConfig._auto_class is "" (config.py:270; 0.2.0 :263): transformers' save_pretrained then copies
    # the config class's source beside config.json and names it in auto_map (never executed here)
    Writes(_S, FIELD, "auto_map", "0.2.0", "speculators 0.9.0 config.py:270 (_auto_class)"),
    Writes(_S, FILE, "config.py", "0.2.0", "speculators 0.9.0 config.py:270 (_auto_class: save_pretrained copies it)"),
    # the train CLI's layer config (create_transformer_layer_config): every draft layer a sliding one by default
    Writes(_S, LAYER_FIELD, "sliding_window", "0.9.0", "speculators 0.9.0 train/cli.py:227-231"),
    Writes(_S, LAYER_FIELD, "use_sliding_window", "0.9.0", "speculators 0.9.0 train/cli.py:230"),
    Writes(_S, LAYER_FIELD, "layer_types", "0.9.0", "speculators 0.9.0 train/cli.py:211-214, 231"),
    # a Qwen3 draft layer's config (transformers' Qwen3Config) carries the Qwen2-style window fields too
    Writes(_S, LAYER_FIELD, "max_window_layers", "0.4.0", "transformers Qwen3Config, the qwen3 draft layer's class "
           "(speculators 0.9.0 models/eagle3/model_definitions.py)"),
    Writes(_S, FILE, "optimizer_state_dict.pt", "0.3.0", "speculators 0.9.0 train/checkpointer.py:55-67 (the "
           "checkpoint folder of each epoch)"),
    Writes(_S, FILE, "scheduler_state_dict.pt", "0.3.0", "speculators 0.9.0 train/checkpointer.py:55-67"),
    Writes(_S, FILE, "training_state.json", "0.7.0", "speculators 0.9.0 train/trainer.py:240-241"),
    Writes(_S, TENSOR, "layers.0.*", "0.2.0", "speculators 0.9.0 models/eagle3/core.py (self.layers)"),
    # SpecForge: its draft config (a template or generated from the target) saved by save_pretrained, and its
    # exporters' files; held to SpecForge 0.2.0's model class and SGLang exporter in the default tests
    Writes(_F, SERVED_FIELD, "draft_vocab_size", "", f"{_SF} (config.draft_vocab_size)"),
    Writes(_F, SERVED_FIELD, "target_hidden_size", "", f"{_SF} (its templates)"),
    Writes(_F, SERVED_FIELD, "eagle_config", "", "SpecForge 0.2.0 algorithms/model_providers.py:195-200 (templates)"),
    Writes(_F, SERVED_FIELD, "fc_norm", "0.2.0", f"{_SF} (b7ce50cd, 2026-07-19)"),
    Writes(_F, SERVED_FIELD, "norm_output", "0.2.0", f"{_SF} (b7ce50cd)"),
    Writes(_F, SERVED_FIELD, "rope_theta", "0.2.0", "SpecForge 0.2.0 export/checkpoint_io.py:56-60 "
           "(apply_legacy_rope_scaling)"),
    Writes(_F, LAYER_FIELD, "sliding_window", "", "SpecForge 0.2.0 training/model_loading.py:47-68 (copied from "
           "the target)"),
    Writes(_F, LAYER_FIELD, "use_sliding_window", "", "SpecForge 0.2.0 training/model_loading.py:47-68; its "
           "configs/kimi-k2-eagle3.json template"),
    Writes(_F, LAYER_FIELD, "max_window_layers", "", "SpecForge 0.2.0 training/model_loading.py:47-68; its "
           "configs/kimi-k2-eagle3.json template"),
    Writes(_F, FILE, "training_state.pt", "", "SpecForge 0.2.0 training/checkpoint.py:32 (the v0.1.0 tag's "
           "scripts/train_eagle3_*.py save it too)"),
    Writes(_F, TENSOR, "midlayer.*", "", "SpecForge 0.2.0 export/to_sglang.py:14-18"),
)


def written(trainer: str, kind: str | None = None, version: str | None = None) -> set[str]:
    """The names ``trainer`` writes (of ``kind``; by ``version``, when given)."""
    return {w.name for w in WRITES if w.trainer == trainer and (kind is None or w.kind == kind)
            and w.written_by(version)}


def only_by(trainer: str) -> dict[str, Writes]:
    """What only ``trainer`` writes among the kinds that can be evidence (its own config fields, files): one no other
    modelled trainer writes, for any release, is evidence for it; the served fields and tensor names any converter
    writes are not."""
    others = {w.name for w in WRITES if w.trainer != trainer}
    mine = [w for w in WRITES if w.trainer == trainer and w.kind in EVIDENCE_KINDS and w.name not in others]
    return {w.name: w for w in mine}


# ----- transformers pins ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pin:
    """The transformers version SpecForge's main branch pinned over a span of its history (requirements.txt, then
    pyproject.toml, at the commit that set it; read from the repository's history)."""

    transformers: str
    start: str  # the date the pin was set ("": from the first commit)
    end: str  # the date the next pin replaced it ("": still pinned)
    commit: str


PINS: tuple[Pin, ...] = (
    Pin("4.53.2", "", "2025-07-31", "3234e24a (tag v0.1.0, 2025-07-22) requirements.txt"),
    Pin("4.54.0", "2025-07-31", "2025-08-01", "23f37a9f requirements.txt; the 0.1.0 sdist on PyPI pins it"),
    Pin("4.54.1", "2025-08-01", "2025-08-24", "5c1eeb39 requirements.txt"),
    Pin("4.55.2", "2025-08-24", "2025-11-04", "bf757f51 requirements.txt"),
    Pin("4.57.1", "2025-11-04", "2026-06-26", "8731d2c0 requirements.txt"),
    Pin("5.8.1", "2026-06-26", "2026-07-05", "9a1c9803 pyproject.toml"),
    Pin("4.57.1", "2026-07-05", "2026-07-13", "fd2fffa5 pyproject.toml"),
    Pin("5.8.1", "2026-07-13", "", "bbe39565 pyproject.toml; the 0.2.0 wheel (METADATA: transformers==5.8.1)"),
)


@dataclass(frozen=True)
class Change:
    """A change on SpecForge's main branch that changed what a saved checkpoint means, and the date it landed."""

    commit: str
    date: str
    what: str
    keyword: str  # the specforge switch (specforge.SWITCHES) that states the computation before it
    rope: tuple[str, ...] = ()  # the rope kinds it fixed ("none": no rope_scaling), for transformers-4 configs
    v5: bool = False  # it also fixed configs saved by transformers 5 (rope_theta only in rope_parameters)


ROPE_ALL = ("none", "default", "linear", "dynamic", "llama3", "yarn", "mrope")
CHANGES: tuple[Change, ...] = (
    Change("d3472dde", "2025-10-30", "PR #270: the rotary embedding built with rope_theta when rope_scaling is null "
           "(before: base 10000)", "rope_base_10000", ("none",)),
    Change("41bdd2a2", "2025-11-12", "PR #287: the llama3 rope built with rope_theta and its scaling (before: plain "
           "RoPE, base 10000)", "rope_base_10000", ("llama3",)),
    Change("1712b656", "2026-07-17", "PR #702: every rope kind built with rope_theta, read from transformers 5's "
           "rope_parameters too (before: linear, dynamic, yarn and mrope without a base; and under transformers 5, "
           "whose configs keep rope_theta only in rope_parameters, getattr(config, \"rope_theta\", 10000) gave 10000 "
           "in every branch: llama3_eagle.py:552-575 at 1712b656^)", "rope_base_10000", ROPE_ALL, v5=True),
    Change("b7ce50cd", "2026-07-19", "fc_norm and norm_output (EAGLE-3.1) added; before, no fc_norm and the final norm "
           "always applies", "no_eagle31", v5=True),
)


def _rope_kind(raw: dict) -> str:
    scaling = raw.get("rope_scaling")
    if not isinstance(scaling, dict):
        params = raw.get("rope_parameters")
        scaling = params if isinstance(params, dict) else None
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type")) if scaling else None
    return kind if isinstance(kind, str) else "none"


def dated(transformers_version: str | None, raw: dict) -> list[tuple[str, dict[str, bool]]] | None:
    """The SpecForge computations a checkpoint saved with ``transformers_version`` can have been trained with: for
    each span of SpecForge's history whose pin admits it, the state of each :data:`CHANGES` keyword over that span (a
    change landing inside a span gives both, each named "before" or "after" its commit). None when no pin admits it
    (not SpecForge's, or a hand-written version)."""
    if not isinstance(transformers_version, str):
        return None
    spans = [p for p in PINS if p.transformers == transformers_version]
    if not spans:
        return None
    kind = _rope_kind(raw)
    v5 = version_key(transformers_version)[:1] >= (5,)
    first: dict[str, Change] = {}  # per keyword, the change that fixed it for this checkpoint's rope kind
    for change in CHANGES:
        if (v5 and change.v5) or (not v5 and (not change.rope or kind in change.rope)):
            first.setdefault(change.keyword, change)
    out: dict[tuple, tuple[list[str], dict[str, bool]]] = {}
    for pin in spans:
        # the changes that landed inside the span cut it into stretches, each with one computation
        cuts = sorted({c.date for c in first.values() if pin.start < c.date and (not pin.end or c.date < pin.end)})
        edges = [pin.start, *cuts, pin.end]
        for begin, end in zip(edges, edges[1:], strict=False):
            state = {kw: bool(end) and end <= c.date for kw, c in first.items()}
            span = f"from {begin} to {end}" if begin and end else f"until {end}" if end else f"from {begin}"
            out.setdefault(tuple(sorted(state.items())), ([], state))[0].append(span)
    return [(f"main {' and '.join(stretches)} (transformers {transformers_version})", state)
            for stretches, state in out.values()]


def speculators_pins() -> dict[str, tuple[str, str]]:
    """Each speculators release's transformers requirement (METADATA Requires-Dist, read from its wheel): release ->
    (lowest admitted, highest admitted; "" where open)."""
    return dict(_SPECULATORS_PINS)


_SPECULATORS_PINS: tuple[tuple[str, tuple[str, str]], ...] = (
    ("0.2.0", ("", "")), ("0.3.0", ("", "")),  # transformers unpinned
    ("0.4.0", ("4.56.1", "4.57.6")), ("0.4.0.1", ("4.56.1", "4.57.6")),
    ("0.5.0", ("4.56.1", "<5.7.0")), ("0.6.0", ("4.56.1", "<5.11.0")), ("0.6.0.1", ("4.56.1", "<5.11.0")),
    ("0.6.0.2", ("4.56.1", "<5.11.0")), ("0.7.0", ("4.56.1", "<5.15.0")), ("0.7.0.1", ("4.56.1", "<5.15.0")),
    ("0.7.0.2", ("4.56.1", "<5.15.0")), ("0.8.0", ("5.0.0", "<5.17.0")), ("0.8.1", ("5.0.0", "<5.17.0")),
    ("0.9.0", ("5.0.0", "5.19.0")),
)


def admits(release: str, transformers_version: str) -> bool:
    """Whether speculators ``release``'s transformers requirement admits ``transformers_version``."""
    low, high = dict(_SPECULATORS_PINS).get(release, ("", ""))
    key = version_key(transformers_version)
    if not key:
        return True
    if low and key < version_key(low):
        return False
    if high.startswith("<"):
        return key < version_key(high[1:])
    return not high or key <= version_key(high)


# ----- identity ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Identity:
    """Who trained the drafter, as far as the evidence goes."""

    name: str | None  # "speculators", "specforge", or None: unknown
    version: str | None  # the release, when the evidence names one
    basis: str  # READ, INFERRED or ASSUMED (nothing decided)
    how: str  # the evidence, in words
    config: dict | None = None  # the config the trainer saved, when it is not config.json (beside it, or --source)
    config_from: str = ""  # where ``config`` was read
    versions: tuple[str, ...] = ()  # the releases it can be, when ``version`` is None and they were narrowed
    candidates: tuple[str, ...] = ()  # the trainers it can be, when ``name`` is None
    dates: tuple[tuple[str, tuple[tuple[str, bool], ...]], ...] = ()  # SpecForge: the dated computations
    settle: str = SETTLE

    @property
    def known(self) -> bool:
        return self.basis == READ

    def said(self) -> str:
        """'speculators 0.9.0 (config_speculators.json beside config.json)'."""
        if self.name is None:
            return f"unknown ({self.how})"
        release = f" {self.version}" if self.version else ", release not stated"
        return f"{self.name}{release} ({self.how})"


def _stated(option: str) -> Identity:
    name, _, version = option.partition("@")
    return Identity(name, version or None, READ, f"--trainer {option}")


def _provenance(raw: dict) -> dict:
    p = raw.get(PROVENANCE)
    return p if isinstance(p, dict) else {}


def identify(ckpt: Checkpoint, source: Checkpoint | None = None, stated: str | None = None) -> Identity:
    """Who trained ``ckpt``, from the evidence in the order of the module's docstring; a trainer named without its
    release, with the releases (speculators) or the spans of its history (SpecForge) the checkpoint's fields and
    transformers_version admit."""
    found = _identify(ckpt, source, stated)
    if found.name is None or found.version is not None or found.versions or found.dates:
        return found
    raw = found.config if found.config is not None else (ckpt.config_raw or {})
    if found.name == _S:
        return replace(found, versions=_speculators_dated(raw, "").versions)
    dates = dated(raw.get("transformers_version"), raw) if ckpt.family != MLA else None
    return replace(found, dates=tuple((label, tuple(sorted(s.items()))) for label, s in dates or ()))


def _identify(ckpt: Checkpoint, source: Checkpoint | None, stated: str | None) -> Identity:
    if stated:
        found = _stated(stated)
        if source is not None and source.config_raw is not None:
            return Identity(found.name, found.version, READ, found.how, dict(source.config_raw), "--source")
        return _with_beside(ckpt, found)
    of_source = _identify(source, None, None) if source is not None else None
    if source is not None and of_source is not None:
        # the checkpoint it was converted from is the evidence: what the conversion wrote (a speculators layout and
        # its speculators_version, from `speculators convert` too) is the converter's, not the trainer's
        config = dict(source.config_raw) if source.config_raw is not None else None
        return Identity(of_source.name, of_source.version, of_source.basis,
                        f"--source {source.display}: {of_source.how}", config if config is not None else None,
                        "--source", of_source.versions, of_source.candidates, of_source.dates)
    raw = ckpt.config_raw or {}
    provenance = _provenance(raw)
    trained_by = provenance.get("trainer")
    if trained_by in (_S, _F):
        version = provenance.get("trainer_version") or (raw.get("speculators_version") if trained_by == _S else None)
        version = version if isinstance(version, str) and version else None
        stated = provenance.get("trainer_from")
        how = f"{PROVENANCE}.trainer (" + (stated if isinstance(stated, str) and stated else
                                          "written by eagle3-checks convert") + ")"
        return _with_beside(ckpt, Identity(trained_by, version, READ, how))
    if isinstance(provenance.get("converted_from"), str) and ckpt.beside.get(BESIDE) is None:
        # converted by eagle3-checks from a checkpoint that did not name its trainer: the layout and the
        # speculators_version are the converter's, not evidence of who trained the weights
        return Identity(None, None, ASSUMED, f"converted by eagle3-checks from a {provenance['converted_from']} "
                        "checkpoint that did not name its trainer", candidates=(_S, _F))
    beside = ckpt.beside.get(BESIDE)
    if isinstance(beside, dict) and isinstance(beside.get("speculators_model_type"), str):
        version = beside.get("speculators_version")
        version = version if isinstance(version, str) and version else None
        return Identity(_S, version, READ, f"{BESIDE} beside config.json: a speculators config"
                        + ("" if version else ", without speculators_version"), dict(beside), BESIDE)
    if ckpt.layout == SPECULATORS:
        version = raw.get("speculators_version")
        if isinstance(version, str) and version:
            return Identity(_S, version, READ, "speculators_version in config.json")
        return _speculators_dated(raw, "a speculators config without speculators_version")
    version = raw.get("speculators_version")
    if isinstance(version, str) and version:
        return Identity(_S, version, READ, "speculators_version in config.json")
    return _by_fields(ckpt, raw)


def _with_beside(ckpt: Checkpoint, found: Identity) -> Identity:
    """A trainer named by provenance or the user, with the speculators config beside the checkpoint, when there is
    one: the config the trainer saved."""
    beside = ckpt.beside.get(BESIDE)
    if found.name == _S and isinstance(beside, dict) and isinstance(beside.get("speculators_model_type"), str):
        version = found.version or (beside.get("speculators_version") if isinstance(
            beside.get("speculators_version"), str) else None)
        return Identity(found.name, version, found.basis, f"{found.how}; its config {BESIDE}", dict(beside), BESIDE)
    return found


def _speculators_dated(raw: dict, how: str) -> Identity:
    """speculators without a stated release: the releases the fields it wrote and its transformers_version admit."""
    present = set(raw)
    fields_of = [w for w in WRITES if w.trainer == _S and w.kind in (FIELD, SERVED_FIELD) and w.name in present]
    versions = [rel.version for rel in speculators.RELEASES
                if all(w.written_by(rel.version) for w in fields_of)]
    tv = raw.get("transformers_version")
    if isinstance(tv, str):
        versions = [v for v in versions if admits(v, tv)] or versions
    return Identity(_S, None, READ, how, versions=tuple(versions))


def _by_fields(ckpt: Checkpoint, raw: dict) -> Identity:
    """A flat config with no statement of its trainer: fields, files and tensor names only one trainer writes, then
    the transformers version, else unknown."""
    evidence: dict[str, list[str]] = {}
    names = set(raw) | set((raw.get(TLC) or {}) if isinstance(raw.get(TLC), dict) else ())
    for trainer in (_S, _F):
        own = only_by(trainer)
        found = [f"{w.kind} {name} ({w.cite})" for name, w in own.items() if
                 (w.kind == FIELD and name in names) or (w.kind == FILE and name in ckpt.folder_names)]
        if found:
            evidence[trainer] = found
    tv = raw.get("transformers_version")
    dates = dated(tv, raw) if ckpt.family != MLA else None
    dated_specforge = tuple((label, tuple(sorted(s.items()))) for label, s in dates or ())
    spec_releases = _speculators_dated(raw, "").versions
    if len(evidence) == 1:
        trainer, found = next(iter(evidence.items()))
        how = (f"inferred from what only {trainer} writes: {'; '.join(found[:3])}"
               + (f" (+{len(found) - 3} more)" if len(found) > 3 else ""))
        if trainer == _S:
            narrowed = _speculators_dated(raw, how)
            return Identity(_S, None, INFERRED, how, versions=narrowed.versions or spec_releases)
        return Identity(_F, None, INFERRED, how, dates=dated_specforge)
    if len(evidence) > 1:
        how = "; ".join(f"{t}: {', '.join(f.split(' (')[0] for f in found)}" for t, found in evidence.items())
        return Identity(None, None, ASSUMED, f"the evidence disagrees ({how})", candidates=(_S, _F),
                        versions=spec_releases, dates=dated_specforge)
    # a transformers_version dates each candidate's releases (the pins of what could have saved it), but names no
    # trainer: a package installed beside another transformers than it pins (--no-deps) saves that one
    how = "nothing in the checkpoint names its trainer"
    if isinstance(tv, str):
        how += (f"; transformers_version {tv} dates it to speculators {_span(spec_releases)}" if spec_releases else
                f"; transformers_version {tv} is outside every speculators release's requirement")
        how += (" and to SpecForge " + ", ".join(label for label, _ in dates) if dates else
                ", and to no SpecForge pin (any SpecForge computation)")
    return Identity(None, None, ASSUMED, how, candidates=(_S, _F), versions=spec_releases, dates=dated_specforge)


def _span(versions: tuple[str, ...]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]} to {versions[-1]}"


# ----- the readings of what was trained ------------------------------------------------------------------------

@dataclass
class Trained:
    """What the drafter was trained to compute, as far as the evidence goes: the reading the gate judges against
    (``reading``), and every other reading the evidence leaves possible (``others``: (label, reading)), with the
    identity they follow from."""

    identity: Identity
    reading: Reading
    label: str
    others: list[tuple[str, Reading]] = field(default_factory=list)

    def depends(self, name: str) -> dict[str, Any]:
        """The trained value of field ``name`` under each possible reading, when they differ (else empty)."""
        values = {self.label: shown(name, self.reading, self.reading)}
        for label, r in self.others:
            values[label] = shown(name, r, self.reading)
        return values if len({repr(v) for v in values.values()}) > 1 else {}

    def basis_of(self, name: str) -> str:
        """READ when every possible reading trains ``name`` alike; else the identity's basis when it is not read,
        and for a trainer read without its release, INFERRED where its releases were narrowed (by the fields it
        wrote, or by dating its transformers_version) and ASSUMED where nothing narrowed them."""
        if not self.depends(name):
            return READ
        if self.identity.basis != READ:
            return self.identity.basis
        return INFERRED if self.identity.versions or self.identity.dates else ASSUMED


def _speculators_release(version: str | None):
    """speculators' release record that reads ``version``: that number's (a build of it, 0.9.0.dev1, reads as it),
    else the nearest modelled release below it (above it, for one older than all), as engines.judge does."""
    known = sorted(speculators.RELEASES, key=lambda r: r.key)
    key = version_key(version) if version else ()
    if not key:
        return known[-1]
    return next((r for r in known if r.key == key), None) or ([r for r in known if r.key < key] or known[:1])[-1]


def _speculators_profile(version: str | None):
    """speculators' profile at ``version`` (:func:`_speculators_release`'s reading)."""
    if not version or not version_key(version):
        return speculators.PROFILE
    return speculators.PROFILE.at(version, _speculators_release(version).differs)


def _speculators_reading(ckpt: Checkpoint, version: str | None, config: dict | None,
                         flat: dict[str, Reading] | None = None) -> Reading:
    """speculators' reading (of the release, when known) of ``ckpt``, under ``config`` when the trainer's own config
    is not config.json. ``flat``: a flat config's reading, kept across the releases asked for in one call (it is the
    same for every release: only its label names the release)."""
    target = ckpt.with_config(config) if config is not None else ckpt
    if target.layout == SPECULATORS:
        r = _speculators_profile(version).read(target, lenient=True)
    else:  # a flat config whose trainer is speculators: its norm_output means what speculators means by it
        flat = {} if flat is None else flat
        if "read" not in flat:
            flat["read"] = specforge.read(target, speculators_meaning=True)
        r = _copied(flat["read"])
        r.engine, r.version = _S, version if version and version_key(version) else speculators.VERSION
    if config is not None:  # where each value was read: the trainer's own config, not config.json
        where = BESIDE if config is ckpt.beside.get(BESIDE) or config == ckpt.beside.get(BESIDE) else "the source"
        r.sources = {k: v.replace("config.json", where) for k, v in r.sources.items()}
    return r


def _copied(r: Reading) -> Reading:
    """A reading of its own: its lists and dicts copied (their items are plain values)."""
    copies: dict[str, Any] = {f.name: type(v)(v) for f in fields(r)
                              if isinstance(v := getattr(r, f.name), (dict, list))}
    return replace(r, **copies)


def _specforge_reading(ckpt: Checkpoint, state: dict[str, bool] | None = None, version: str | None = None) -> Reading:
    if version is not None:
        rel = next((x for x in (*specforge.RELEASES, *specforge.UNRELEASED) if x.version == version), None)
        return specforge.read(ckpt, **dict(rel.differs)) if rel is not None else specforge.read(ckpt)
    return specforge.read(ckpt, **(state or {}))


def readings(ckpt: Checkpoint, identity: Identity) -> Trained:
    """Every reading the identity leaves possible, the one the gate judges against first: the named trainer's (each
    release it can be, the newest first), or for an unknown trainer every candidate's, the layout's own trainer
    first (SpecForge for a flat config, speculators for a speculators one)."""
    # a trainer the evidence states: its readings alone; one inferred: its own first, the others' kept (the
    # inference may be wrong: a field they read otherwise is not known); an unknown one: every candidate's
    names: tuple[str, ...] = (identity.name,) if identity.name and identity.basis == READ else \
        (identity.name, *(n for n in (_S, _F) if n != identity.name)) if identity.name else \
        identity.candidates or (_S, _F)
    layout = SPECULATORS if identity.config is not None and isinstance(identity.config.get(TLC), dict) \
        else ckpt.layout
    order: tuple[str, ...] = (_S, _F) if layout == SPECULATORS else (_F, _S)
    if identity.name:
        order = names
    found: list[tuple[str, Reading]] = []
    for name in order:
        if name not in names:
            continue
        if name == _S or layout == SPECULATORS:  # a speculators config means what speculators reads in it (a
            # converter writes the trained computation into its fields, whoever trained the weights)
            found += [x for x in _speculators_releases(ckpt, identity) if x[0] not in dict(found)]
        elif layout == FLAT:
            found += _specforge_readings(ckpt, identity)
    if not found:  # a layout no candidate trains: the flat layout's own meaning
        found.append((f"specforge {specforge.VERSION}", specforge.read(ckpt)))
    found = _distinct(found)
    for _, r in found:
        r.engine = f"{r.engine.removesuffix(' (trainer)')} (trainer)"
    label, first = found[0]
    return Trained(identity, first, label, found[1:])


def _speculators_releases(ckpt: Checkpoint, identity: Identity) -> list[tuple[str, Reading]]:
    """speculators' reading under the release named, else each release the identity leaves possible, the newest
    first."""
    every = tuple(rel.version for rel in speculators.RELEASES)
    if identity.version:  # a release the gate does not model reads as the one that judges it (its label says which)
        judged = _speculators_release(identity.version).version if version_key(identity.version) else \
            speculators.VERSION
        return [(f"speculators {judged}", _speculators_reading(ckpt, identity.version, identity.config))]
    versions = identity.versions or every
    flat: dict[str, Reading] = {}  # a flat config reads alike under every release: read once
    out = [(f"speculators {v}", _speculators_reading(ckpt, v, identity.config, flat)) for v in reversed(versions)]
    # the releases the fields it wrote and its transformers_version leave out (an inference): kept, after
    return out + [(f"speculators {v} {OUTSIDE}", _speculators_reading(ckpt, v, identity.config, flat))
                  for v in reversed(every) if v not in versions]


def _specforge_readings(ckpt: Checkpoint, identity: Identity) -> list[tuple[str, Reading]]:
    """SpecForge's reading under each dated computation (newest first), else under each release (0.2.0 first, then
    0.1.0 and the main branch after PR #879)."""
    if identity.version:
        return [(f"specforge {identity.version}", _specforge_reading(ckpt, version=identity.version))]
    if identity.dates:  # the spans transformers_version dates it to, then (an inference) every release's
        out = []
        for label, state in reversed(identity.dates):
            r = _specforge_reading(ckpt, dict(state))
            r.version = label
            out.append((f"specforge {label}", r))
        return out + [(f"specforge {rel.version} {OUTSIDE}", _specforge_reading(
            ckpt, version=rel.version)) for rel in (specforge.RELEASES[-1], *specforge.RELEASES[:-1])]
    return [(f"specforge {rel.version}", _specforge_reading(ckpt, version=rel.version))
            for rel in (specforge.RELEASES[-1], *specforge.RELEASES[:-1], *specforge.UNRELEASED)]


def _distinct(found: list[tuple[str, Reading]]) -> list[tuple[str, Reading]]:
    """One reading per distinct computation, labelled with every release that computes it ("speculators 0.7.0 to
    0.9.0 or specforge main after PR #879")."""
    groups: list[tuple[list[str], Reading]] = []
    for label, r in found:
        same = next((g for g in groups if not differences(r, g[1]) and r.layout_ok == g[1].layout_ok), None)
        if same is None:
            groups.append(([label], r))
        else:
            same[0].append(label)
    return [(_joined(labels), r) for labels, r in groups]


def _joined(labels: list[str]) -> str:
    """'speculators 0.7.0 to 0.9.0 or specforge 0.2.0': the releases of one reading, by trainer, ranges kept short."""
    by_trainer: dict[tuple[str, str], list[str]] = {}
    for label in labels:
        name, _, version = label.partition(" ")
        marker = OUTSIDE if version.endswith(OUTSIDE) else ""
        by_trainer.setdefault((name, marker), []).append(version.removesuffix(OUTSIDE).strip())
    if any(not marker for _, marker in by_trainer) and any(marker for _, marker in by_trainer):
        by_trainer = {k: v for k, v in by_trainer.items() if not k[1]}  # the releases it is dated to name it
    parts = []
    for (name, marker), versions in by_trainer.items():
        numbered = sorted((v for v in versions if version_key(v)), key=version_key)
        others = [v for v in versions if not version_key(v)]
        shown = [f"{numbered[0]} to {numbered[-1]}"] if len(numbered) > 2 else numbered
        parts.append(" ".join(filter(None, (name, " / ".join(shown + others), marker))))
    return " or ".join(parts)
