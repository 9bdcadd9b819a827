"""How a serving engine drafts along a request and counts what it accepted, as data: the settings that change the
walk (the draft length K, a draft-length floor, a confidence cut-off, what ends drafting near a request's end) and
the names each release gives its counters. :mod:`eagle3_checks.acceptance.walk` walks a recorded sequence with a
:class:`Drafting`; the reports name each figure as the engine's own metric does (:class:`Counting`).

A server drafts in verify steps: after the prefill yields the first new token, the drafter proposes up to K tokens
from the prompt's last row; the target verifies them, accepts the leading run ``a`` equal to its own greedy tokens and
yields ``a + 1``; the next draft starts ``a + 1`` rows later. Each release counts per verify step (cited below), which
is not every starting position: acceptance clusters along a text, and a server crosses an easy stretch in few steps.

Releases, each read from its own released source:

- llama.cpp, the build llama-cpp-python 0.3.36 vendors (``vendor/llama.cpp``, commit 0c1e57098):
  ``tools/server/server-context.cpp:453-471`` cuts the draft to ``n_remaining - 1`` (none when that is 0);
  ``:3879-3970`` counts a verify step only when a draft was made, adds its accepted drafts to
  ``n_draft_accepted`` and position i's counter for each of the first ``a``; ``:620-648`` logs the mean acceptance
  length ``1 + n_draft_accepted / n_draft_verif_steps``; ``server-task.cpp:1553-1612`` exports
  ``llamacpp:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
  ``..._num_accepted_tokens_per_pos_total{position="i"}``; per request ``timings.draft_n`` and
  ``timings.draft_n_accepted``. ``common/speculative.cpp:800-830``: drafting stops at a step whose top candidate's
  probability is below ``--spec-draft-p-min``; ``:855-857``: a draft shorter than ``--spec-draft-n-min`` is dropped;
  ``common/common.h:328-332``: the defaults n_max 3, n_min 0, p_min 0.0.
- vLLM 0.34.0: ``v1/spec_decode/metrics.py:41-50`` (``observe_draft``: one draft per verify step, its accepted
  tokens per position), ``:229-231, 255`` (``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
  ``vllm:spec_decode_num_accepted_tokens``, ``vllm:spec_decode_num_accepted_tokens_per_pos``), ``:114-122`` ("Mean
  acceptance length" ``1 + accepted / drafts``, the per-position rates); ``v1/core/sched/scheduler.py:520-561``
  proposes no draft after a step sure to sample the request's last token and drafts K tokens otherwise (no cut to
  what remains); ``:2392-2414`` counts ``len(sampled) - 1`` accepted. The same metric names in 0.33.0
  (``metrics.py:41-47, 114-117, 188-196``).
- SGLang 0.5.23: ``managers/scheduler_components/metrics_reporter.py:543-555, 973-983`` (``sglang:spec_accept_length``:
  tokens generated per verify forward, the bonus token included; ``sglang:spec_accept_rate``: correct drafts over
  ``speculative_num_draft_tokens - 1`` per verify), ``observability/metrics_collector.py:511-521``; per request
  ``meta_info.spec_accept_length`` is ``completion_tokens / spec_verify_ct`` (``managers/tokenizer_manager.py:
  3156-3168``: the prefill's token counted too, so it sits above the gauge on short outputs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..fast_dataclass import dataclass

REMAINING = "remaining"  # the draft is cut to n_remaining - 1 tokens (llama.cpp)
FULL = "full"  # K drafts at every verify step while a token remains (vLLM, SGLang)


@dataclass(frozen=True)
class Drafting:
    """The settings a server walks a request with. ``said``: where each setting came from (the launch, the release's
    default), as the reports state them; ``unmodelled``: what of the launch the walk cannot model (tree drafting,
    sampling at a temperature), None when it models all of it."""

    k: int
    n_min: int = 0  # a draft shorter than this is dropped (no verify step; llama.cpp --spec-draft-n-min)
    p_min: float = 0.0  # drafting stops at a step whose top probability is below this (llama.cpp --spec-draft-p-min)
    tail: str = FULL  # how drafting ends near a request's end: REMAINING or FULL
    said: tuple[str, ...] = ()
    unmodelled: str | None = None

    def capped(self, steps: int) -> Drafting:
        """The walk at most ``steps`` drafts deep (the steps the readings were computed for), said so."""
        if self.k <= steps:
            return self
        return Drafting(steps, self.n_min, self.p_min, self.tail,
                        self.said + (f"K {self.k} walked as {steps}: the readings were computed {steps} steps deep "
                                     f"(accept --steps {self.k} walks it whole)",), self.unmodelled)

    def describe(self) -> str:
        out = [f"K {self.k}"]
        if self.n_min:
            out.append(f"draft-length floor {self.n_min}")
        if self.p_min:
            out.append(f"confidence cut-off {self.p_min:g}")
        out.append("each draft cut to the tokens remaining" if self.tail == REMAINING else "K drafts per verify step")
        return ", ".join(out)


@dataclass(frozen=True)
class Counting:
    """How one engine's server names its speculative-decoding counters (``metrics``: our figure -> its name), how it
    drafts by default, and how its launch settings (``--launch``, the JSON ``eagle3-checks recipe`` writes) change
    that (``drafting(settings or None, default K)``)."""

    engine: str
    metrics: tuple[tuple[str, str], ...]
    cite: str
    drafting: Callable[[dict | None, int], Drafting]
    notes: tuple[str, ...] = field(default=())
    held: str = "read from the release's source, not held to a server"  # what the walk of this engine rests on
    # what its /metrics exposes, as the samples are named in the text exposition: our figure -> (sample name, kind),
    # kind "counter" (summed over every label but "position", differenced between two scrapes) or "gauge" (the last
    # value); "accepted_per_position" is the counter labelled position="i"
    scrape: tuple[tuple[str, str, str], ...] = ()

    def exposed(self) -> dict[str, tuple[str, str]]:
        return {figure: (name, kind) for figure, name, kind in self.scrape}

    def name(self, figure: str) -> str | None:
        return dict(self.metrics).get(figure)


def _option(args: list, flag: str) -> str | None:
    """The value after ``flag`` in a command's argument list (the last one given)."""
    out = None
    for i, arg in enumerate(args[:-1]):
        if arg == flag:
            out = args[i + 1]
    return out


