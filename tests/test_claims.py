"""A claim is evidence or it is not made: who trained a drafter, what each finding rests on, and a fix that writes
only what is known.

Drafters built by the real speculators 0.9.0 the way its train CLI builds them (peers/build_train_cli.py), flattened
for vLLM by a third party's script (speculators' own layer-config fields, the ids speculators wrote in both places,
the norm flags as trained, no provenance), are right for vLLM as they stand: the gate passes them, names their trainer
only on evidence (unknown here, never SpecForge), and fix changes none of what they were trained with. The project's
founding case (a Kimi-K2.5 drafter's hand-written flat config, its speculators config beside it) fails for vLLM on
norm_before_residual alone. SpecForge checkpoints are dated by their transformers_version.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from eagle3_checks import engines
from eagle3_checks.basis import BASES, KNOWN
from eagle3_checks.cli import main
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.example import EXAMPLE, KIMI_K2, drafter_files, write_checkpoint
from eagle3_checks.engines import trainers
from helpers import goldens, run
from peers.variants import TRAIN_CLI

golden = goldens("test_claims")  # tests/golden/test_claims/TEST.txt


# ----- what the real package writes: the record held to it -----------------------------------------------------

# written by transformers' PretrainedConfig for any config class (not the trainer's own)
GENERIC = {"architectures", "dtype", "tie_word_embeddings", "transformers_version"}


def test_what_speculators_writes_is_the_record(train_cli_drafters):
    """Every field speculators 0.9.0's save_pretrained wrote is in the record of what speculators writes, every field
    the record says 0.9.0 writes was written, and the train CLI's layer config carries its sliding window."""
    for v in TRAIN_CLI:
        written = json.loads((train_cli_drafters / v["name"] / "written.json").read_text())
        top = trainers.written("speculators", trainers.FIELD, "0.9.0") | \
            trainers.written("speculators", trainers.SERVED_FIELD, "0.9.0")
        assert set(written["fields"]) - GENERIC == top
        assert trainers.written("speculators", trainers.LAYER_FIELD, "0.9.0") - {"max_window_layers"} <= \
            set(written["layer_fields"])
        files = trainers.written("speculators", trainers.FILE, "0.9.0")
        assert {"config.py"} <= set(written["files"]) and "config.py" in files
        assert all(t.startswith(("layers.0.", "fc.", "norm.", "lm_head.", "embed_tokens.", "input_norm.", "d2t",
                                 "t2d")) for t in written["tensors"])


def test_a_field_both_trainers_write_is_no_evidence_for_either():
    both = {w.name for w in trainers.WRITES if w.trainer == "speculators"} & \
        {w.name for w in trainers.WRITES if w.trainer == "specforge"}
    assert {"use_sliding_window", "max_window_layers", "sliding_window"} <= both
    assert not both & set(trainers.only_by("speculators")) and not both & set(trainers.only_by("specforge"))
    assert set(trainers.only_by("specforge")) == {"training_state.pt"}


def test_specforges_own_export_is_never_taken_for_speculators(specforge_drafters):
    """What SpecForge 0.2.0's model class and SGLang exporter write holds none of what only speculators writes."""
    for folder in sorted(p for p in specforge_drafters.iterdir() if p.is_dir()):
        raw = json.loads((folder / "config.json").read_text())
        assert not set(raw) & set(trainers.only_by("speculators")), folder.name
        assert engines.identify(open_checkpoint(folder)).name is None, folder.name


# ----- drafters speculators trained, flattened by a third party ---------------------------------------------------

def flatten(src: Path, out: Path) -> Path:
    """What a third party's script makes of a speculators drafter for vLLM: the layer config's fields at the top
    level, LlamaForCausalLMEagle3, the ids speculators wrote in both places, the norm flags as trained, layers.0.
    named midlayer., nothing of where it came from."""
    from safetensors.numpy import load_file, save_file

    raw = json.loads((src / "config.json").read_text())
    flat = {k: v for k, v in raw["transformer_layer_config"].items()}
    ids = raw["eagle_aux_hidden_state_layer_ids"]
    flat.update({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": raw["draft_vocab_size"],
                 "eagle_aux_hidden_state_layer_ids": ids,
                 "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
                 **{k: raw[k] for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
                    if k in raw}})
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(flat, indent=2))
    tensors = load_file(str(src / "model.safetensors"))
    save_file({k.replace("layers.0.", "midlayer."): v for k, v in tensors.items()}, str(out / "model.safetensors"))
    return out


