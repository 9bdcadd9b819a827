"""Where an engine's own recording of a checkpoint (``conformance/README.md`` describes its fields) and the gate's
modelled reading of it disagree, field by field: the committed recordings are held to the profiles with it
(``tests/test_conformance.py``), and a live recording of the candidate is (``engine.live``, ``live.verdict``). What a
recording means is engine knowledge: it lives here, beside the release records (a record's ``recorded_config`` names
what its recorder reads back that others do not)."""

from __future__ import annotations

from ..drafter.families.mla import effective
from .profile import Limit, Profile, Target
from .reading import AFTER_LOAD, Reading

# SGLang 0.5.23's MLA loader caches q_a_proj and kv_a_proj_with_mqa and loads their concatenation into
# fused_qkv_a_proj_with_mqa (srt/models/kimi_k25_eagle3.py:467-492): the recorder sees a tensor that is no checkpoint
# tensor go there, and the two it was made of as never loaded.
FUSED = ".fused_qkv_a_proj_with_mqa."
CONCATENATED = ("self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight")


def concatenated(rec: dict) -> set[str]:
    """The MLA tensors the loader cached and loaded as one concatenation (never under their own names)."""
    fused = any(FUSED in x["param"] for x in rec.get("loaded", {}).get("(not a checkpoint tensor)", []))
    return {n for n in rec.get("ignored", []) if fused and n.endswith(CONCATENATED)}


def _before_layer(layers: tuple[int, ...]) -> list[int]:
    """The profile's captured layers (outputs of X) as the recording counts them (inputs of layer X+1)."""
    return sorted(x + 1 for x in layers)


def left_unwritten(rec: dict, r: Reading) -> list[str]:
    """What the engine left unwritten that the drafter computes with (engine.live and the live verdict): not the
    pre-attention norm a later layer builds and never uses (Reading.idle_roles), and not a d2t kept at its initial
    state where the draft vocabulary is the target's (SGLang's hot_token_id left None, srt/models/
    llama_eagle3.py:350-353; vLLM before 0.31.0's zero-filled d2t, llama_eagle3.py:304-307 in 0.29.0): both mean
    draft id i = target id i."""
    identity = r.draft_vocab_size is not None and r.draft_vocab_size == r.vocab_size
    idle = r.idle_roles() - set(r.tensors) - set(r.unused)
    names = {u.get("role") or u["param"] for u in rec.get("unwritten", [])
             if not (identity and u.get("role") == "d2t")}
    return sorted(names - idle)


def disagreements(rec: dict, r: Reading, profile: Profile, target: Target | None, loaded: bool = True,
                  limit: Limit | None = None) -> list[str]:
    """Where the gate's reading ``r`` of a checkpoint (by ``profile``, the release's record) differs from what the
    engine recorded. ``loaded`` False: the
    engine's load stopped for a CPU-only reason after it had read the config and the aux ids (compare those only).
    ``limit``: engine.serving's verdict on the context the recording was made with (the profile's ``serving``); one
    that says the release refuses to start is a refusal like the reading's."""
    out: list[str] = []
    if not loaded:  # the engine stopped before anything the gate could refuse for: what it read up to there
        return _aux_and_config(rec, r, profile, target)
    engine_refused = rec["refused"] is not None
    refuses = [limit.message] if limit is not None and limit.refuses else []
    gate_refused = bool(r.refusals) or not r.layout_ok or bool(refuses)
    if engine_refused != gate_refused:
        said = f"{rec['refused']['type']}: {rec['refused']['message'][:160]}" if engine_refused else "loads"
        out.append(f"refused: the engine {said!r}; the gate {(r.refusals + refuses)[:1] or 'predicts it loads'}")
    if engine_refused or gate_refused:
        return out
    # SGLang keeps d2t as an attribute, hot_token_id, None without a d2t tensor: draft ids are target ids, which is
    # what a drafter without a draft vocabulary means (srt/models/llama_eagle3.py:350-353), not a parameter left out.
    unwritten = {u["role"] or u["param"] for u in rec["unwritten"]
                 if not (u.get("attribute") and r.draft_vocab_size == r.vocab_size)}
    # What the worker puts in place after the load (a tied lm_head is the embedding set_embed replaces) is the
    # profile's note, not a parameter the loader leaves; the norm a later layer builds and never uses may stay empty.
    filled = set(r.tensors) | set(r.unused)
    predicted = {role for role, how in r.unfilled.items() if not how.startswith(AFTER_LOAD)} | \
        (r.idle_roles() - filled)
    if unwritten != predicted:
        out.append(f"unwritten: the engine {sorted(unwritten)}, the gate {sorted(predicted)}")
    ignored, predicted = set(rec["ignored"]) - concatenated(rec), set(r.ignored)
    if ignored != predicted:
        out.append(f"ignored: the engine {sorted(ignored)}, the gate {sorted(predicted)}")
    narrowed = sorted(name for name, loads in rec["loaded"].items() if any(x["narrowed"] for x in loads))
    if narrowed != sorted(r.narrowed):
        out.append(f"narrowed: the engine {narrowed}, the gate {sorted(r.narrowed)}")
    return out + _aux_and_config(rec, r, profile, target)