def _number(value: Any, kind: type, what: str, default: Any) -> tuple[Any, bool]:
    if value is None:
        return default, False
    try:
        return kind(value), True
    except (TypeError, ValueError):
        raise ValueError(f"{what}: {value!r} is not a number") from None


def llamacpp_drafting(settings: dict | None, k: int) -> Drafting:
    """llama-server's drafting from its serve command (``settings["serve"]``, as the recipe writes it); the release's
    defaults where an option is absent (``common/common.h:328-332``: n_max 3, n_min 0, p_min 0.0)."""
    serve = [str(a) for a in (settings or {}).get("serve") or []]
    said = []
    n_max, given = _number(_option(serve, "--spec-draft-n-max"), int, "--spec-draft-n-max", 3)
    said.append(f"K {n_max} from --spec-draft-n-max" if given else "K 3, llama.cpp's default --spec-draft-n-max "
                "(common/common.h:328)")
    n_min, given = _number(_option(serve, "--spec-draft-n-min"), int, "--spec-draft-n-min", 0)
    if given:
        said.append(f"draft-length floor {n_min} from --spec-draft-n-min")
    p_min, given = _number(_option(serve, "--spec-draft-p-min") or _option(serve, "--draft-p-min"), float,
                           "--spec-draft-p-min", 0.0)
    if given:
        said.append(f"confidence cut-off {p_min:g} from --spec-draft-p-min")
    if settings is None:
        n_max, said = k, [f"K {k} (no --launch llamacpp=FILE; llama.cpp's default --spec-draft-n-max is 3, "
                          "common/common.h:328)"]
    temp = _option(serve, "--temp")
    unmodelled = None
    if temp is not None and _number(temp, float, "--temp", 0.0)[0] > 0:
        unmodelled = (f"--temp {temp}: the target samples, and a draft is accepted by rejection sampling; the walk "
                      "counts greedy acceptance only")
    return Drafting(n_max, n_min, p_min, REMAINING, tuple(said), unmodelled)


def vllm_drafting(settings: dict | None, k: int) -> Drafting:
    """vLLM's drafting from ``--speculative-config`` (``settings["speculative_config"]``)."""
    spec = (settings or {}).get("speculative_config") or {}
    n, given = _number(spec.get("num_speculative_tokens"), int, "num_speculative_tokens", k)
    said = (f"K {n} from num_speculative_tokens",) if given else (f"K {k} (no num_speculative_tokens given)",)
    unmodelled = None
    if spec.get("parallel_drafting"):
        unmodelled = "parallel_drafting: a P-EAGLE drafter drafts its positions at once, not as a chain"
    return Drafting(n, tail=FULL, said=said, unmodelled=unmodelled)


