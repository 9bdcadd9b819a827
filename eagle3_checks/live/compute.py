"""The engines' own drafter compute as the judge of the gate's modelled one (:mod:`eagle3_checks.numerics.draft_steps`).

The recorders (``recorders/record_vllm.py``, ``record_sglang.py``, with ``--compute FILE``) run each drafter the
engine built through the engine's own forward code for K draft steps, float32, on CPU, with one stand-in for the
attention kernel (``recorders/_compute.py`` says what it computes and what it refuses), and record each step's logits
in compact form. This module is the project's side:

* :func:`recorder_inputs` - the seeded inputs the recorders feed a drafter that is given none (the recorder's own
  generator, loaded from its file: both sides compute from the same numbers);
* :func:`modelled` - the gate's reading of the drafter run on those inputs, greedy or teacher-forced like the
  recorder, returning the logits and the fed states;
* :func:`disagreements` - where a compute record and the modelled run differ: the -inf pattern, each row's argmax,
  each recorded top-k logit (the forward level's float32 tolerance, :data:`eagle3_checks.numerics.RTOL` and
  ``ATOL``) and the norm of the state fed forward;
* :func:`compute_many` / :func:`load_full` - a live run (``--engine NAME@installed``): the recorder run on the
  gate's own inputs, every logit written to a file and read back.

The committed compute recordings live in ``tests/conformance/computed/ENGINE-VERSION.json`` (``conformance/run.sh``
writes them); ``tests/test_engine_compute.py`` holds the modelled readings to them in the default run.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass
from ..numerics import ATOL, RTOL
from ..storage.safetensors import from_numpy, load_array, read_header, write_safetensors
from . import RECORDERS, TIMEOUT_S, CannotJudge, _env, version

COMPUTED_SUBDIR = ("tests", "conformance", "computed")


def recorder_module() -> Any:
    """``recorders/_compute.py``, loaded from its file (it imports torch: the forward level only)."""
    name = "eagle3_checks_live_recorder_compute"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, RECORDERS / "_compute.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class _Table:
    """A (V, H) embedding table as the forward pass reads a target's embedding (``shape``, ``rows(ids)``)."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self.shape = tuple(table.shape)

    def rows(self, ids: list[int]) -> Any:
        return self.table[ids].numpy()


def recorder_inputs(width: int, vocab: int, hidden: int | None, tokens: int | None = None,
                    seed: int | None = None) -> dict[str, Any]:
    """The recorder's seeded inputs for a drafter whose fc takes ``width`` (``hidden``: with an embedding table that
    stands in for the target's)."""
    rc = recorder_module()
    return rc.seeded_inputs(width, vocab, hidden, rc.TOKENS if tokens is None else tokens,
                            rc.SEED if seed is None else seed)


@dataclass
class Modelled:
    logits: list  # (T, V) per step
    fed: list  # (T, H) per step: the state each step hands on


def modelled(reading: Any, weights: Any, inputs: dict[str, Any], steps: int, embedding: Any = None) -> Modelled:
    """The gate's reading run on the recorder's inputs (greedy, or the ``later_tokens`` they give), as served (a
    tensor the loader narrows cut as it cuts it); ``embedding``: the target's embedding where the inputs carry no
    ``embed_table`` (rows(ids), shape). Raises draft_steps.ForwardError."""
    from ..numerics.draft_steps import Inputs, run

    later = inputs.get("later_tokens")
    fed: list = []
    args = Inputs(aux_hidden_states=inputs["aux_hidden_states"], input_ids=inputs["input_ids"],
                  position_ids=inputs["position_ids"],
                  later_tokens=None if later is None else [later[k] for k in range(later.shape[0])],
                  target_embedding=_Table(inputs["embed_table"]) if "embed_table" in inputs else embedding)
    logits = run(reading, weights, args, steps, as_served=True, states=fed)
    return Modelled(logits, fed)


def _digest(t: Any) -> str:
    return str(recorder_module().digest(t))