TRAINED_FIELDS = ("eagle_aux_hidden_state_layer_ids", "eagle_config", "norm_before_residual", "norm_before_fc",
                  "fc_norm", "norm_output", "rope_parameters", "sliding_window", "layer_types")


@pytest.mark.parametrize("name", [v["name"] for v in TRAIN_CLI])
def test_a_flattened_speculators_drafter_passes_vllm_and_fix_keeps_what_it_was_trained_with(train_cli_drafters,
                                                                                           tmp_path, name, capsys):
    src = train_cli_drafters / name
    third = flatten(src, tmp_path / "flat")
    target = train_cli_drafters / "verifier" / "config.json"
    result = run(third, engine="vllm", target_config=str(target), level="header")
    assert result.exit_code == 0, [(f.code, f.message) for f in result.findings() if f.failing]
    assert result.trainer["name"] in (None, "speculators")  # unknown, or speculators: never SpecForge
    assert not [f for f in result.findings() if f.severity.value == "error" and f.basis not in KNOWN]
    assert main(["fix", str(third), str(tmp_path / "fixed"), "--engine", "vllm", "--target-config", str(target)]) \
        in (0, 1)
    if (tmp_path / "fixed").exists():
        before = json.loads((third / "config.json").read_text())
        after = json.loads((tmp_path / "fixed" / "config.json").read_text())
        assert {k: after.get(k) for k in TRAINED_FIELDS} == {k: before.get(k) for k in TRAINED_FIELDS}


@pytest.mark.parametrize("name", [v["name"] for v in TRAIN_CLI])
def test_with_its_source_it_is_speculators_0_9_0_and_passes_the_forward_level(train_cli_drafters, tmp_path, name):
    pytest.importorskip("torch")
    src = train_cli_drafters / name
    third = flatten(src, tmp_path / "flat")
    result = run(third, engine="vllm", source=str(src), level="forward",
                 target_config=str(train_cli_drafters / "verifier" / "config.json"))
    said = result.trainer
    assert (said["name"], said["version"], said["basis"]) == ("speculators", "0.9.0", "read")
    assert said["how"].startswith("--source ")
    assert result.exit_code == 0, [(f.code, f.message) for f in result.findings() if f.failing]
    assert result.result("forward.equivalence", "vllm").status == "passed"


# ----- the founding case ---------------------------------------------------------------------------------------------

KIMI_K25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
            "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
                            "num_hidden_layers": 61, "vocab_size": 163840, "max_position_embeddings": 262144}}
HAND_WRITTEN = {  # after the AQ-MedAI reference: ids in eagle_config only, no norm flags
    "architectures": ["LlamaForCausalLMEagle3"],
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True},
    "attention_bias": False, "head_dim": 128, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
    "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 64, "num_hidden_layers": 1,
    "num_key_value_heads": 64, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 163840, "draft_vocab_size": 32000}


def same_bytes(a: Path, b: Path, chunk: int = 1 << 26) -> bool:
    """The two files hold the same bytes: compared wherever either holds data (SEEK_DATA), the holes of both being
    zeros (the Kimi-sized file is 3 GB of holes behind a real header)."""
    import os

    def extents(path: Path) -> list[tuple[int, int]]:
        out, pos, size = [], 0, path.stat().st_size
        with open(path, "rb") as fh:
            while pos < size:
                try:
                    start = os.lseek(fh.fileno(), pos, os.SEEK_DATA)
                except OSError:
                    break
                pos = os.lseek(fh.fileno(), start, os.SEEK_HOLE)
                out.append((start, pos))
        return out

    if a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        for start, end in sorted(extents(a) + extents(b)):
            fa.seek(start)
            fb.seek(start)
            for offset in range(start, end, chunk):
                n = min(chunk, end - offset)
                if fa.read(n) != fb.read(n):
                    return False
    return True


