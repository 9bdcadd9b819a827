"""An engine release as the gate models it: a :class:`Profile`, and the aux-layer capture rules profiles share.

A profile is a record: the release's name and version, the engine files it follows, its reading of a checkpoint as
steps (``steps``, :mod:`eagle3_checks.engines.record`, walked by the one reader, :mod:`eagle3_checks.engines.reader`,
into a :class:`~eagle3_checks.engines.reading.Reading`), and the small named functions for what steps cannot say: how
it turns aux-layer ids into the target layers it captures (``capture``, which for SGLang depends on the TARGET's
architecture), the context it serves, its launch. ``releases`` are the releases the reading holds for, each with its
stated differences.

Layers are counted one way throughout: layer X means *the output of target layer X* (X = -1: the embeddings, the
input of layer 0). A trainer or engine that writes "id L = the residual stream entering layer L" (vLLM) captures
layer L-1; one that writes "id X = the output of layer X" (SGLang's ``+1`` rule) captures layer X.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from ..drafter.checkpoint import Checkpoint
from ..fast_dataclass import dataclass
from . import reader
from .reading import Reading


@dataclass(frozen=True)
class Target:
    """What a capture rule needs to know of the target (verifier) model; ``None`` fields are unknown."""

    architecture: str | None = None
    num_layers: int | None = None

    @classmethod
    def of(cls, target_config: Any) -> Target | None:
        """From a :class:`~eagle3_checks.drafter.config_values.TargetConfig` (or None: no --target-config)."""
        if target_config is None:
            return None
        archs = target_config.architectures or []
        return cls(archs[0] if archs else None, target_config.num_hidden_layers)


@dataclass(frozen=True)
class Capture:
    """Which target layers an engine captures from a list of ids, and why.

    ``layers`` is None when the answer depends on a target the gate does not know; ``outcomes`` then names each
    possible answer as (the targets it holds for, layers)."""

    layers: tuple[int, ...] | None
    rule: str  # how the ids became layers, citing the engine file
    last_id: int | None = None  # the last id that captures anything on this target (None: its depth is unknown)
    outcomes: tuple[tuple[str, tuple[int, ...]], ...] = ()


class Limit(NamedTuple):
    """What a release does with the context it is served with (``Profile.serving``): a note ("info") or an error,
    with the config key it is about, the value it needs there and, where a config edit lifts it, that edit."""

    severity: str  # "info" or "error"
    message: str
    why: str = ""
    fix: str = ""
    key: str = "max_position_embeddings"
    expected: str | None = None
    found: str | None = None
    patch: list[dict] | None = None  # JSON Patch operations on config.json (None: no config edit)
    refuses: bool = False  # the release refuses to start (SGLang), rather than serving a shorter context (vLLM)


def input_of(ids: list[int]) -> tuple[int, ...]:
    """id L = the residual stream entering layer L: the output of layer L-1."""
    return tuple(i - 1 for i in ids)


def output_of(ids: list[int]) -> tuple[int, ...]:
    """id X = the output of layer X (SGLang adds 1 and captures the input of layer X+1)."""
    return tuple(ids)


def default_ids(num_layers: int) -> list[int]:
    """The ids vLLM and SGLang fall back to without any: (2, N/2, N-3), counted as inputs of those layers
    (vLLM ``model_executor/models/interfaces.py:1751-1772``; SGLang ``srt/models/llama.py:933-936``, used raw)."""
    return [2, num_layers // 2, num_layers - 3]


@dataclass(frozen=True)
class Release:
    """One release a profile holds for, as data: its date, how it is known, and what it does otherwise than the
    release the profile's reading cites (``differs``: keyword arguments of the profile's ``read``, each one stated
    difference, with its file and line in ``why``). ``recorded``: the date of its conformance recording
    (tests/conformance/recorded/NAME-VERSION/, which the default test run holds the profile to); None: read from the
    released package's source only."""

    version: str
    released: str  # its upload date on PyPI
    recorded: str | None = None
    # the switches of the profile's reading (Profile.takes), and keywords of its capture and serving
    differs: tuple[tuple[str, Any], ...] = ()
    why: str = ""
    peer: bool = False  # the released package itself runs in the default tests (speculators, SpecForge)

    @property
    def how(self) -> str:
        """How the release's reading is known, for reports."""
        if self.recorded:
            return f"recorded {self.recorded}"
        return "run in the default tests" if self.peer else "read from its source"

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)


