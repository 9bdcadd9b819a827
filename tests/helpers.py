"""The tests' shared helpers, in one module (conftest.py holds only fixtures): tiny drafters being edited (the defect
catalogue's Draft, written into a tmp dir), the gate run and its assertions, writing a catalogue defect, clean shapes,
the fuzz harness's every-command run, and the known peer refusals."""

from __future__ import annotations

import contextlib
import io
import json
import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings

from eagle3_checks import engines
from eagle3_checks.cli import main
from eagle3_checks.defects import LAYOUTS as LAYOUTS  # the tests' layouts: the catalogue's
from eagle3_checks.defects import Defect, Draft
from eagle3_checks.defects import inject as inject  # inject(d, NAME): a defect of the catalogue, in drafter d
from eagle3_checks.drafter.example import EXAMPLE, DrafterShape, drafter_files, target_config
from eagle3_checks.drafter.layout import FLAT, SPECULATORS
from eagle3_checks.gate import FAILED, GateResult, parse_options
from eagle3_checks.gate import gate as gate_path
from eagle3_checks.storage.safetensors import RawTensor, from_numpy, write_safetensors

# The newest release of each engine: what a bare `--engine vllm` judges (engines.newest). A test that is not about one
# release names these, so that a new default release changes its record and its recordings, not the tests.
VLLM = engines.newest("vllm").version
SGLANG = engines.newest("sglang").version

# ----- drafters and the gate ------------------------------------------------------------------------------------------


class Drafter(Draft):
    """A drafter being prepared in a tmp dir: the defect catalogue's :class:`Draft` (edit ``tensors`` / ``config``, or
    ``inject(d, NAME)`` a defect of the catalogue), then ``write()`` into ``root``.

    A flat one states nothing of who trained it: the gate can only say its trainer is unknown (and state what each
    candidate trainer would mean). ``trained=True`` makes it the example's speculators drafter flattened, with its
    speculators config kept beside it as ``config_speculators.json`` (``beside``, which a test may edit), as the
    embedded example and eagle3-checks convert have it."""

    def __init__(self, root: Path, layout: str = "speculators", shape: DrafterShape = EXAMPLE, seed: int = 0,
                 first_layer: str = "midlayer", trained: bool = False) -> None:
        super().__init__(layout, *drafter_files(shape, layout, seed, first_layer), shape)
        self.root = root
        self.beside: dict | None = drafter_files(shape, SPECULATORS, seed)[1] if layout == FLAT and trained else None

    def write(self, shards: int = 1) -> Path:
        path = self.save(self.root, shards)
        if self.beside is not None:
            (path / "config_speculators.json").write_text(json.dumps(self.beside, indent=2) + "\n")
        return path