@pytest.fixture
def founding_case(tmp_path):
    """The seeds' Kimi-K2.5 drafter (Kimi-K2 sized, a sparse file): trained by speculators 0.9.0 with the train CLI's
    norm_before_residual true and ids [2, 30, 58], its flat config written by hand, its speculators config beside
    it as config_speculators.json."""
    tensors, _ = drafter_files(KIMI_K2, "flat", sparse=True)
    _, spec = drafter_files(KIMI_K2, "speculators", sparse=True)
    spec.update(norm_before_residual=True, eagle_aux_hidden_state_layer_ids=[2, 30, 58], speculators_version="0.9.0")
    spec["transformer_layer_config"]["rms_norm_eps"] = 1e-6
    path = write_checkpoint(tmp_path / "kimi-k25-eagle3", tensors, HAND_WRITTEN)
    (path / "config_speculators.json").write_text(json.dumps(spec, indent=2))
    target = tmp_path / "kimi-k25.json"
    target.write_text(json.dumps(KIMI_K25))
    return path, target


def test_the_founding_case_fails_vllm_on_norm_before_residual_alone(founding_case, tmp_path, capsys):
    path, target = founding_case
    result = run(path, engine="vllm", target_config=str(target), level="header")
    said = result.trainer
    assert (said["name"], said["version"], said["basis"]) == ("speculators", "0.9.0", "read")
    semantics = result.result("engine.semantics", "vllm")
    assert semantics.status == "failed"
    assert [(f.code, f.basis) for f in semantics.findings] == [("engine.semantics/norm-before-residual", "recorded")]
    # how the trainer was known, and what the finding expects: both from config_speculators.json
    golden("test_the_founding_case_fails_vllm_on_norm_before_residual_alone",
           f"trainer how: {said['how']}\nexpected: {semantics.findings[0].expected}\n", tmp_path)
    aux = result.result("engine.aux-layers", "vllm")  # vLLM's defaults (2, 30, 58) on 61 layers are the trained ids
    assert aux.status == "passed" and [f.code for f in aux.findings] == ["engine.aux-layers/default-matches"]
    assert aux.findings[0].patch  # the explicit top-level list, offered
    code = main(["fix", str(path), str(tmp_path / "fixed"), "--engine", "vllm", "--target-config", str(target),
                 "--level", "header"])  # the sparse file's zero weights would fail the scan level
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed == {**HAND_WRITTEN, "norm_before_residual": True} and code == 0
    assert same_bytes(path / "model.safetensors", tmp_path / "fixed" / "model.safetensors")  # a config-only fix
    assert (tmp_path / "fixed" / "config_speculators.json").exists()
    after = run(tmp_path / "fixed", engine="vllm", target_config=str(target), level="header")
    assert after.exit_code == 0


# ----- SpecForge dated by its transformers_version ----------------------------------------------------------------

def aq_like(tmp_path, transformers_version: str, rope_scaling=None) -> Path:
    tensors, _ = drafter_files(EXAMPLE, "flat")
    _, flat = drafter_files(EXAMPLE, "flat")
    flat.update(transformers_version=transformers_version, rope_scaling=rope_scaling, max_window_layers=48,
                use_sliding_window=False)
    return write_checkpoint(tmp_path / f"aq-{transformers_version}", tensors, flat)


def test_a_specforge_checkpoint_dated_before_pr_270_was_trained_with_base_10000(tmp_path):
    """transformers 4.53.2 is what SpecForge pinned until 2025-07-31 (3234e24a, tag v0.1.0), before PR #270
    (d3472dde, 2025-10-30) built the rotary embedding with rope_theta: trained with base 10000, served with 1e6."""
    result = run(aq_like(tmp_path, "4.53.2"), engine="vllm,sglang", level="header", trainer="specforge")
    said = []
    for spec in ("vllm", "sglang"):
        (f,) = [f for f in result.result("engine.semantics", spec).findings if f.code == "engine.semantics/rope-theta"]
        assert f.severity.value == "warning" and f.basis == "inferred"  # a dating, not a statement
        assert f.patch == ({"op": "add", "path": "/rope_theta", "value": 10000.0},)  # what it was trained with
        said += [f"{spec}: {f.message}", f"  settle: {f.settle}"]
    # the dating ("main until 2025-07-31 (transformers 4.53.2)", base 10000.0) and what settles it (--data)
    golden("test_a_specforge_checkpoint_dated_before_pr_270_was_trained_with_base_10000", "\n".join(said) + "\n",
           tmp_path)
    unknown = run(aq_like(tmp_path, "4.53.2"), engine="vllm", level="header")  # without --trainer: still said
    assert unknown.trainer["name"] is None
    assert "engine.semantics/rope-theta" in {f.code for f in unknown.result("engine.semantics", "vllm").findings}


