"""An engine release's reading of a drafter, as data: the steps its loader takes.

A release's reading is a tuple of steps in the order its own loader reads the config and then the tensors, each citing
the release's file and line. The one reader, :func:`eagle3_checks.engines.reader.read`, walks the steps of a release
for a checkpoint and fills a :class:`~eagle3_checks.engines.reading.Reading`. A step says one of:

- :class:`Stop`: the walk ends here when a condition holds (a layout the release does not read, a class it does not
  model), with the refusal or the reason;
- :class:`Branch`: the release builds another class here (its MLA drafter): the walk goes on with that class's steps;
- :class:`Layer`: the decoder layer's sizes, context and rope, as the config class the release parses them with;
- :class:`Value`: one config value: the keys looked up in order, what a found value is taken as, the default (with its
  citation);
- :class:`Count`: fc's number of aux states: the sources looked up in order (a number, or the length of a list);
- :class:`Ids`: where the aux-layer ids are read;
- :class:`Refuse`: a refusal when a condition holds (the engine raises);
- :class:`Fact`: a value later steps decide by (``w.facts``), computed by a named function;
- :class:`Tensors`: how each checkpoint tensor is taken: renames, then :class:`Rule`\\ s in order (load it, skip it, or
  refuse it), then what every parameter left unfilled holds;
- :class:`Call`: what no step can say, a small named function of the walk.

The releases a reading holds for differ from it by ``switches``: keyword values a release record states
(:class:`~eagle3_checks.engines.profile.Release` ``differs``), which conditions read with :meth:`Walk.switch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.layout import Name
from ..fast_dataclass import dataclass
from . import reading
from .reading import Reading, is_int


class Template(str):
    """A message formatted with the walk when it is said: ``{r.num_layers}``, ``{raw[...]}``, a fact by its name,
    ``{name}`` (the tensor, in a :class:`Rule`), ``{key}`` (the key found, in a :class:`Value`), ``{release}`` (the
    release judged: a record covers several, so a message never names one literally) and ``{lines}`` before a cited
    file (empty for the release the record was read from, else that release: the line numbers are its). A plain
    ``str`` is said as it is."""


Cond = Callable[["Walk"], bool]  # a condition on the walk so far
Says = str | Callable[["Walk"], str]  # a message: as it is, a Template, or a function of the walk
TensorCond = Callable[["Walk", str, Name], bool]  # a condition on one checkpoint tensor (its name, parsed)


@dataclass
class Walk:
    """One reading under way: the checkpoint, what has been read, and the facts steps leave for later ones."""

    ckpt: Checkpoint
    raw: dict
    r: Reading
    target: Any = None  # the verifier's TargetConfig, or None
    launch: dict | None = None  # the launch settings given (--launch), for a release that reads its launch
    switches: dict[str, Any] = field(default_factory=dict)  # the release's stated differences
    facts: dict[str, Any] = field(default_factory=dict)
    fields: dict = field(default_factory=dict)  # the dict holding the decoder layer's fields
    where: str = ""  # its key prefix in messages ("transformer_layer_config.")
    stopped: bool = False
    # the release judged; r.version is, while the walk runs, the release the record was read from (its cited lines)
    judged: str = ""

    @property
    def release(self) -> str:
        """The release judged, as messages name it."""
        return self.judged or self.r.version

    @property
    def lines(self) -> str:
        """What goes before a cited file: '' when the release judged is the one the record was read from, else that
        release's ("0.5.23's "): its line numbers are cited."""
        return "" if self.release == self.r.version else f"{self.r.version}'s "

    def switch(self, name: str) -> Any:
        return self.switches.get(name)

    def fact(self, name: str) -> Any:
        return self.facts.get(name)

    def say(self, says: Says, **more: Any) -> str:
        """A message: a function of the walk, a :class:`Template` formatted with it, or a plain string."""
        if isinstance(says, Template):
            return says.format(r=self.r, raw=self.raw, w=self, release=self.release, lines=self.lines, **self.facts,
                               **more)
        if callable(says):
            return says(self)
        return says


@dataclass(frozen=True)
class Stop:
    """The walk ends when ``when`` holds: a refusal of the whole checkpoint (``layout``: the release does not read
    this layout at all, ``Reading.layout_ok`` False) or a class the gate does not model (``not_modelled``)."""

    when: Cond
    refusal: Says = ""
    not_modelled: Says = ""
    layout: bool = True


@dataclass(frozen=True)
class Branch:
    """When ``when`` holds the release builds another class: the walk goes on with ``steps`` (and ends with them)."""

    when: Cond
    steps: tuple