def disagreements(recorded: list[dict[str, Any]], got: Modelled, rtol: float | None = None,
                  atol: float | None = None) -> list[str]:
    """Where the modelled run differs from an engine's compute record (its ``steps``), step by step; empty when
    they agree: the same finite target ids, the same argmax in every row, every recorded top-k logit within the
    forward level's float32 tolerance (scaled to the row's largest logit), and the fed state's norm too."""
    import torch

    rtol = RTOL if rtol is None else rtol
    atol = ATOL if atol is None else atol
    out: list[str] = []
    if len(recorded) != len(got.logits):
        return [f"the engine computed {len(recorded)} steps, the gate {len(got.logits)}"]
    for rec, logits, fed in zip(recorded, got.logits, got.fed, strict=True):
        k = rec["step"]
        finite = torch.isfinite(logits)
        counts = finite.sum(-1).tolist()
        count = counts[0] if len(set(counts)) == 1 else counts
        if count != rec["finite"] or _digest(finite[0].nonzero().flatten().to(torch.int64)) != rec["finite_ids_sha256"]:
            out.append(f"step {k}: the engine's logits are finite at other target ids ({rec['finite']} per row) than "
                       f"the gate's ({count}): another vocabulary mapping")
            continue
        ids = torch.tensor(rec["top_ids"], dtype=torch.int64)
        want = torch.tensor(rec["top_values"], dtype=torch.float64)
        have = logits.gather(1, ids).double()
        scale = want[:, :1].abs().clamp_min(1.0)
        allowed = atol * scale + rtol * want.abs()
        diff = (have - want).abs()
        argmax = logits.argmax(-1)
        rows = [t for t in range(ids.shape[0]) if int(argmax[t]) != int(ids[t, 0])
                and float(logits[t, argmax[t]]) - float(have[t, 0]) > float(allowed[t, 0])]
        if rows:
            t = rows[0]
            out.append(f"step {k}: argmax differs in {len(rows)} of {ids.shape[0]} rows (row {t}: the engine drafts "
                       f"{int(ids[t, 0])}, the gate {int(argmax[t])})")
        if bool((diff > allowed).any()):
            flat = int(diff.argmax())
            t, j = divmod(flat, diff.shape[1])
            out.append(f"step {k}: top-{ids.shape[1]} logits differ by up to {float(diff.max()):.3g} (row {t}, target "
                       f"id {int(ids[t, j])}: the engine {float(want[t, j]):.7g}, the gate {float(have[t, j]):.7g}; "
                       f"tolerance {float(allowed[t, j]):.2g})")
        norms = fed.double().norm(dim=-1)
        rec_norms = torch.tensor(rec["fed_norm"], dtype=torch.float64)
        if norms.shape != rec_norms.shape or bool(((norms - rec_norms).abs() > atol * rec_norms.clamp_min(1.0)
                                                   + rtol * rec_norms).any()):
            out.append(f"step {k}: the state fed forward differs (norms {_few(rec_norms)} by the engine, "
                       f"{_few(norms)} by the gate): another state fed back")
    return out


def inputs_for(reading: Any) -> dict[str, Any] | str:
    """The recorder's seeded inputs for the drafter as ``reading`` reads it (fc's width, the vocabulary, an embedding
    table where it serves with the target's), or why the reading cannot say."""
    if reading.target_hidden_size is None or reading.vocab_size is None or reading.hidden_size is None:
        return "the reading states no fc width or vocabulary"
    hidden = reading.hidden_size if "embed_tokens.weight" not in reading.tensors else None
    return recorder_inputs(reading.num_aux * reading.target_hidden_size, reading.vocab_size, hidden)


