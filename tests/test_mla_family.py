"""The MLA drafter family: Kimi-K2.5 / K2.6 ``Eagle3DeepseekV2ForCausalLM``, DeepSeek multi-latent
attention in the EAGLE-3 layer (drafter/families/mla.py), as vLLM 0.33 (model_executor/models/deepseek_eagle3.py) and
SGLang 0.5.23 (srt/models/kimi_k25_eagle3.py) read it, against what its config states (the trainer reading).

Tiny drafters: hidden 64, 4 heads, q_lora_rank 48, kv_lora_rank 32, nope 16, rope 8, v 16 (example.TINY_MLA); the
Kimi-K2.5-sized one is written sparse (real header, zero-filled holes), as the header benchmark builds it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eagle3_checks.cli import main
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.config_values import read_target_config
from eagle3_checks.drafter.example import (
    KIMI_K2,
    KIMI_K25_MLA,
    TINY_MLA,
    MlaDrafterShape,
    drafter_files,
    mla_drafter_files,
    mla_target_config,
    write_checkpoint,
)
from eagle3_checks.drafter.expected import CONDITIONAL, OPTIONAL, REQUIRED, expected_tensors
from eagle3_checks.drafter.families import FAMILIES, LLAMA, MLA
from eagle3_checks.drafter.families.mla import MlaShape, expected_attention_shapes
from eagle3_checks.drafter.layout import FLAT, parse_name
from eagle3_checks.drafter.spec import resolve_reference
from eagle3_checks.engines import profile, read
from eagle3_checks.gate import FAILED, PASSED, SKIPPED, GateResult, gate, parse_options
from eagle3_checks.storage.safetensors import RawTensor, from_numpy
from helpers import SGLANG, assert_golden, status, wording
from helpers import VLLM as VLLM_NEW

VLLM, SG23, SG06 = f"vllm@{VLLM_NEW}", f"sglang@{SGLANG}", "sglang@0.5.6"


class Mla:
    """An MLA drafter being prepared in a tmp dir: edit ``tensors`` / ``config``, then ``write()``."""

    def __init__(self, root: Path, shape: MlaDrafterShape = TINY_MLA, sparse: bool = False) -> None:
        self.root, self.shape = root, shape
        self.tensors, self.config = mla_drafter_files(shape, sparse=sparse)

    def write(self) -> Path:
        return write_checkpoint(self.root, self.tensors, self.config)


@pytest.fixture
def mla(tmp_path: Path):
    counter = iter(range(1000))

    def make(shape: MlaDrafterShape = TINY_MLA, **kw: Any) -> Mla:
        return Mla(tmp_path / f"mla-{next(counter)}", shape, **kw)

    return make


@pytest.fixture
def mla_target(tmp_path: Path) -> Path:
    p = tmp_path / "mla-target.json"
    p.write_text(json.dumps(mla_target_config()))
    return p


def run(path: Path, **options: Any) -> GateResult:
    options.setdefault("reference", "none")
    options.setdefault("aux_convention", "sglang")
    return gate(path, parse_options(**options))




def messages(result: GateResult, check_id: str, engine: str | None = None) -> str:
    return " | ".join(f"{f.message} {f.why or ''}" for f in result.result(check_id, engine).findings)


def found(result: GateResult, check_id: str, engine: str | None = None) -> list[tuple[str | None, str | None]]:
    """(code, key) of each of one check's findings."""
    return [(f.code, f.key) for f in result.result(check_id, engine).findings]


def failing(result: GateResult) -> dict[str, list[str]]:
    return {r.label: [f.message for f in r.findings] for r in result.results if r.status == FAILED}


# ----- the family: roles, expected shapes from the config -------------------------------------------------------

def test_the_family_is_chosen_from_the_config_or_the_tensors(mla, drafter):
    d = mla()
    assert open_checkpoint(d.write()).family == MLA
    d.config["architectures"] = ["Eagle3DeepseekV3ForCausalLM"]  # vLLM's alias
    assert open_checkpoint(d.write()).family == MLA
    d.config["architectures"] = ["LlamaForCausalLMEagle3"]  # still its MLA fields (kv_lora_rank)
    assert open_checkpoint(d.write()).family == MLA
    assert open_checkpoint(drafter("flat").write()).family == LLAMA
    assert open_checkpoint(drafter("speculators").write()).family == LLAMA
    assert set(FAMILIES) == {LLAMA, MLA}


def test_mla_tensors_have_roles_only_in_an_mla_layer():
    assert parse_name("midlayer.self_attn.kv_b_proj.weight", MLA).role == "layers.0.self_attn.kv_b_proj.weight"
    assert parse_name("midlayer.self_attn.kv_b_proj.weight").role is None  # a Llama layer has no such tensor
    assert parse_name("midlayer.self_attn.k_proj.weight", MLA).role is None