def test_a_pin_whose_span_straddles_the_fix_states_both_readings(tmp_path):
    """transformers 4.55.2 was pinned from 2025-08-24 to 2025-11-04 (bf757f51): PR #270 landed inside it."""
    result = run(aq_like(tmp_path, "4.55.2"), engine="vllm", level="header", trainer="specforge")
    (f,) = result.result("config.trainer-release").findings
    assert f.code == "config.trainer-release/unknown-release" and f.basis == "inferred"
    # both readings: "main from 2025-10-30 to 2025-11-04 (transformers 4.55.2) 1000000.0", "main from 2025-08-24 to
    # 2025-10-30 (transformers 4.55.2) 10000.0"
    golden("test_a_pin_whose_span_straddles_the_fix_states_both_readings", f.message + "\n", tmp_path)


def test_a_trainer_inferred_from_its_own_file_still_states_both_readings(tmp_path):
    """training_state.pt is a file only SpecForge writes (the WRITES record): the trainer is inferred, not read, and
    the pin's span straddles PR #270, so both rope bases are stated, as a warning that names what would settle it."""
    path = aq_like(tmp_path, "4.55.2")
    (path / "training_state.pt").write_bytes(b"")
    result = run(path, engine="vllm", level="header")
    assert (result.trainer["name"], result.trainer["basis"]) == ("specforge", "inferred")
    (f,) = result.result("config.trainer-release").findings
    assert (f.code, f.severity.value, f.basis) == ("config.trainer-release/inferred", "warning", "inferred")
    # what it rests on (training_state.pt) and what would settle it (--trainer)
    golden("test_a_trainer_inferred_from_its_own_file_still_states_both_readings",
           f"rests on: {f.rests_on}\nsettle: {f.settle}\n", tmp_path)
    stated = run(path, engine="vllm", level="header", trainer="specforge")  # the trainer stated: its release is not
    codes = [g.code for g in stated.result("config.trainer-release").findings]
    assert codes == ["config.trainer-release/unknown-release"]