def specforge_export(path: Path, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``trainer`` specforge@0.2.0 for a flat checkpoint that names no trainer (no speculators config
    beside it, none given): the engine tests' flat drafters are SpecForge 0.2.0's exports, which say nothing of it."""
    flat = "speculators_model_type" not in json.loads((Path(path) / "config.json").read_text())
    if flat and not (Path(path) / "config_speculators.json").exists() and not options.get("trainer"):
        return {**options, "trainer": "specforge@0.2.0"}
    return options


def run(path: Path, **options: Any) -> GateResult:
    options.setdefault("reference", "none")
    return gate_path(path, parse_options(**options))


# ----- the one of each: gate(), status(), codes(), cli() ---------------------------------------------------------

def gate(path: Path, engine: str, **options: Any) -> GateResult:
    """The header-level gate (unless ``level`` says otherwise) for ``engine``, a flat drafter that names no trainer
    taken as SpecForge 0.2.0's export (:func:`specforge_export`): the engine tests' gate."""
    options.setdefault("level", "header")
    return run(path, engine=engine, **specforge_export(path, options))


def _results(result: GateResult, check: str | None, engine: str | None) -> list:
    """One check's results (every check's: ``check`` None; ``engine`` then also keeps the engine-less checks), for
    ``engine``: a release (``sglang@0.5.23``) or an engine name."""
    def of(r) -> bool:
        return r.engine == engine or (r.engine or "").split("@")[0] == engine

    if check is None:
        return [r for r in result.results if engine is None or r.engine is None or of(r)]
    return [r for r in result.results if r.check.id == check and (engine is None or of(r))]


def status(result: GateResult, check: str, engine: str | None = None) -> str:
    """The status of one check (for ``engine``: its first result for that engine or release)."""
    return result.result(check, engine).status


def codes(result: GateResult, check: str | None = None, engine: str | None = None, *,
          failing: bool = False) -> set[str]:
    """The finding codes of a gate run: of every check, or of ``check`` (for ``engine``); ``failing``: only those
    that fail it."""
    return {f.code for r in _results(result, check, engine) for f in r.findings if f.code and
            (not failing or f.failing)}


def cli(capsys, *argv: Any) -> tuple[int, str, str]:
    """eagle3-checks ARGV in this process: (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def failing(result: GateResult) -> dict[str, list[str]]:
    """check id -> messages, for every failed check."""
    return {r.check.id: [f.message for f in r.findings] for r in result.results if r.status == FAILED}


def assert_fails(result: GateResult, check: str, *fragments: str) -> None:
    """``check`` failed, and one of its error findings mentions every fragment. ``check`` may be a finding code
    (``vocab.t2d/absolute-ids``): then one of that check's results (any engine's) failed with a finding of that code
    that fails the gate (an error; under --strict a warning too) and mentions every fragment."""
    check_id, _, slug = check.partition("/")
    if not slug:
        r = result.result(check_id)
        texts = [_text(f) for f in r.findings if f.severity.value == "error"]
        assert r.status == FAILED, f"{check_id} is {r.status}; failing: {failing(result)}"
        assert any(all(frag in t for frag in fragments) for t in texts), \
            f"{check_id} findings lack {fragments}:\n" + "\n".join(texts)
        return
    options = result.options
    results = [r for r in result.results if r.check.id == check_id]
    assert results and any(r.failed(options) for r in results), \
        f"{check_id} is {[r.status for r in results]}; failing: {failing(result)}"
    found = [f for r in results if r.failed(options) for f in r.findings if f.code == check
             and (f.severity.value == "error" or (f.severity.value == "warning" and options.fails(f.code)))]
    assert any(all(frag in _text(f) for frag in fragments) for f in found), \
        f"{check_id} has no failing {check} finding" + (f" mentioning {fragments}" if fragments else "") + ":\n" + \
        "\n".join(f"{f.code}: {_text(f)}" for r in results for f in r.findings)


def _text(f) -> str:
    return f"{f.message} | {f.file} | {f.key} | {f.expected} | {f.found} | {f.fix}"


def assert_clean(result: GateResult) -> None:
    assert result.exit_code == 0, failing(result)
    assert not [f for f in result.findings() if f.severity.value == "warning"], \
        [f.message for f in result.findings()]


# ----- the defect catalogue (eagle3_checks/defects.py): one defect each, written -------------------------------------

def write_defect(d: Drafter, defect: Defect) -> Path:
    """Write drafter ``d`` with one defect of the catalogue (in the shards it needs, its written files edited), and
    the speculators config beside it where ``d`` keeps one (:class:`Drafter` ``trained``)."""
    path = defect.write(d, d.root)
    if d.beside is not None:
        (path / "config_speculators.json").write_text(json.dumps(d.beside, indent=2) + "\n")
    return path


CLEAN = [
    ("example", EXAMPLE, 1),
    ("sharded", EXAMPLE, 3),
    ("no embed_tokens", replace(EXAMPLE, embed_tokens=False), 1),
    ("no t2d", replace(EXAMPLE, t2d=False), 1),
    ("full vocabulary", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size), 1),
    ("two layers", replace(EXAMPLE, num_layers=2), 1),
    ("biases", replace(EXAMPLE, attention_bias=True, mlp_bias=True), 1),
    ("norm_before_fc", replace(EXAMPLE, norm_before_fc=True), 1),
    ("fc_norm, 4 aux layers, wider target", replace(EXAMPLE, fc_norm=True, aux_layer_ids=(1, 2, 4, 6),
                                                  target_hidden_size=96), 2),
    ("qwen3 layer", replace(EXAMPLE, model_type="qwen3"), 1),
    ("fp16", replace(EXAMPLE, dtype="F16"), 1),
    ("fp32", replace(EXAMPLE, dtype="F32"), 1),
]


# ----- fuzzing: every command on one checkpoint -----------------------------------------------------------------------

FUZZ = settings(settings.get_profile("fuzz"), suppress_health_check=list(HealthCheck))  # its count: conftest.py


TIME_LIMIT_S = 20  # per example, all commands together; an example takes ~0.1 s