def test_the_first_layer_takes_2h_and_later_layers_h():
    """The first layer's input is input_layernorm(embeds) ‖ hidden_norm(h): q_a_proj and kv_a_proj_with_mqa take
    2H (vLLM deepseek_eagle3.py:82; SGLang kimi_k25_eagle3.py:118-124); later layers H."""
    from eagle3_checks.drafter.config_values import read_config

    _, cfg = mla_drafter_files(replace(TINY_MLA, num_layers=2))
    exp = expected_tensors(read_config(cfg, FLAT))
    assert exp["layers.0.self_attn.q_a_proj.weight"].shape == (48, 128)
    assert exp["layers.0.self_attn.kv_a_proj_with_mqa.weight"].shape == (40, 128)
    assert exp["layers.0.self_attn.q_a_proj.weight"].dims == "(q_lora_rank, 2H)"
    assert exp["layers.1.self_attn.q_a_proj.weight"].shape == (48, 64)
    assert exp["layers.1.self_attn.kv_a_proj_with_mqa.weight"].shape == (40, 64)
    assert "layers.1.hidden_norm.weight" not in exp and exp["layers.1.input_layernorm.weight"].shape == (64,)


def test_the_kimi_k25_shapes_are_the_readmes_worked_example():
    """The numbers the README works through, from drafter.families.mla.expected_attention_shapes (the one source)."""
    from eagle3_checks.drafter.config_values import read_config

    _, cfg = mla_drafter_files(KIMI_K25_MLA, sparse=True)
    exp = {role: e.shape for role, e in expected_tensors(read_config(cfg, FLAT)).items()}
    p = "layers.0.self_attn."
    assert exp[p + "q_a_proj.weight"] == (1536, 14336)
    assert exp[p + "q_a_layernorm.weight"] == (1536,)
    assert exp[p + "q_b_proj.weight"] == (12288, 1536)  # 64 x (128 + 64)
    assert exp[p + "kv_a_proj_with_mqa.weight"] == (576, 14336)  # 512 + 64
    assert exp[p + "kv_a_layernorm.weight"] == (512,)
    assert exp[p + "kv_b_proj.weight"] == (16384, 512)  # 64 x (128 + 128)
    assert exp[p + "o_proj.weight"] == (7168, 8192)  # 64 x 128
    assert exp["fc.weight"] == (7168, 21504) and exp["lm_head.weight"] == (163840, 7168)
    shape = MlaShape.from_config(cfg)
    assert {k: v for k, v in expected_attention_shapes(shape, 7168, 14336).items()} == \
        {k[len(p):]: v for k, v in exp.items() if k.startswith(p)}


def _attention_roles() -> list[str]:
    from eagle3_checks.drafter.config_values import read_config

    _, cfg = mla_drafter_files()
    return [role for role, e in expected_tensors(read_config(cfg, FLAT)).items() if e.presence != OPTIONAL]


@pytest.mark.parametrize("role", _attention_roles())
def test_every_expected_tensor_missing_is_caught(mla, role):
    d = mla()
    name = "midlayer." + role[len("layers.0."):] if role.startswith("layers.0.") else role
    del d.tensors[name]
    result = run(d.write(), level="header")
    assert status(result, "keys") == FAILED and ("keys/missing-tensor", name) in found(result, "keys")


@pytest.mark.parametrize("role", _attention_roles())
def test_every_expected_tensor_mis_shaped_is_caught(mla, role):
    d = mla()
    name = "midlayer." + role[len("layers.0."):] if role.startswith("layers.0.") else role
    t = d.tensors[name]
    import numpy as np

    dims = (t.shape[0] + 2, *t.shape[1:])
    d.tensors[name] = from_numpy(np.zeros(dims, np.int64 if t.dtype == "I64" else np.float32),
                                 t.dtype if t.dtype in ("I64", "BOOL") else "BF16") if t.dtype != "BOOL" else \
        from_numpy(np.zeros(dims, bool))
    result = run(d.write(), level="header")
    caught = {c for c in ("shapes", "vocab.d2t", "vocab.t2d", "config.vocab-sizes", "config.aux-layers")
              if status(result, c) == FAILED}
    assert caught, failing(result)
    if role.startswith("layers."):
        assert status(result, "shapes") == FAILED and ("shapes/mismatch", name) in found(result, "shapes")


def test_an_extra_or_wrong_variant_tensor_is_caught(mla):
    d = mla()
    d.tensors["midlayer.self_attn.q_proj.weight"] = d.tensors["midlayer.self_attn.q_b_proj.weight"]
    result = run(d.write(), level="header")
    assert status(result, "keys") == FAILED
    assert ("keys/unexpected-layer-tensor", "midlayer.self_attn.q_proj.weight") in found(result, "keys")
    assert status(result, "engine.loads", VLLM) == FAILED  # vLLM raises for a q_proj beside q_a/q_b