def test_dating_follows_the_fix_of_the_checkpoints_own_rope_kind():
    """A llama3 rope was fixed by PR #287 (2025-11-12), a null one by PR #270 (2025-10-30); under transformers 5
    every kind read 10000 until 1712b656 (2026-07-17)."""
    none = dict(trainers.dated("4.57.1", {"rope_scaling": None}))
    llama3 = trainers.dated("4.57.1", {"rope_scaling": {"rope_type": "llama3"}})
    assert all(not s["rope_base_10000"] for s in none.values())  # 2025-11-04 on: after #270
    assert {s["rope_base_10000"] for _, s in llama3} == {True, False}  # #287 landed inside the span
    v5 = trainers.dated("5.8.1", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert {s["rope_base_10000"] for _, s in v5} == {True, False}
    assert trainers.dated("4.28.1", {}) is None  # no SpecForge commit pinned it


# ----- what a finding rests on, and what fix applies -----------------------------------------------------------

def test_every_finding_states_a_basis_and_no_error_rests_on_an_inference(tmp_path):
    result = run(aq_like(tmp_path, "4.53.2"), engine="all", level="header")
    assert all(f.basis in BASES for f in result.findings())
    assert not [f for f in result.findings() if f.severity.value == "error" and f.basis not in KNOWN]


def test_fix_does_not_apply_what_rests_on_an_inference_until_it_is_stated(tmp_path, capsys):
    """The founding case without the file beside it: which trainer is unknown, so nothing it implies is written;
    --trainer states the premise and the fix applies."""
    src = aq_like(tmp_path, "4.53.2")
    assert main(["fix", str(src), str(tmp_path / "fixed"), "--engine", "vllm"]) == 0
    assert not (tmp_path / "fixed").exists()
    # fix's summary, before the gate's report: "nothing written", each patch "not applied: needs a premise stated"
    summary, _, _ = capsys.readouterr().out.partition("\n\n")
    golden("test_fix_does_not_apply_what_rests_on_an_inference_until_it_is_stated", summary + "\n", tmp_path)


def test_an_absolute_id_d2t_is_repaired_from_the_tensor_itself(drafter, tmp_path, capsys):
    from helpers import inject

    d = drafter("flat", trained=True)
    inject(d, "d2t-absolute")
    src = d.write()
    ids = np.asarray(open_checkpoint(src).values("d2t"))
    assert main(["fix", str(src), str(tmp_path / "fixed"), "--level", "header", "--engine", "vllm"]) == 0
    # fix's summary, before the gate's report: "repaired d2t (d2t-offsets)"
    summary, _, _ = capsys.readouterr().out.partition("\n\n")
    golden("test_an_absolute_id_d2t_is_repaired_from_the_tensor_itself", summary + "\n", tmp_path)
    fixed = open_checkpoint(tmp_path / "fixed")
    assert np.array_equal(np.asarray(fixed.values("d2t")), ids - np.arange(len(ids)))
    result = run(tmp_path / "fixed", level="header", engine="vllm")
    assert result.result("vocab.t2d").status == result.result("vocab.d2t").status == "passed"
    assert main(["fix", str(tmp_path / "fixed"), str(tmp_path / "again"), "--level", "header", "--engine", "vllm"]) == 0
    assert not (tmp_path / "again").exists()  # nothing left to fix


# ----- the trainer matrix: every modelled speculators release, from the record of what it writes ---------------

F32 = replace(EXAMPLE, dtype="F32")  # what safetensors' numpy reader reads back (no bfloat16 in numpy)


def release_config(version: str) -> dict:
    """The example's speculators config as speculators ``version`` writes it: only the fields that release writes
    (engines/trainers.py WRITES, read from its wheel), its speculators_version."""
    _, raw = drafter_files(F32, "speculators")
    own = {w.name for w in trainers.WRITES if w.trainer == "speculators" and w.kind in (trainers.FIELD,
                                                                                      trainers.SERVED_FIELD)}
    keep = trainers.written("speculators", trainers.FIELD, version) | \
        trainers.written("speculators", trainers.SERVED_FIELD, version)
    return {**{k: v for k, v in raw.items() if k not in own or k in keep}, "speculators_version": version}


@pytest.mark.parametrize("version", [r.version for r in engines.speculators.RELEASES])
def test_each_speculators_release_is_named_as_itself_and_flattened_is_never_taken_for_specforge(tmp_path, version,
                                                                                              target_path):
    tensors, _ = drafter_files(F32, "speculators")
    src = write_checkpoint(tmp_path / "src", tensors, release_config(version))
    found = engines.identify(open_checkpoint(src))
    assert (found.name, found.version, found.basis) == ("speculators", version, "read")
    third = flatten(src, tmp_path / "flat")
    result = run(third, engine="vllm", target_config=str(target_path), level="header")
    assert result.trainer["name"] in (None, "speculators")
    assert not [f for f in result.findings() if f.severity.value == "error" and f.basis not in KNOWN]
    assert main(["fix", str(third), str(tmp_path / "fixed"), "--engine", "vllm", "--target-config",
                 str(target_path)]) in (0, 1)
    if (tmp_path / "fixed").exists():
        before = json.loads((third / "config.json").read_text())
        after = json.loads((tmp_path / "fixed" / "config.json").read_text())
        assert {k: after.get(k) for k in TRAINED_FIELDS} == {k: before.get(k) for k in TRAINED_FIELDS}
    sourced = run(third, engine="vllm", target_config=str(target_path), level="header", source=str(src))
    assert (sourced.trainer["name"], sourced.trainer["version"]) == ("speculators", version)