def hold(reading: Any, weights: Any, rec: dict[str, Any], inputs: dict[str, Any] | None = None) -> list[str]:
    """Where the gate's ``reading`` of a drafter disagrees with the engine's own compute record ``rec`` (one
    checkpoint of a compute recording); ``inputs``: what the engine was fed (None: the recorder's seeded inputs for
    the drafter as the reading reads it). A record that could not be judged (``cannot_judge``) or a drafter the
    engine did not build (``not_computed``) gives nothing: the loading recordings hold those."""
    import torch

    from ..numerics.draft_steps import ForwardError

    if "cannot_judge" in rec or "not_computed" in rec:
        return []
    reading = _as_engine_runs(reading)
    if "computes_nan" in rec:
        return [f"the engine computes with parameters it leaves unwritten ({', '.join(rec.get('unwritten', []))}: "
                f"NaN logits from step {rec['computes_nan']} when they are set to NaN); the gate's reading fills "
                "every parameter it computes with"] if reading.computable else []
    if not reading.computable:
        if "raised" in rec:
            return []
        return ["the engine computed the drafter; the gate's reading says it cannot ("
                + "; ".join(reading.refusals or [f"{r}: {how}" for r, how in reading.unfilled.items()]) + ")"]
    if inputs is None:
        seeded = inputs_for(reading)
        if isinstance(seeded, str):
            return [seeded]
        inputs = seeded
        digests = {k: _digest(v) for k, v in sorted(inputs.items())}
        if "inputs_sha256" in rec and digests != rec["inputs_sha256"]:
            which = sorted(k for k in set(digests) | set(rec["inputs_sha256"])
                           if digests.get(k) != rec["inputs_sha256"].get(k))
            return [f"the engine was fed other inputs than the gate's reading implies ({', '.join(which)}): another "
                    "fc width, vocabulary or embedding"]
    steps = rec.get("steps", [])
    if "later_tokens" not in inputs and len(steps) > 1:
        # later steps fed the engine's own drafts, so that one step's disagreement does not spread to the next
        inputs = {**inputs, "later_tokens": torch.tensor([s["next_tokens"] for s in steps[:-1]], dtype=torch.int64)}
    try:
        got = modelled(reading, weights, inputs, len(steps) if steps else rc_steps())
    except ForwardError as exc:
        if "raised" in rec:  # neither computes the drafter
            return []
        return [f"the gate's reading cannot run: {exc}"]
    if "raised" in rec:
        raised = rec["raised"]
        return [f"the engine's own code raises while computing ({raised['type']}: {raised['message'][:200]}, at "
                f"{raised.get('at')}); the gate's reading computes the drafter"]
    return disagreements(steps, got)


def rc_steps() -> int:
    return int(recorder_module().STEPS)


def _as_engine_runs(reading: Any) -> Any:
    """``reading`` with an unfilled d2t dropped where the reading says the engine keeps it at zeros (vLLM builds
    draft_id_to_target_id with torch.zeros, llama_eagle3.py:338-342): the forward pass computes a d2t it is not
    given as zeros, which is what the engine computes with."""
    import copy

    zeros = [role for role, how in reading.unfilled.items() if role == "d2t" and how.startswith("zeros")]
    if not zeros:
        return reading
    out = copy.copy(reading)
    out.unfilled = {role: how for role, how in reading.unfilled.items() if role not in zeros}
    return out


def _few(t: Any) -> str:
    vals = [f"{float(x):.4g}" for x in t.flatten()[:3]]
    return "[" + ", ".join(vals) + (", ...]" if t.numel() > 3 else "]")


# ----- a live run ----------------------------------------------------------------------------------------------

@dataclass
class Computed:
    """The installed engine's own compute of one drafter on the gate's inputs: its release, the compact record
    (``steps`` of the first inputs, or ``cannot_judge`` / ``raised`` / ``computes_nan`` / ``not_computed``), every
    logit of each run (``outputs``: per inputs, per step ``logits_step_K`` (T, V), ``fed_step_K``, ``tokens_step_K``)
    and the run's time, imports included."""

    engine: str
    version: str
    record: dict[str, Any]
    outputs: list[dict[str, Any]]
    seconds: float
    loading: dict[str, Any] | None = None  # the loading recording the same run made (live.record's)

    @property
    def said_by(self) -> str:
        return f"{self.engine} {self.version}'s own code"

    def logits(self, run: int = 0) -> list:
        out = self.outputs[run]
        return [out[f"logits_step_{k}"] for k in range(sum(1 for n in out if n.startswith("logits_step_")))]


def _write_inputs(path: Path, inputs: dict[str, Any]) -> None:
    write_safetensors(path, {name: from_numpy(t.detach().cpu().contiguous().numpy()) for name, t in inputs.items()})


def _read_outputs(path: Path) -> dict[str, Any]:
    import torch

    header = read_header(path, path.name)
    return {name: torch.from_numpy(load_array(entry).copy()) for name, entry in header.entries.items()}