# ----- the structural checks run (not skip) on MLA drafters -------------------------------------------------------

def test_the_structural_checks_run_on_an_mla_drafter(mla):
    path = mla().write()
    ref = path.parent / "ref.json"
    assert main(["spec", str(path), "-o", str(ref)]) == 0
    result = run(path, reference=str(ref), level="header", engine="vllm,sglang")
    for check_id in ("keys", "shapes", "config.head-dim", "config.rope", "reference.diff", "config.fields",
                     "config.architectures"):
        assert status(result, check_id) == PASSED, (check_id, result.result(check_id).reason, failing(result))
    assert found(result, "config.head-dim") == [("config.head-dim/mla-head-dims", "qk_nope_head_dim")]
    # MLA heads: q and k 16 + 8 = 24 wide
    assert_golden("test_mla_family/test_the_structural_checks_run_on_an_mla_drafter.txt",
                  wording(result.result("config.head-dim").findings))
    spec = json.loads(ref.read_text())
    assert spec["config"]["kv_lora_rank"] == 32 and spec["config"]["head_dim"] is None
    assert result.exit_code == 0


@pytest.mark.parametrize("field", ["q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                   "v_head_dim"])
def test_each_mla_field_is_checked(mla, field):
    d = mla()
    del d.config[field]
    result = run(d.write(), level="header")
    assert status(result, "config.fields") == FAILED
    assert found(result, "config.fields") == [("config.fields/mla-field-missing", field)]
    d.config[field] = "wide"
    result = run(d.write(), level="header")
    assert status(result, "config.fields") == FAILED
    [f] = result.result("config.fields").findings
    assert (f.code, f.key, f.found) == ("config.fields/invalid-field", field, "'wide'")


def test_an_odd_rope_width_and_a_yarn_without_factor_are_caught(mla):
    d = mla()
    d.config["qk_rope_head_dim"] = 7
    [f] = run(d.write(), level="header").result("config.fields").findings
    assert (f.code, f.key, f.found) == ("config.fields/mla-rope-odd", "qk_rope_head_dim", "7")
    d = mla()
    del d.config["rope_scaling"]["factor"]
    result = run(d.write(), level="header", engine="vllm,sglang")
    assert status(result, "config.rope") == FAILED
    assert found(result, "config.rope") == [("config.rope/mla-yarn-factor", "rope_scaling.factor")]
    assert status(result, "engine.loads", VLLM) == FAILED  # KeyError at load (deepseek_v2.py:1115-1136)


def test_mla_fields_under_a_llama_class_are_an_architecture_error(mla):
    d = mla()
    d.config["architectures"] = ["LlamaForCausalLMEagle3"]
    result = run(d.write(), level="header", engine="vllm,sglang")
    assert status(result, "config.architectures") == FAILED
    finding = result.result("config.architectures").findings[0]
    assert finding.code == "config.architectures/mla-class"
    assert finding.patch == ({"op": "add", "path": "/architectures", "value": ["Eagle3DeepseekV2ForCausalLM"]},)
    assert status(result, "engine.loads", VLLM) == FAILED
    [q_a] = [f for f in result.result("engine.loads", VLLM).findings if f.key == "midlayer.self_attn.q_a_proj.weight"]
    assert q_a.code == "engine.loads/refused"
    # the class names no MLA drafter class; vLLM raises for q_a_proj.weight
    assert_golden("test_mla_family/test_mla_fields_under_a_llama_class_are_an_architecture_error.txt",
                  wording([finding, q_a]))


# ----- Done when: the Kimi-K2.5-sized drafter, header level, both engines -----------------------------------------

def test_done_kimi_k25_mla_passes_both_engines_at_header_level_against_its_shipped_spec(mla):
    path = mla(KIMI_K25_MLA, sparse=True).write()
    # auto picks the published drafter's spec for its own target family only (test_auto_reference_never_crosses_
    # families); without a target config the spec is named
    result = run(path, reference="kimi-k2.5-mla-eagle3", level="header", engine="vllm,sglang")
    assert result.exit_code == 0, failing(result)
    assert result.reference_name == "kimi-k2.5-mla-eagle3"
    assert status(result, "reference.diff") == PASSED
    for spec in (VLLM, SG23):
        for check_id in ("engine.loads", "engine.semantics", "engine.serving"):
            assert status(result, check_id, spec) == PASSED, (check_id, spec, failing(result))
    assert main(["check", str(path), "--engine", "vllm,sglang", "--level", "header", "--aux-convention", "sglang",
                 "-q"]) == 0


def test_done_kimi_k25_with_null_q_lora_rank_fails_sglang_and_vllm_each_saying_why(mla, capsys):
    """One might expect this drafter to pass vLLM (DeepseekV2MLAAttention builds q_proj when q_lora_rank is null,
    vLLM 0.33.0 model_executor/models/deepseek_v2.py:1090-1097). vLLM 0.33.0's own loader, run on CPU, refuses it
    (tests/conformance/recorded/vllm-0.33.0/mla-q-proj-flat.json): deepseek_eagle3.py:258-267 maps every
    .kv_a_proj_with_mqa into fused_qkv_a_proj, which only the q_lora_rank attention builds (deepseek_v2.py:1051-1064),
    and AutoWeightsLoader raises (utils.py:441-448). SGLang 0.5.23 raises in the constructor (kimi_k25_eagle3.py:
    113-117). So it fails on both, each saying why."""
    path = mla(replace(KIMI_K25_MLA, q_lora_rank=None), sparse=True).write()
    assert "midlayer.self_attn.q_proj.weight" in open_checkpoint(path).tensors
    on_sglang = run(path, reference="auto", level="header", engine="sglang")
    assert on_sglang.exit_code == 1
    assert status(on_sglang, "engine.loads", SG23) == FAILED
    assert [f.code for f in on_sglang.result("engine.loads", SG23).findings] == ["engine.loads/refused"]
    on_vllm = run(path, reference="auto", level="header", engine="vllm")
    assert on_vllm.exit_code == 1
    assert status(on_vllm, "engine.loads", VLLM) == FAILED
    assert [f.code for f in on_vllm.result("engine.loads", VLLM).findings] == ["engine.loads/refused"]
    for result in (on_vllm, on_sglang):  # the engine-independent checks pass: the drafter itself is consistent
        for check_id in ("keys", "shapes", "config.fields", "config.head-dim", "config.rope"):
            assert status(result, check_id) == PASSED, (check_id, failing(result))
    # the shipped spec is of the q_lora kind: not chosen for the q_proj kind, said why
    assert status(on_vllm, "reference.diff") == SKIPPED
    for engine in ("vllm", "sglang"):
        assert main(["check", str(path), "--engine", engine, "--level", "header", "--aux-convention", "sglang"]) == 1
    out = capsys.readouterr().out
    # why each engine refuses it (SGLang: "Eagle3 MLA layer requires q_lora_rank in the draft config"; vLLM:
    # kv_a_proj_with_mqa mapped into fused_qkv_a_proj), what config.fields notes of q_proj, the reading's source of
    # it, why the shipped spec is not the reference, and the errors of the two reports
    assert_golden("test_mla_family/test_done_kimi_k25_with_null_q_lora_rank_fails_sglang_and_vllm_each_saying_why.txt",
                  f"engine.loads[{SG23}]:\n" + wording(on_sglang.result("engine.loads", SG23).findings)
                  + f"engine.loads[{VLLM}]:\n" + wording(on_vllm.result("engine.loads", VLLM).findings)
                  + "config.fields:\n" + wording(on_vllm.result("config.fields").findings)
                  + f"{VLLM} reading, mla: {read(open_checkpoint(path), VLLM).sources['mla']}\n"
                  + f"reference.diff skipped: {on_vllm.result('reference.diff').reason}\n"
                  + "the reports' errors:\n" + "".join(line.strip() + "\n" for line in out.splitlines()
                                                       if line.strip().startswith("ERROR:")))


def test_the_q_proj_variant_runs_where_the_attention_is_all_that_is_read(mla):
    """Without kv_a_proj_with_mqa's remapping in the way (the trainer reading, transformers' DeepseekV3Attention), the
    q_proj variant computes: the forward pass of its own trainer reading runs, and vLLM's attention constructor would
    build it; only the loaders stop it (above)."""
    from eagle3_checks.engines import trainer

    d = mla(replace(TINY_MLA, q_lora_rank=None))
    ckpt = open_checkpoint(d.write())
    t = trainer(ckpt)
    assert t.servable and t.mla.q_lora_rank is None and "layers.0.self_attn.q_proj.weight" in t.tensors


# ----- Done when: the tiny MLA drafter passes every level ---------------------------------------------------------

def test_done_the_tiny_mla_drafter_passes_every_level(mla, mla_target, capsys):
    path = mla().write()
    code = main(["check", str(path), "--level", "forward", "--engine", "vllm,sglang", "--aux-convention", "sglang",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)["checkpoints"][0]
    statuses = {c["id"] + (f"[{c['engine']}]" if c.get("engine") else ""): c["status"] for c in report["checks"]}
    assert code == 0, {k: v for k, v in statuses.items() if v == "failed"}
    for spec in (VLLM, SG23):
        assert statuses[f"forward.equivalence[{spec}]"] == "passed"
    assert statuses["scan.values"] == "passed"
    assert main(["check", str(path), "--level", "forward", "--engine", "vllm,sglang", "--aux-convention", "sglang",
                 "--target-config", str(mla_target), "-q"]) == 0


def test_the_forward_pass_sees_a_changed_mla_weight(mla, tmp_path):
    """forward.equivalence against --source: a kv_b_proj whose k and v halves are swapped per head computes something
    else (the names and shapes are right)."""
    import numpy as np

    src = mla().write()
    d = mla()
    name = "midlayer.self_attn.kv_b_proj.weight"
    w = np.frombuffer(d.tensors[name].data, dtype=np.uint16).reshape(4, 32, 32)
    swapped = np.concatenate([w[:, 16:], w[:, :16]], axis=1).reshape(128, 32).copy()
    d.tensors[name] = RawTensor("BF16", (128, 32), swapped.tobytes())
    result = run(d.write(), level="forward", engine="vllm", source=str(src))
    assert status(result, "forward.equivalence", VLLM) == FAILED
    [f] = result.result("forward.equivalence", VLLM).findings
    assert f.code == "forward.equivalence/differs"
    # why: layers.0.self_attn.kv_b_proj.weight differs from the source (the message's figures are float32 results:
    # not in the golden file)
    assert_golden("test_mla_family/test_the_forward_pass_sees_a_changed_mla_weight.txt", f.why + "\n")


# ----- the latent norms' eps, judged by its effect -------------------------------------------------------------------

def test_a_latent_eps_difference_within_the_forward_tolerance_is_a_note_on_both_engines(mla):
    """Both engines build q_a_layernorm / kv_a_layernorm with rms_norm_eps (VL/model_executor/models/deepseek_v2.py:
    1082, 1098; SG23/models/deepseek_v2.py:2077, 2163; read back from the built modules in the recordings
    mla-eps-1e-5-*-flat), transformers' DeepseekV3Attention (the trainer reading) with 1e-6 whatever the config says.
    At rms_norm_eps 1e-5 unit-RMS latents change by 4.5e-6 of their length, under the forward tolerance: a note, not
    an error. A second MLA difference (rope_interleave, which vLLM ignores) keeps the error."""
    d = mla(replace(TINY_MLA, rms_norm_eps=1e-5))
    result = run(d.write(), level="header", engine="vllm,sglang")
    for spec in (VLLM, SG23):
        assert status(result, "engine.semantics", spec) == PASSED, messages(result, "engine.semantics", spec)
        assert [f.code for f in result.result("engine.semantics", spec).findings] == \
            ["engine.semantics/latent-norm-eps"]
    d.config["rope_interleave"] = False
    both = run(d.write(), level="header", engine="vllm,sglang")
    assert [f.code for f in both.result("engine.semantics", VLLM).findings] == ["engine.semantics/mla"]
    assert [f.code for f in both.result("engine.semantics", SG23).findings] == ["engine.semantics/latent-norm-eps"]
    # ten times further off: unit-RMS latents change by 5e-5, beyond the tolerance: the error stays
    far = run(mla(replace(TINY_MLA, rms_norm_eps=1e-4)).write(), level="header", engine="vllm,sglang")
    for spec in (VLLM, SG23):
        assert [f.code for f in far.result("engine.semantics", spec).findings] == ["engine.semantics/mla"]


def test_the_forward_level_measures_the_latent_eps_effect_and_fails_only_beyond_the_tolerance(mla):
    """Measured on the tiny drafter (unit-scale random weights and inputs): eps 1e-5 against 1e-6 moves the logits by
    at most 8.6e-6 of the largest one (tolerance 1e-5: agrees); 1e-4 by 9.1e-5 (differs)."""
    near = run(mla(replace(TINY_MLA, rms_norm_eps=1e-5)).write(), level="forward", engine="vllm,sglang")
    far = run(mla(replace(TINY_MLA, rms_norm_eps=1e-4)).write(), level="forward", engine="vllm,sglang")
    for spec in (VLLM, SG23):
        assert [f.code for f in near.result("forward.equivalence", spec).findings] == ["forward.equivalence/agrees"]
        assert [f.code for f in far.result("forward.equivalence", spec).findings] == ["forward.equivalence/differs"]


# ----- the engines' disagreements on MLA drafters: each a passing and a failing checkpoint --------------------------

def test_sglang_0_5_6_has_no_mla_class(mla):
    result = run(mla().write(), level="header", engine="sglang@0.5.6")
    assert status(result, "engine.loads", SG06) == FAILED
    assert found(result, "engine.loads", SG06) == [("engine.loads/class-refused", "architectures")]
    # SGLang 0.5.6 has no MLA drafter class (the 0.5.6 wheel has no srt/models/kimi_k25_eagle3.py)
    assert_golden("test_mla_family/test_sglang_0_5_6_has_no_mla_class.txt",
                  wording(result.result("engine.loads", SG06).findings))
    assert profile(SG06).families == ("llama",) and profile(SG23).families == profile(VLLM).families == \
        ("llama", "mla")


def test_aux_count_top_level_ids_sglang_counts_them_vllm_does_not(mla):
    """SGLang 0.5.23 counts eagle_config's ids, else the top-level ones (kimi_k25_eagle3.py:48-59); vLLM 0.33
    num_aux_hidden_states, else eagle_config's ids, else 3 (deepseek_eagle3.py:189-194)."""
    import numpy as np

    d = mla()
    d.tensors["fc.weight"] = from_numpy(np.zeros((64, 256), np.float32), "BF16")  # four aux states
    del d.config["eagle_config"]
    d.config["eagle_aux_hidden_state_layer_ids"] = [1, 2, 3, 4]
    result = run(d.write(), level="header", engine="vllm,sglang")
    assert read(open_checkpoint(d.root), SG23).num_aux == 4 and read(open_checkpoint(d.root), VLLM).num_aux == 3
    assert status(result, "engine.loads", SG23) == PASSED
    assert status(result, "engine.loads", VLLM) == FAILED
    assert found(result, "engine.loads", VLLM) == [("engine.loads/refused", "fc.weight")]
    # fc.weight: shape (64, 256), vllm builds (64, 192)
    assert_golden("test_mla_family/test_aux_count_top_level_ids_sglang_counts_them_vllm_does_not.txt",
                  wording(result.result("engine.loads", VLLM).findings))
    del d.config["eagle_aux_hidden_state_layer_ids"]
    d.config["num_aux_hidden_states"] = 4
    result = run(d.write(), level="header", engine="vllm,sglang")
    assert status(result, "engine.loads", VLLM) == PASSED
    assert status(result, "engine.loads", SG23) == FAILED  # num_aux_hidden_states is not read: 3


def test_more_than_one_layer_vllm_builds_sglang_raises(mla):
    path = mla(replace(TINY_MLA, num_layers=2)).write()
    result = run(path, level="forward", engine="vllm,sglang")
    assert status(result, "engine.loads", VLLM) == PASSED and status(result, "forward.equivalence", VLLM) == PASSED
    assert status(result, "engine.loads", SG23) == FAILED
    assert found(result, "engine.loads", SG23) == [("engine.loads/refused", "num_hidden_layers")]
    # SGLang raises "EAGLE3 currently only supports 1 layer" (srt/models/kimi_k25_eagle3.py:243-244)
    assert_golden("test_mla_family/test_more_than_one_layer_vllm_builds_sglang_raises.txt",
                  wording(result.result("engine.loads", SG23).findings))


def test_norm_before_residual_vllm_reads_it_sglang_does_not(mla):
    d = mla()
    d.config["norm_before_residual"] = True
    result = run(d.write(), level="forward", engine="vllm,sglang")
    assert status(result, "engine.semantics", VLLM) == PASSED and status(result, "forward.equivalence", VLLM) == PASSED
    assert status(result, "engine.semantics", SG23) == FAILED
    [f] = result.result("engine.semantics", SG23).findings
    assert (f.code, f.key) == ("engine.semantics/norm-before-residual", "norm_before_residual")
    assert f.found.startswith("False ")  # SGLang reads it as False
    assert status(result, "forward.equivalence", SG23) == FAILED


def test_use_aux_norm_sglang_reads_it_vllm_does_not(mla):
    import numpy as np

    d = mla()
    d.config["use_aux_norm"] = True
    for i in range(3):
        d.tensors[f"fc_norm.{i}.weight"] = from_numpy(np.full(64, 1.5, np.float32), "BF16")
    result = run(d.write(), level="forward", engine="vllm,sglang")
    assert status(result, "engine.loads", SG23) == PASSED and status(result, "forward.equivalence", SG23) == PASSED
    assert status(result, "engine.loads", VLLM) == FAILED  # vLLM builds no fc_norm here: each refused
    assert found(result, "engine.loads", VLLM) == [("engine.loads/refused", f"fc_norm.{i}.weight") for i in range(3)]
    d.config["fc_norm"] = True  # the eagle3.1 variant's own flag: both engines read it
    d.config["norm_output"] = True
    result = run(d.write(), level="forward", engine="vllm,sglang")
    for spec in (VLLM, SG23):
        assert status(result, "engine.loads", spec) == PASSED and status(result, "engine.semantics", spec) == PASSED
        assert status(result, "forward.equivalence", spec) == PASSED, failing(result)
    assert read(open_checkpoint(d.root), VLLM).feedback == "normed" == read(open_checkpoint(d.root), SG23).feedback


def test_fc_bias_sglang_loads_it_vllm_drops_it(mla):
    import numpy as np

    d = mla()
    d.config["bias"] = True
    d.tensors["fc.bias"] = from_numpy(np.full(64, 0.3, np.float32), "BF16")
    result = run(d.write(), level="forward", engine="vllm,sglang")
    assert status(result, "engine.loads", SG23) == PASSED and status(result, "forward.equivalence", SG23) == PASSED
    assert status(result, "engine.loads", VLLM) == FAILED
    assert found(result, "engine.loads", VLLM) == [("engine.loads/dropped", "fc.bias")]
    # vllm drops 1 trained tensor(s): fc.bias
    assert_golden("test_mla_family/test_fc_bias_sglang_loads_it_vllm_drops_it.txt",
                  wording(result.result("engine.loads", VLLM).findings))
    assert status(result, "forward.equivalence", VLLM) == FAILED


def test_an_unknown_tensor_sglang_skips_with_a_warning_vllm_raises(mla):
    import numpy as np

    d = mla()
    d.tensors["midlayer.self_attn.extra_scale.weight"] = from_numpy(np.ones(4, np.float32), "BF16")
    path = d.write()
    result = run(path, level="header", engine="vllm,sglang")
    # SGLang serves without it, with a log line only (SG23/models/kimi_k25_eagle3.py:494-496): engine.loads fails
    assert status(result, "engine.loads", SG23) == FAILED
    assert [f.code for f in result.result("engine.loads", SG23).findings if f.severity.value == "error"] == \
        ["engine.loads/ignored-unknown"]
    assert status(result, "engine.loads", VLLM) == FAILED
    assert found(result, "engine.loads", VLLM) == [("engine.loads/refused", "midlayer.self_attn.extra_scale.weight")]
    # SGLang's log line (Eagle3 MLA: skipping unexpected weight); vLLM's MLA drafter has no such parameter and raises
    assert_golden("test_mla_family/test_an_unknown_tensor_sglang_skips_with_a_warning_vllm_raises.txt",
                  "sglang reading, ignored: "
                  + read(open_checkpoint(path), SG23).ignored["midlayer.self_attn.extra_scale.weight"] + "\n"
                  + wording(result.result("engine.loads", VLLM).findings))
    assert status(result, "keys") == FAILED  # engine-independent: not a tensor of this drafter


def test_a_null_target_hidden_size_vllm_fails_sglang_takes_hidden_size(mla):
    d = mla()
    d.config["target_hidden_size"] = None
    result = run(d.write(), level="header", engine="vllm,sglang")
    assert status(result, "engine.loads", SG23) == PASSED
    assert status(result, "engine.loads", VLLM) == FAILED
    assert found(result, "engine.loads", VLLM) == [("engine.loads/refused", "target_hidden_size")]
    # vLLM computes None x A for fc's input: TypeError at load
    assert_golden("test_mla_family/test_a_null_target_hidden_size_vllm_fails_sglang_takes_hidden_size.txt",
                  wording(result.result("engine.loads", VLLM).findings))


def test_only_one_of_the_fused_a_projections_leaves_both_unloaded_in_sglang(mla):
    d = mla()
    del d.tensors["midlayer.self_attn.q_a_proj.weight"]
    r = read(open_checkpoint(d.write()), SG23)
    # the tensor is dropped (it fuses q_a_proj with kv_a_proj_with_mqa only when both are present) and the parameter
    # left unfilled: each is a key of its table (a KeyError if not), with what is said of it in the golden file
    assert_golden("test_mla_family/test_only_one_of_the_fused_a_projections_leaves_both_unloaded_in_sglang.txt",
                  f"ignored midlayer.self_attn.kv_a_proj_with_mqa.weight: "
                  f"{r.ignored['midlayer.self_attn.kv_a_proj_with_mqa.weight']}\n"
                  f"unfilled layers.0.self_attn.kv_a_proj_with_mqa.weight: "
                  f"{r.unfilled['layers.0.self_attn.kv_a_proj_with_mqa.weight']}\n")


# ----- reference specs, convert ------------------------------------------------------------------------------------

def test_auto_reference_never_crosses_families(mla, tmp_path):
    """The Kimi-K2.5 MLA spec is chosen only for MLA drafters; the AQ-MedAI Llama-layer spec never for one. Both are
    published drafters' specs: chosen for a target of their family (here the DeepseekV3ForCausalLM text model both
    accept)."""
    target = read_target_config(mla_target_config(KIMI_K25_MLA), "target.json")
    kimi_mla = open_checkpoint(mla(KIMI_K25_MLA, sparse=True).write())
    spec, note = resolve_reference("auto", kimi_mla, target)
    assert spec is not None and spec.name == "kimi-k2.5-mla-eagle3", note
    tensors, cfg = drafter_files(KIMI_K2, FLAT, sparse=True)
    kimi_llama = open_checkpoint(write_checkpoint(tmp_path / "kimi-llama", tensors, cfg))
    spec, note = resolve_reference("auto", kimi_llama, target)
    assert spec is not None and spec.name == "aq-medai-kimi-k2-eagle3", note
    # an MLA drafter of the AQ-MedAI sizes (head_dim 128 = nope 64 + rope 64) is still not the Llama spec's family
    shape = replace(KIMI_K25_MLA, qk_nope_head_dim=64, draft_vocab_size=32000)
    spec, note = resolve_reference("auto", open_checkpoint(mla(shape, sparse=True).write()), target)
    # the note names the nearest spec only, and that is one of the same kind of layer (closest kimi-k2.5-mla-eagle3:
    # head_dim 128 vs 192)
    assert spec is None, note
    assert_golden("test_mla_family/test_auto_reference_never_crosses_families.txt", note + "\n", {"TMP": tmp_path})


def test_convert_refuses_an_mla_drafter_as_a_usage_error(mla, tmp_path, capsys):
    path = mla().write()
    assert main(["convert", str(path), str(tmp_path / "out"), "--to", "speculators"]) == 2
    assert not (tmp_path / "out").exists()
    # is an MLA drafter (Eagle3DeepseekV2ForCausalLM): speculators 0.9 has no MLA drafter, no layout to convert it to
    assert_golden("test_mla_family/test_convert_refuses_an_mla_drafter_as_a_usage_error.txt", capsys.readouterr().err,
                  {"TMP": tmp_path})


def test_presence_of_mla_tensors_is_required():
    from eagle3_checks.drafter.config_values import read_config

    _, cfg = mla_drafter_files()
    exp = expected_tensors(read_config(cfg, FLAT))
    assert {e.presence for r, e in exp.items() if ".self_attn." in r} == {REQUIRED}
    assert exp["d2t"].presence == CONDITIONAL


def test_the_forward_pass_matches_a_composition_of_transformers_deepseek_v3_modules(mla):
    """Step 0 of the MLA drafter as the forward level runs it (the trainer reading) against an independent
    composition: transformers 5's own DeepseekV3Attention (built for the 2H input, o_proj returning H) and
    DeepseekV3RMSNorm, DeepseekV3RotaryEmbedding (yarn, mscale = mscale_all_dim = 1), eager attention, the EAGLE-3
    layer written out by hand. Equal to float32 rounding."""
    import torch
    import transformers
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

    from eagle3_checks.engines import trainer
    from eagle3_checks.numerics.draft_steps import Weights, random_inputs
    from eagle3_checks.numerics.draft_steps import run as forward

    d = mla()
    ckpt = open_checkpoint(d.write())
    reading = trainer(ckpt)
    w = Weights(ckpt, "cpu")
    h, tokens = TINY_MLA.hidden_size, 12
    inputs = random_inputs(3 * h, h, TINY_MLA.vocab_size, tokens, seed=3)
    got = forward(reading, w, inputs, steps=1)[0]

    c = d.config
    conf = transformers.DeepseekV3Config(
        hidden_size=2 * h, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, rms_norm_eps=1e-6, rope_interleave=True,
        max_position_embeddings=c["max_position_embeddings"],
        rope_parameters={"rope_type": "yarn", "rope_theta": c["rope_theta"],
                         **{k: v for k, v in c["rope_scaling"].items() if k != "type"}})
    conf._attn_implementation = "eager"
    attn = m.DeepseekV3Attention(conf, layer_idx=0).float().eval()
    attn.o_proj = torch.nn.Linear(4 * 16, h, bias=False)
    with torch.no_grad():
        for name, p in attn.named_parameters():
            p.copy_(w.f32(f"midlayer.self_attn.{name}"))
    rotary = m.DeepseekV3RotaryEmbedding(conf)

    def norm(name: str):
        n = m.DeepseekV3RMSNorm(h, eps=1e-6)
        with torch.no_grad():
            n.weight.copy_(w.f32(name))
        return n

    lin = lambda x, name: x @ w.f32(name).T  # noqa: E731
    with torch.no_grad():
        hid = lin(inputs.aux_hidden_states, "fc.weight")
        e = w.f32("embed_tokens.weight")[inputs.input_ids]
        x = torch.cat([norm("midlayer.input_layernorm.weight")(e), norm("midlayer.hidden_norm.weight")(hid)], -1)
        cos, sin = rotary(x[None], inputs.position_ids[None])
        mask = torch.full((tokens, tokens), float("-inf")).triu(1)[None, None]
        hid = hid + attn(x[None], (cos, sin), mask)[0][0]
        x = norm("midlayer.post_attention_layernorm.weight")(hid)
        hid = hid + lin(torch.nn.functional.silu(lin(x, "midlayer.mlp.gate_proj.weight"))
                        * lin(x, "midlayer.mlp.up_proj.weight"), "midlayer.mlp.down_proj.weight")
        draft = lin(norm("norm.weight")(hid), "lm_head.weight")
        want = torch.full((tokens, TINY_MLA.vocab_size), float("-inf"))
        want[:, torch.arange(TINY_MLA.draft_vocab_size) + w.raw("d2t").to(torch.int64)] = draft
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got))
    err = (got[finite] - want[finite]).abs().max().item()
    scale = want[finite].abs().max().item()
    assert scale > 0.1 and err <= 1e-5 * scale, f"max abs error {err:.3g} at logit scale {scale:.3g}"