@dataclass(frozen=True)
class Layer:
    """The decoder layer's config as the release's config class reads it (reading.read_layer) from ``w.fields``:
    ``defaults`` (head_dim or None for hidden_size / heads, max_position_embeddings, the class) or None for the
    transformers class of the model_type the walk read (config_values.class_defaults); ``nested_defaults``: those of
    a speculators config, when they differ; ``legacy_rope``: transformers 4.57's rope reading."""

    defaults: tuple[int | None, int, str] | None = None
    nested_defaults: tuple[int | None, int, str] | None = None
    legacy_rope: bool = False


@dataclass(frozen=True)
class Value:
    """One config value: the first of ``at`` (dotted keys) found, taken by ``take``; else ``default`` (a function of
    the walk for a computed one), from ``why``. ``null_absent``: a null counts as absent (``dict.get(k) is not
    None``). ``says``: a found value's source (``{key}``: the key found). ``key``: record the key path as data
    (Reading.keys, for fixes). ``when``: the step applies only when it holds."""

    attr: str
    at: tuple[str, ...] = ()
    default: Any = None
    why: Says = ""
    take: Callable[[Any], Any] = bool
    null_absent: bool = False
    says: Says = Template("config.json: {key}")
    key: bool = False
    when: Cond | None = None
    valid: Callable[[Any], bool] | None = None  # a found value counts only when this holds (a usable integer)
    in_layer: bool = False  # the keys are looked up in the layer's fields (Walk.fields), not at the top level


@dataclass(frozen=True)
class Source:
    """One place :class:`Count` looks: ``kind`` "int" takes a usable integer at ``at``, "len" the length of a
    non-empty list there, "list" the length of any list there; ``says`` is its source, ``key`` records the key as
    data; ``when``: looked at only when it holds."""

    kind: str
    at: str
    says: Says = Template("config.json: {key}")
    when: Cond | None = None
    key: bool = False


@dataclass(frozen=True)
class Count:
    """fc's number of aux states: the first :class:`Source` that holds, else ``default`` from ``why``."""

    sources: tuple[Source, ...]
    default: int = 3
    why: Says = ""
    attr: str = "num_aux"
    when: Cond | None = None


@dataclass(frozen=True)
class Ids:
    """The aux-layer ids: the first of ``at`` (dotted keys) holding a usable list, else none (``why``)."""

    at: tuple[str, ...]
    why: Says
    when: Cond | None = None


@dataclass(frozen=True)
class Refuse:
    """A refusal when ``when`` holds (None: always); ``at`` names the config key or tensor it is about
    (``{key}``-free text); ``architecture``: the refusal is the class's (Reading.refuse_class)."""

    when: Cond | None
    says: Says
    at: str | None = None
    architecture: bool = False


@dataclass(frozen=True)
class Fact:
    """``w.facts[name] = compute(w)``: a value later steps decide by."""

    name: str
    compute: Callable[[Walk], Any]


@dataclass(frozen=True)
class Rule:
    """How the release takes a checkpoint tensor that ``when`` matches: load it into its role (``load``; ``role``
    renames it), skip it (``why`` says why), or refuse it (``refuse``: the error, at the tensor; ``why``: the skip
    reason recorded)."""

    when: TensorCond
    why: Says = ""
    load: bool = False
    refuse: Says = ""
    role: Callable[[Walk, str, Name], str | None] | None = None


@dataclass(frozen=True)
class Tensors:
    """The tensors: ``rules`` in order (the first that matches decides; none matching loads the tensor into its
    role), then every parameter no tensor fills holds ``missing``; ``narrows``: the release's linear weight loaders
    cut a larger tensor to fit (reading.finish)."""

    rules: tuple[Rule, ...]
    missing: Says
    narrows: bool = False
    refuse_skipped: bool = False  # every skip whose reason starts "refused: " is a load error (reading.REFUSED)
    # a tensor's role as the release names it before the rules (legacy names it maps back), or None
    rename: Callable[[Walk, str, Name], Name] | None = None
    # what the release does once every tensor is taken and before the parameters are checked (a named function)
    loaded: Callable[[Walk], None] | None = None


@dataclass(frozen=True)
class Call:
    """What no step can say: ``run(w)``, a small named function of the release."""

    run: Callable[[Walk], None]


Step = Stop | Branch | Layer | Value | Count | Ids | Refuse | Fact | Tensors | Call
fmt = Template


def const(attr: str, value: Any, why: Says, when: Cond | None = None) -> Value:
    """A value the release fixes whatever the config says."""
    return Value(attr, (), value, why, when=when)


def same(value: Any) -> Any:
    return value