def run_live(engine: str, python: str, checkpoint: Path, target_config: Path, runs: list[dict[str, Any]],
             steps: int, context_length: int | None = None, timeout: float | None = None) -> Computed:
    """The installed ``engine`` (for interpreter ``python``) builds and loads ``checkpoint`` as its recorder does and
    runs the drafter's own forward, ``steps`` draft steps, on each of ``runs`` (inputs as :func:`modelled` takes
    them), in one subprocess on CPU. Raises live.CannotJudge when the engine cannot be run at all."""
    import json
    import shutil
    import subprocess
    import tempfile
    import time

    release = version(engine, python)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="eagle3-compute-") as tmp:
        root = Path(tmp)
        (root / "target").mkdir()
        shutil.copyfile(target_config, root / "target" / "config.json")
        for i, inputs in enumerate(runs):
            _write_inputs(root / f"inputs-{i}.safetensors", inputs)
        entry: dict[str, Any] = {"name": "candidate", "dir": str(Path(checkpoint).resolve()),
                                 "target_config": "target/config.json", "why": "the candidate, computed live",
                                 "source_hash": "", "compute_steps": steps,
                                 "compute_inputs": [f"inputs-{i}.safetensors" for i in range(len(runs))],
                                 "compute_full": [f"full-{i}.safetensors" for i in range(len(runs))]}
        if context_length:
            entry["context_length"] = context_length
        (root / "manifest.json").write_text(json.dumps([entry]))
        command = [python, str(RECORDERS / f"record_{engine}.py"), str(root / "manifest.json"), str(root / "out"),
                   "--compute", str(root / "computed.json")]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout or TIMEOUT_S, env=_env(),
                                  cwd=tmp)
        except subprocess.TimeoutExpired:
            raise CannotJudge(f"{engine} {release}'s own compute ran past {timeout or TIMEOUT_S:.0f} s") from None
        except OSError as exc:
            raise CannotJudge(f"cannot run {python}: {exc}") from None
        path = root / "computed.json"
        if not path.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise CannotJudge(f"the recorder does not know {engine} {release}'s internals (it exited with "
                              f"{proc.returncode}): {tail[0][:300]}")
        record = json.loads(path.read_text())["checkpoints"]["candidate"]
        outputs = [_read_outputs(root / f"full-{i}.safetensors") for i in range(len(runs))
                   if (root / f"full-{i}.safetensors").is_file()]
        loading = root / "out" / "candidate.json"
        recorded = json.loads(loading.read_text()) if loading.is_file() else None
    return Computed(engine, release, record, outputs, time.time() - started, recorded)


def compare_live(computed: Computed, reading: Any, weights: Any, runs: list[dict[str, Any]], steps: int,
                 names: tuple[str, str] | None = None, embedding: Any = None) -> list[str]:
    """Where the gate's ``reading`` differs from the engine's own compute of the same ``runs``: every logit of every
    step compared as the forward level compares two readings (draft_steps.compare), later steps fed the engine's own
    drafts (``embedding``: what both embed with where the runs send no table). Empty when they agree; the record's
    outcome in words when the engine computed nothing comparable."""
    import torch

    from ..numerics.draft_steps import ForwardError, compare

    rec = computed.record
    names = names or (computed.said_by, f"the gate's {reading.engine} {reading.version} reading")
    if "steps" not in rec:
        return hold(reading, weights, rec, runs[0]) if runs else []
    out = []
    for i, (inputs, produced) in enumerate(zip(runs, computed.outputs, strict=False)):
        theirs = computed.logits(i)
        fed = {**inputs}
        if "later_tokens" not in fed and steps > 1:
            fed["later_tokens"] = torch.stack([produced[f"tokens_step_{k}"] for k in range(steps - 1)])
        try:
            got = modelled(_as_engine_runs(reading), weights, fed, steps, embedding)
        except ForwardError as exc:
            return [f"the gate's reading cannot run: {exc}"]
        bad = [d for d in (compare(a, b, k, names) for k, (a, b) in enumerate(zip(got.logits, theirs, strict=True)))
               if not d.ok]
        if bad:
            out.append((f"inputs {i}: " if len(runs) > 1 else "") + bad[0].describe())
    return out


def committed(root: Path, engine: str, version: str) -> dict[str, Any] | None:
    """The committed compute recording of a release (tests/conformance/computed/ENGINE-VERSION.json), or None."""
    import json

    path = root.joinpath(*COMPUTED_SUBDIR, f"{engine}-{version}.json")
    return json.loads(path.read_text()) if path.is_file() else None


__all__ = ["Computed", "Modelled", "committed", "compare_live", "disagreements", "hold", "inputs_for", "modelled",
           "recorder_inputs", "recorder_module", "run_live"]