@dataclass(frozen=True)
class Profile:
    """One modelled release of an engine (or a trainer that loads drafters, as speculators does)."""

    name: str  # "vllm", "sglang", "speculators"
    version: str  # "0.33.0"
    steps: tuple  # the reading, as steps (engines/record.py) the one reader walks
    capture: Callable[[list[int], Target | None], Capture]  # explicit ids -> the layers captured
    ids_for: Callable[[tuple[int, ...], Target | None], list[int] | None]  # layers -> ids that capture them
    sources: tuple[str, ...]  # the engine files the profile follows, with lines
    reads_ids: str  # where this release reads the aux ids, for messages
    ids_path: tuple[str, ...]  # the same, as a key path in config.json (for a fix as data)
    # serving(reading, max_model_len or None, target config or None) -> None or a Limit: what the context the server
    # is started with (--max-model-len, else what the release takes from the target) does to the drafter. The one
    # place the gate states a context verdict (engine.serving; the readings do not refuse for it).
    serving: Callable[[Reading, int | None, Any], Limit | None] | None = None
    # cannot_compute(trained reading) -> what of a drafter this release has no parameter or flag for (convert
    # refuses those before writing a flat checkpoint for it)
    cannot_compute: Callable[[Reading], list[str]] | None = None
    # where the release's linear weight loaders narrow a checkpoint tensor larger than the parameter (no error)
    narrows_at: str = ""
    # the drafter families (drafter/families/) the release has a class for: "llama" (Llama/Qwen3 layers), "mla"
    families: tuple[str, ...] = ("llama",)
    # the releases this reading holds for, oldest first (its own ``version`` among them): from the first to the last,
    # as typeshed's VERSIONS states a stdlib module's range; empty: only ``version``, read from its source
    releases: tuple[Release, ...] = ()
    # set on a profile made for one release by :meth:`at`: the version of the profile that judges it
    judged_by: str | None = None
    # what the release captures when it finds no ids (target, the drafter's reading) -> Capture; None: vLLM's and
    # SGLang's (2, N/2, N-3) of the target, used raw
    default_rule: Callable[[Target | None, Reading | None], Capture] | None = None
    # the launch option the release takes the aux layers from instead of the drafter's config (TensorRT-LLM's
    # eagle3_layers_to_capture); its reading then takes ``launch=`` (the launch settings --launch gives, or None)
    launch_ids: str | None = None
    # the distribution whose installed version (NAME-VERSION.dist-info) selects the release (None: ``name``)
    package: str | None = None
    # launch(reading, launch.Request) -> launch.Launch: how the release is started with a drafter (engines/launch.py;
    # eagle3-checks recipe and engine.serving's preconditions); None: the release is not launched (a trainer)
    launch: Callable[..., Any] | None = None
    # drafter_launch(config.json, layout) -> [launch.Problem]: what starting the release with the drafter itself needs
    # of its config (engine.serving warns); None: nothing
    drafter_launch: Callable[[dict, str], list[Any]] | None = None
    # the layout eagle3-checks convert writes for this engine (convert --to NAME); None: no layout alone serves it
    converts_to: str | None = None
    # what the release does with a draft id that d2t maps past the target vocabulary (an absolute-id d2t), cited;
    # "": not read for this release
    d2t_past_vocab: str = ""  # "{release}" where it names the release judged
    # the launch option the release takes the drafter's attention window from instead of its config (SGLang's
    # --speculative-draft-window-size; its reading reads it from the launch settings)
    launch_window: str | None = None
    # the switches the reading's steps read (Walk.switch), with the values of this profile's own release: the
    # differences a release of this profile may state
    takes: tuple[tuple[str, Any], ...] = ()
    # the switches of the release this profile is made for (set by :meth:`at`)
    switches: tuple[tuple[str, Any], ...] = ()
    module: str = ""  # the module holding the record (the catalogue names it)
    # config values the release's recorder reads back from the built model beyond those every recorder reads
    # (engines/recorded.py compares them): vLLM's norm_before_residual, from the first layer's residual norm
    recorded_config: tuple[str, ...] = ()
    # how the release's server drafts along a request and names its speculative-decoding counters
    # (engines/counting.py); None: not read (walked as K chained drafts, said so)
    counting: Any = None

    def read(self, ckpt: Checkpoint, target: Any = None, *, launch: dict | None = None, **switches: Any) -> Reading:
        """This release's reading of ``ckpt`` (``target``: the verifier's TargetConfig, when known; ``launch``: its
        launch settings; ``switches``: more stated differences, such as the trainer reading's ``lenient``)."""
        base = self.judged_by or self.version
        r = reader.read(self.name, base, self.steps, ckpt, target, launch,
                        {**dict(self.takes), **dict(self.switches), **switches}, judged=self.version)
        r.version = self.version
        return r

    @property
    def holds_for(self) -> tuple[Release, ...]:
        """The releases this profile's reading holds for, oldest first."""
        return self.releases or (Release(self.version, ""),)

    @property
    def range(self) -> str:
        """'0.32.0 to 0.33.0' (or the one release)."""
        first, last = self.holds_for[0].version, self.holds_for[-1].version
        return first if first == last else f"{first} to {last}"

    def release(self, version: str) -> Release | None:
        return next((r for r in self.holds_for if r.version == version), None)

    def at(self, version: str, differs: tuple[tuple[str, Any], ...] = ()) -> Profile:
        """This reading for another release ``version``: the same profile, its reading given that release's stated
        differences (switches of its steps, keywords of its capture and serving), its readings naming ``version``."""
        if version == self.version and not differs:
            return self
        stated = dict(differs)

        def taken_by(fn: Callable[..., Any] | None) -> dict[str, Any]:
            return {k: v for k, v in stated.items() if fn is not None and k in inspect.signature(fn).parameters}

        read_keys = {k: v for k, v in stated.items() if k in dict(self.takes)}
        capture_keys, serving_keys = taken_by(self.capture), taken_by(self.serving)
        unknown = set(stated) - set(read_keys) - set(capture_keys) - set(serving_keys)
        if unknown:
            raise TypeError(f"{self.spec}: release {version}'s stated differences {sorted(unknown)} are keywords of "
                            "neither its reading, capture nor serving")
        capture = functools.partial(self.capture, **capture_keys) if capture_keys else self.capture
        serving = functools.partial(self.serving, **serving_keys) if serving_keys and self.serving else self.serving
        return dataclasses.replace(self, version=version, switches=tuple({**dict(self.switches), **read_keys}.items()),
                                   capture=capture, serving=serving, judged_by=self.judged_by or self.version)

    @property
    def ids_pointer(self) -> str:
        """The JSON pointer of the field this release reads the aux ids from."""
        return "/" + "/".join(self.ids_path)

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)

    def default_capture(self, target: Target | None, drafter: Reading | None = None) -> Capture:
        """What the engine captures when it finds no ids: its default layers, used raw."""
        if self.default_rule is not None:
            return self.default_rule(target, drafter)
        if target is None or not target.num_layers:
            return Capture(None, "the engine's default (2, N/2, N-3) of the target's N layers, N unknown")
        ids = default_ids(target.num_layers)
        return Capture(input_of(ids), f"the engine's default ids {ids}, used as inputs of those layers",
                       target.num_layers)


@functools.lru_cache(maxsize=1024)  # asked for every release of every reading of every gate run
def version_key(version: str) -> tuple[int, ...]:
    """'0.5.23' -> (0, 5, 23); anything after the numeric part (rc1, +cu128) is dropped."""
    out = []
    for part in version.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(out)
