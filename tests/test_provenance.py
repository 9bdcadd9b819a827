"""Provenance as data: each effective config value and each engine reading names the key it was read from, and
each refusal the config key or tensor it is about, so that checks and fixes never parse the words back."""

from __future__ import annotations

import pathlib
import re

from eagle3_checks import engines
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.config_values import Origin, read_config
from helpers import SGLANG, run


def test_a_stated_value_carries_its_key_path(drafter):
    d = drafter("speculators")
    cfg = open_checkpoint(d.write()).config
    v = cfg.entry("head_dim")
    assert (v.origin, v.key, v.explicit) == (Origin.FILE, "transformer_layer_config.head_dim", True)
    assert v.source == "config.json: transformer_layer_config.head_dim"
    ids = cfg.entry("aux_layer_ids")
    assert ids.key == "eagle_aux_hidden_state_layer_ids"
    count = cfg.entry("num_aux")  # counted from the ids: the key is where the ids are
    assert (count.origin, count.key, count.note) == (Origin.DERIVED, ids.key, "count")


def test_defaults_say_whose_default_they_are():
    cfg = read_config({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 512}, "flat")
    assert cfg.entry("head_dim").origin is Origin.DERIVED and cfg.entry("head_dim").key is None
    assert cfg.entry("max_position_embeddings").origin is Origin.CLASS_DEFAULT
    assert cfg.entry("norm_before_residual").origin is Origin.TRAINER_DEFAULT
    assert cfg.entry("draft_vocab_size").origin is Origin.DERIVED
    assert not cfg.entry("head_dim").explicit and cfg.entry("head_dim").source.startswith("default: ")


def test_an_invalid_value_keeps_its_key_and_says_so():
    cfg = read_config({"hidden_size": "64", "num_attention_heads": 4}, "flat")
    v = cfg.entry("hidden_size")
    assert (v.value, v.key, v.note, v.origin) == (None, "hidden_size", "invalid", Origin.FILE)
    assert v.source == "config.json: hidden_size (invalid)"


def test_a_reading_names_the_key_of_the_aux_ids_it_read(drafter):
    ckpt = open_checkpoint(drafter("flat").write())
    for spec in ("vllm@0.33.0", f"sglang@{SGLANG}"):
        reading = engines.read(ckpt, spec)
        key = reading.keys["aux_layer_ids"]
        node = ckpt.config_raw
        for part in key.split("."):
            node = node[part]
        assert node == reading.aux_layer_ids and reading.sources["aux_layer_ids"] == f"config.json: {key}"
        assert reading.keys["hidden_size"] == "hidden_size"


def test_a_refusal_names_its_tensor_and_the_finding_keys_on_it(drafter):
    d = drafter("flat")
    d.tensors["midlayer.self_attn.q_norm.weight"] = d.tensors["midlayer.input_layernorm.weight"]
    path = d.write()
    reading = engines.read(open_checkpoint(path), "vllm@0.33.0")
    (refusal,) = reading.refusals  # the one refusal: of the q_norm tensor (a Llama layer has no q/k norms)
    assert reading.refused_at[refusal] == "midlayer.self_attn.q_norm.weight"
    findings = run(path, engine="vllm").result("engine.loads").findings
    assert [f.key for f in findings if f.code == "engine.loads/refused"] == ["midlayer.self_attn.q_norm.weight"]


def test_a_layout_refusal_is_one_cause_of_what_follows(drafter):
    result = run(drafter("speculators").write(), engine=f"sglang@{SGLANG}", level="header")
    (f,) = result.result("engine.loads").findings
    assert f.key is None and f.cause == f"refusal: {f.found}"


def test_no_check_parses_provenance_prose_back():
    """The words of a source, a refusal or an engine note are for people: no module splits them to find a key."""
    package = pathlib.Path(engines.__file__).parents[1]
    offenders = [f"{p.relative_to(package)}:{n}" for p in package.rglob("*.py")
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"(source|sources\[[^]]*\]|refusal|problems\[0\]|note)\.(split|partition)\(", line)]
    assert offenders == []