def stated(attr: str, default: Callable[[Walk], Any], why: Says, at: str | None = None) -> Value:
    """A size the config states as a usable integer at ``at`` (default: ``attr``), else ``default`` from ``why``
    (reading.read_stated)."""
    return Value(attr, (at or attr,), default, why, take=same, valid=is_int)


def reading_of(attr: str) -> Callable[[Walk], Any]:
    """A default: what the walk has read for ``attr`` (hidden_size, vocab_size)."""
    def value(w: Walk) -> Any:
        return getattr(w.r, attr)
    value.__name__ = f"read_{attr}"
    return value


def model_type_of(default: str) -> Fact:
    """The config's model_type (a refusal when it is not a string), as the fact ``model_type``."""
    def compute(w: Walk) -> str:
        return reading.model_type_of(w.r, w.fields, default)
    return Fact("model_type", compute)


# ----- conditions on one tensor (Rule.when): its parsed name, the walk so far ----------------------------------------

def role_is(*roles: str) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return n.role in roles
    return cond


def role_ends(*suffixes: str) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return n.role is not None and n.role.endswith(suffixes)
    return cond


def role_starts(prefix: str) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return n.role is not None and n.role.startswith(prefix)
    return cond


def name_is(*names: str) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return name in names
    return cond


def name_has(part: str) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return part in name
    return cond


def name_starts(prefix: str) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return name.startswith(prefix)
    return cond


def name_ends(*suffixes: str) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return name.endswith(suffixes)
    return cond


def unknown(w: Walk, name: str, n: Name) -> bool:
    """No drafter role: the name means nothing to an EAGLE-3 drafter of the family read."""
    return n.role is None


def prefixed(w: Walk, name: str, n: Name) -> bool:
    return n.prefixed


def layers_style(w: Walk, name: str, n: Name) -> bool:
    return n.style == "layers"


def midlayer_style(w: Walk, name: str, n: Name) -> bool:
    return n.style == "midlayer"


def layer_beyond(w: Walk, name: str, n: Name) -> bool:
    """A layer past the ones the release builds (num_hidden_layers)."""
    return n.layer is not None and n.layer >= w.r.num_layers


def fc_norm_unbuilt(w: Walk, name: str, n: Name) -> bool:
    """An fc_norm.N the release does not build: no fc_norm, or N past the aux states."""
    return n.role is not None and n.role.startswith("fc_norm.") and (
        not w.r.fc_norm or int(n.role.split(".")[1]) >= w.r.num_aux)


def read_as(attr: str) -> Cond:
    """A condition on the walk: the reading's ``attr`` is set (truthy)."""
    def cond(w: Walk) -> bool:
        return bool(getattr(w.r, attr))
    cond.__name__ = f"read_{attr}"
    return cond


def fact_is(name: str) -> Cond:
    def cond(w: Walk) -> bool:
        return bool(w.facts.get(name))
    cond.__name__ = f"fact_{name}"
    return cond


def also(cond: Cond) -> TensorCond:
    """A condition on the walk, for a tensor rule."""
    def tensor_cond(w: Walk, name: str, n: Name) -> bool:
        return cond(w)
    return tensor_cond


def all_of(*conds: TensorCond) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return all(c(w, name, n) for c in conds)
    return cond


def any_of(*conds: TensorCond) -> TensorCond:
    def cond(w: Walk, name: str, n: Name) -> bool:
        return any(c(w, name, n) for c in conds)
    return cond


def both(*conds: Cond) -> Cond:
    """A condition on the walk: every one of ``conds`` holds."""
    def cond(w: Walk) -> bool:
        return all(c(w) for c in conds)
    return cond


def no(cond: Cond) -> Cond:
    def negated(w: Walk) -> bool:
        return not cond(w)
    return negated


def layout_is(layout: str) -> Cond:
    def cond(w: Walk) -> bool:
        return w.ckpt.layout == layout
    cond.__name__ = f"layout_{layout}"
    return cond


def truthy(value: Any) -> bool:
    return bool(value)


def is_true(value: Any) -> bool:
    return value is True


def normed(value: Any) -> str:
    """norm_output as the state fed back: true feeds the normed state back."""
    return "normed" if value else "prenorm"


def normed_if_true(value: Any) -> str:
    return "normed" if value is True else "prenorm"


def is_switch(name: str, value: Any = True) -> Cond:
    """A condition: the release's stated difference ``name`` is ``value``."""
    def cond(w: Walk) -> bool:
        return w.switch(name) == value
    cond.__name__ = f"switch_{name}"
    return cond


def unless_switch(name: str) -> Cond:
    def cond(w: Walk) -> bool:
        return not w.switch(name)
    cond.__name__ = f"unless_{name}"
    return cond