def sglang_drafting(settings: dict | None, k: int) -> Drafting:
    """SGLang's drafting from its launch arguments (``settings["args"]``)."""
    args = (settings or {}).get("args") or {}
    n, given = _number(args.get("speculative-num-steps"), int, "speculative-num-steps", k)
    said = (f"K {n} from --speculative-num-steps",) if given else (f"K {k} (no --speculative-num-steps given)",)
    topk, _ = _number(args.get("speculative-eagle-topk"), int, "speculative-eagle-topk", 1)
    unmodelled = None
    if topk > 1:
        unmodelled = (f"--speculative-eagle-topk {topk}: tree drafting (several candidates per step, the longest "
                      "accepted path kept); the walk models a chain")
    return Drafting(n, tail=FULL, said=said, unmodelled=unmodelled)


def chain_drafting(settings: dict | None, k: int) -> Drafting:
    """An engine whose counting is not read here: a chain of K drafts per verify step, said so."""
    return Drafting(k, tail=FULL, said=(f"K {k}; how this engine drafts and counts is not read here: walked as a "
                                        "chain-drafting server",))


LLAMACPP = Counting(
    "llamacpp",
    (("verify_steps", "llamacpp:spec_decode_num_drafts_total"),
     ("drafted", "llamacpp:spec_decode_num_draft_tokens_total"),
     ("accepted", "llamacpp:spec_decode_num_accepted_tokens_total"),
     ("accepted_per_position", "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"),
     ("request_drafted", "timings.draft_n"), ("request_accepted", "timings.draft_n_accepted")),
    "tools/server/server-task.cpp:1553-1612, server-context.cpp:453-471, 620-648, 3879-3970 (llama.cpp 0c1e57098)",
    llamacpp_drafting,
    ("mean acceptance length: 1 + accepted / verify steps, logged per request (server-context.cpp:634)",),
    "held to llama-server's own counters (tests/conformance/served/llamacpp-0.3.36.json)",
    (("verify_steps", "llamacpp:spec_decode_num_drafts_total", "counter"),
     ("drafted", "llamacpp:spec_decode_num_draft_tokens_total", "counter"),
     ("accepted", "llamacpp:spec_decode_num_accepted_tokens_total", "counter"),
     ("accepted_per_position", "llamacpp:spec_decode_num_accepted_tokens_per_pos_total", "counter")))

VLLM = Counting(
    "vllm",
    (("verify_steps", "vllm:spec_decode_num_drafts"), ("drafted", "vllm:spec_decode_num_draft_tokens"),
     ("accepted", "vllm:spec_decode_num_accepted_tokens"),
     ("accepted_per_position", "vllm:spec_decode_num_accepted_tokens_per_pos"),
     ("acceptance_length", "Mean acceptance length"), ("per_position_rate", "Per-position acceptance rate")),
    "v1/spec_decode/metrics.py:41-50, 114-122, 229-255; v1/core/sched/scheduler.py:520-561, 2392-2414 (vLLM 0.34.0)",
    vllm_drafting,
    ("a request's last verify step as read: K drafts while a token remains; whether one is made depends on async "
     "scheduling (v1/core/sched/scheduler.py:520-561), not held to a vLLM server",),
    # prometheus_client Counters (v1/spec_decode/metrics.py:227-260, one per engine label set; position for the per-
    # position one): exposed with "_total"
    scrape=(("verify_steps", "vllm:spec_decode_num_drafts_total", "counter"),
            ("drafted", "vllm:spec_decode_num_draft_tokens_total", "counter"),
            ("accepted", "vllm:spec_decode_num_accepted_tokens_total", "counter"),
            ("accepted_per_position", "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter")))

SGLANG = Counting(
    "sglang",
    (("acceptance_length", "sglang:spec_accept_length"), ("accept_rate", "sglang:spec_accept_rate"),
     ("verify_steps", "meta_info.spec_verify_ct")),
    "managers/scheduler_components/metrics_reporter.py:543-555, 973-983; observability/metrics_collector.py:511-521 "
    "(SGLang 0.5.23)",
    sglang_drafting,
    ("sglang:spec_accept_rate divides by speculative_num_draft_tokens - 1 per verify step, whatever was drafted",
     "meta_info.spec_accept_length per request is completion_tokens / spec_verify_ct (the prefill's token counted)"),
    # Gauges set per log interval (observability/metrics_collector.py:511-521): no count, no per-position figure
    scrape=(("acceptance_length", "sglang:spec_accept_length", "gauge"),
            ("accept_rate", "sglang:spec_accept_rate", "gauge")))

CHAIN = Counting("chain", (), "not read", chain_drafting)