class Hang(BaseException):  # not an Exception: nothing under test may catch it
    pass


def _alarm(signum, frame):
    raise Hang(f"an example ran past {TIME_LIMIT_S} s")


def gate_everything(path: Path) -> None:
    """Every command that reads a checkpoint, on ``path``: exit codes 0/1/2 only, files untouched."""
    before = {p.name: p.read_bytes() for p in path.iterdir() if p.is_file() and not p.is_symlink()}
    # real UTF-8 streams (strict, as a terminal's or a pipe's): a report that cannot be encoded fails here
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            codes = {
                "check": main(["check", str(path), "--level", "scan", "--format", "json"]),
                "inspect": main(["inspect", str(path)]),
                "diff": main(["diff", str(path), "tiny-example"]),
            }
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out.flush(), err.flush()
    stdout, text = out.buffer.getvalue().decode(), out.buffer.getvalue().decode() + err.buffer.getvalue().decode()
    assert all(code in (0, 1, 2) for code in codes.values()), (codes, text[-3000:])
    assert "check crashed" not in text and "Traceback" not in text, \
        "\n".join(line for line in text.splitlines() if "crashed" in line or "Traceback" in line)
    if codes["check"] in (0, 1):  # a report: valid JSON
        report, _ = json.JSONDecoder().raw_decode(stdout)  # the check's report comes first
        assert report["checkpoints"][0]["exit_code"] == codes["check"]
    after = {p.name: p.read_bytes() for p in path.iterdir() if p.is_file() and not p.is_symlink()}
    assert before == after, "a command modified the checkpoint"


# ----- peers ----------------------------------------------------------------------------------------------------------

# vLLM 0.33 sizes fc from eagle_config ids or num_aux_hidden_states, never from a speculators config's top-level
# ids: a 4-aux speculators drafter fails to load there (see test_forward_peers).
VLLM_REFUSES = {"fc-norm-4-aux"}


# ----- an MLA drafter (DeepSeek-V3 attention in the example's layer) --------------------------------------------------

MLA = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