def _aux_and_config(rec: dict, r: Reading, profile: Profile, target: Target | None) -> list[str]:
    """The target layers captured and the config values read, engine vs gate."""
    out = []
    capture = profile.capture(r.aux_layer_ids, target) if r.aux_layer_ids else profile.default_capture(target)
    if capture.last_id is not None and r.aux_layer_ids:  # ids past the last one capture nothing (engine.aux-layers)
        capture = profile.capture([i for i in r.aux_layer_ids if i <= capture.last_id], target)
    if rec["aux"]["requires_aux_hidden_states"] and capture.layers is not None:
        engine_layers = sorted(set(rec["aux"]["capture_before_layer"]))
        if engine_layers != _before_layer(capture.layers):
            out.append(f"aux: the engine captures before layers {engine_layers}, the gate "
                       f"{_before_layer(capture.layers)} ({capture.rule})")
    cfg = rec["config"]
    if any(c in (cfg.get("rope_scaling") or {}).get("class", "") for c in ("YaRN", "DeepseekScaling")):
        cfg = {k: v for k, v in cfg.items() if k != "max_position_embeddings"}  # the recorder read YaRN's original
    # the eps each norm was built with, read back from the modules (MLA attention only): the latent norms' and the
    # layer's own
    if cfg.get("norm_eps") and r.mla is not None:
        built = cfg["norm_eps"]
        latent = (effective(r.mla) or {}).get("latent_norm_eps")
        for norm in ("q_a_layernorm", "kv_a_layernorm"):
            if norm in built and built[norm] != latent:
                out.append(f"{norm} eps: the engine {built[norm]!r}, the gate {latent!r}")
        if built.get("input_layernorm") is not None and built["input_layernorm"] != r.rms_norm_eps:
            out.append(f"input_layernorm eps: the engine {built['input_layernorm']!r}, the gate {r.rms_norm_eps!r}")
    # the rows of lm_head: a tied one is the V-row embedding (SGLang llama_eagle3.py:303-304)
    head_rows = r.vocab_size if r.lm_head_from_embed else r.draft_vocab_size
    # an MLA drafter's heads are sized by its MLA fields: the head_dim the recorder read (its config class's default or
    # the attention's rotary width) is no value the gate's MLA reading computes with
    head_dim = cfg.get("head_dim") if r.family == "mla" else r.head_dim
    for field, value in (("head_dim", head_dim), ("num_aux", r.num_aux), ("fc_norm", r.fc_norm),
                         ("norm_before_fc", r.input_norm), ("norm_output", r.feedback == "normed"),
                         ("vocab_size", r.vocab_size), ("draft_vocab_size", head_rows),
                         ("target_hidden_size", r.target_hidden_size), ("num_hidden_layers", r.num_layers),
                         ("rope_theta", r.rope_theta), ("max_position_embeddings", r.max_position_embeddings)):
        if cfg.get(field) is not None and cfg[field] != value:
            out.append(f"{field}: the engine {cfg[field]!r}, the gate {value!r}")
    if "norm_before_residual" in profile.recorded_config and cfg.get("norm_before_residual") is not None \
            and cfg["norm_before_residual"] != r.norm_before_residual:
        out.append(f"norm_before_residual: the engine {cfg['norm_before_residual']!r}, the gate "
                   f"{r.norm_before_residual!r}")
    return out