def mla_drafter(d, architectures=("Eagle3DeepseekV2ForCausalLM",)):
    """The example's globals with a DeepSeek-V3 (MLA) attention in its layer, as conformance/checkpoints.py builds
    the Kimi-K2.x drafter (vLLM 0.33 deepseek_eagle3.py, SGLang 0.5.23 kimi_k25_eagle3.py)."""
    h, heads, m = EXAMPLE.hidden_size, EXAMPLE.num_attention_heads, MLA
    d.tensors = {n: t for n, t in d.tensors.items() if not n.startswith("midlayer.self_attn.")}
    for name, shape in (("q_a_proj", (m["q_lora_rank"], 2 * h)), ("q_a_layernorm", (m["q_lora_rank"],)),
                        ("q_b_proj", (heads * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"]), m["q_lora_rank"])),
                        ("kv_a_proj_with_mqa", (m["kv_lora_rank"] + m["qk_rope_head_dim"], 2 * h)),
                        ("kv_a_layernorm", (m["kv_lora_rank"],)),
                        ("kv_b_proj", (heads * (m["qk_nope_head_dim"] + m["v_head_dim"]), m["kv_lora_rank"])),
                        ("o_proj", (h, heads * m["v_head_dim"]))):
        d.tensors[f"midlayer.self_attn.{name}.weight"] = from_numpy(np.full(shape, 0.02, np.float32), "BF16")
    d.config.update(architectures=list(architectures), model_type="kimi_k2", **MLA)
    for key in ("head_dim", "num_key_value_heads", "attention_bias", "mlp_bias", "rope_theta"):
        d.config.pop(key, None)
    return d


# ----- the forward command's files: inputs, and a target checkpoint ----------------------------------------------

def write_inputs(path, tokens=6, width=192, embeds=False, **override):
    rng = np.random.default_rng(0)
    arrays = {"aux_hidden_states": rng.standard_normal((tokens, width)).astype(np.float32),
              "input_ids": rng.integers(0, 512, tokens).astype(np.int64)}
    if embeds:
        arrays["inputs_embeds"] = rng.standard_normal((tokens, 64)).astype(np.float32)
    arrays.update(override)
    write_safetensors(path, {k: from_numpy(v) for k, v in arrays.items() if v is not None})
    return path


def write_target(path, embed: RawTensor, hidden: int = 64):
    """A target checkpoint: config.json, and two shards behind an index, embed_tokens in the second (a real target
    holds much more; only the index, that shard's header and the rows drafted are read)."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps(target_config(EXAMPLE)))
    write_safetensors(path / "model-00001-of-00002.safetensors",
                      {"model.norm.weight": from_numpy(np.ones(hidden, np.float32))})
    write_safetensors(path / "model-00002-of-00002.safetensors",
                      {"lm_head.weight": from_numpy(np.zeros((4, hidden), np.float32)),
                       "model.embed_tokens.weight": embed})
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.norm.weight": "model-00001-of-00002.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors",
        "model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}))
    return path


def load_conformance(stem: str):
    """The script conformance/STEM.py as a module. The conformance scripts are not package modules: each is loaded
    from its file, under a name its dataclasses can look up."""
    import importlib.util
    import sys

    name = f"conformance_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "conformance" /
                                                      f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def build_conformance_set(out: Path) -> dict[str, dict]:
    """conformance/checkpoints.py's checkpoint set written into ``out`` (empty or absent): name -> manifest entry."""
    Path(out).mkdir(parents=True, exist_ok=True)
    return {entry["name"]: entry for entry in load_conformance("checkpoints").build(out)}


# ----- golden files: wording lives there, tests assert codes ----------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden"


UPDATE_GOLDENS = False  # pytest --update-goldens (tests/conftest.py): rewrite the golden files instead of comparing


def goldens(stem: str) -> Callable[..., None]:
    """A test file's golden files: ``golden(TEST, TEXT, tmp_path=None)`` holds TEXT to tests/golden/STEM/TEST.txt (the
    run's tmp folder written <TMP>)."""
    def golden(test: str, text: str, tmp_path: Path | None = None) -> None:
        assert_golden(f"{stem}/{test}.txt", text, {"TMP": tmp_path} if tmp_path else None)
    return golden


def wording(findings: Iterable[Any], figures: bool = True) -> str:
    """The findings' words, for a golden file: each one's code and message, then its expected, found, why and fix
    (``figures`` False: their figures :func:`steady`)."""
    text = "".join(f"{f.code}: {f.message}\n" + "".join(f"  {k}: {v}\n" for k in ("expected", "found", "why", "fix")
                                                        if (v := getattr(f, k)))
                   for f in findings)
    return text if figures else steady(text)


def steady(text: str) -> str:
    """``text`` with what varies between runs written N: a live run's seconds, and the figures of a comparison of
    logits (numerics.draft_steps.StepDiff.describe: counts and differences of float32 forward passes, which another
    machine's BLAS may move in the last bit). The words, the step and the totals stay."""
    text = re.sub(r"own code \((live, )?\d+ s\b", r"own code (\1N s", text)
    text = re.sub(r"mismatched logits \d+ / (\d+) \([\d.]+%\)", r"mismatched logits N / \1 (N%)", text)
    text = re.sub(r"absolute difference \S+ at \(\d+, \d+\)", "absolute difference N at (N, N)", text)
    text = re.sub(r"relative difference [^;]+;", "relative difference N;", text)
    return re.sub(r"top-1 agreement \d+/", "top-1 agreement N/", text)


def assert_golden(name: str, text: str, paths: dict[str, Path] | None = None) -> None:
    """``text`` is tests/golden/NAME as committed; under ``pytest --update-goldens`` the file is rewritten instead
    (then review the diff, as pytest-regressions' --regen-all). The one golden-file helper of the suite. ``paths``:
    folders of this run, written in the golden file as <KEY> (longest first); the tool's version as VERSION, and the
    newest vLLM and SGLang releases as <VLLM> and <SGLANG> (what a bare --engine means), so that a new default release
    changes no golden file by hand."""
    from eagle3_checks import __version__

    for key, folder in sorted((paths or {}).items(), key=lambda kv: -len(str(kv[1]))):
        text = text.replace(str(folder), f"<{key}>")
    text = text.replace(f"eagle3-checks {__version__}", "eagle3-checks VERSION")
    for key, version in (("VLLM", VLLM), ("SGLANG", SGLANG)):  # a new default release: regenerated, not edited
        text = re.sub(rf"(?<![\d.]){re.escape(version)}(?!\.?\d)", f"<{key}>", text)
    path = GOLDEN / name
    if UPDATE_GOLDENS:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file: compare, then pytest --update-goldens"
