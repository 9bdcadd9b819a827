"""keys: the tensor names are the ones the layout's loaders look for, nothing missing, nothing extra."""

from __future__ import annotations

from collections.abc import Iterable

from ..drafter.expected import CONDITIONAL, OPTIONAL, expected_tensors, layers_to_judge
from ..drafter.layout import FLAT, PEAGLE, PEAGLE_TENSORS, SPECULATORS, on_disk_name, speculators_kind
from ..registry import PREFIX_CAUSE, Context, Finding, check, error, info, note, warning
from ._common import config_of, require_complete

_MISSING_WHY = ("vLLM raises nothing for a missing tensor and serves with uninitialised memory (norms stay "
                "ones); SGLang and speculators load it as random weights. Acceptance collapses silently.")
_UNEXPECTED_WHY = ("vLLM refuses an unknown tensor at load (\"There is no module or parameter named ...\") "
                   "while SGLang drops it silently, so the drafter runs without it.")


@check(
    "keys",
    "Tensor names match the layout: nothing missing, nothing unexpected",
    example="missing-up-proj",
    modelled_only=True,
    guards="Missing tensors that engines leave uninitialised without an error, a `model.` prefix, "
    "`midlayer.` vs `layers.0.` renames lost in conversion, tensors the config does not ask for.",
    evidence=("speculators #1114 / PR #1131 (rename lost: random weights, no error)",
              "SGLang PR #27908 (no lm_head: accept length 1.00)"),
    fix="name every tensor as the layout does (speculators: layers.N.*; flat: midlayer.*), without a `model.` "
    "prefix, and keep every tensor the config asks for",
    codes={
        "duplicate-tensor": "one tensor under two names",
        "unknown-tensor": "a tensor that is not part of an EAGLE-3 drafter",
        "model-prefix": "tensor names carry a `model.` prefix",
        "flat-names": "flat-layout (`midlayer.`) names in a speculators checkpoint",
        "layers-0-names": note("a flat checkpoint names its first layer `layers.0.*`"),
        "missing-tensor": "a tensor the config asks for is missing",
        "undeclared-bias": "a bias the config does not declare",
        "unneeded-d2t": "a d2t although the draft vocabulary is the target's",
        "unneeded-t2d": note("a t2d although the draft vocabulary is the target's"),
        "undeclared-input-norm": "an input_norm without norm_before_fc",
        "undeclared-fc-norm": "an fc norm without fc_norm",
        "undeclared-qk-norm": "q/k norms in layers configured without them",
        "unexpected-layer-tensor": "a layer tensor the configured decoder layer does not have",
        "unexpected-tensor": "any other tensor the config does not ask for",
    },
)
def keys(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    require_complete(ctx)
    ckpt = ctx.ckpt
    expected = expected_tensors(cfg, layers_to_judge(ckpt))
    layout = ckpt.layout
    file_of = {name: e.file for name, e in ckpt.tensors.items()}
    styles = {n.style for n in ckpt.names.values() if n.layer == 0 and n.style}
    style = "layers" if styles == {"layers"} else "midlayer"

    for role, names in sorted(ckpt.duplicate_roles.items()):
        yield error(
            f"{' and '.join(names)} are the same tensor ({role}) under two names",
            file=file_of[names[0]], key=names[0], expected="one name per tensor", found=", ".join(names),
            why="which copy an engine loads depends on file order; the other is dropped or refused",
            code="duplicate-tensor", fix=f"keep one of them, named {on_disk_name(role, layout, style)}",
        )

    prefixed, flat_names = [], []
    peagle = ckpt.layout == SPECULATORS and speculators_kind(ckpt.config_raw) == PEAGLE
    for name in sorted(ckpt.tensors):
        n = ckpt.names[name]
        if n.role is None and name in PEAGLE_TENSORS:
            if not peagle:
                yield warning(f"{name}: P-EAGLE's learned padding state, in a drafter whose config is not P-EAGLE's",
                              file=file_of[name], key=name, expected="no such tensor in an EAGLE-3 drafter",
                              found=name, code="unexpected-tensor",
                              why="vLLM skips mask_hidden with a warning (0.33.0 llama_eagle3.py:431-439, 0.34.0 "
                              ":421-426) and SGLang drops it: the drafter serves as EAGLE-3, drafting one position at "
                              "a time",
                              fix="remove it, or state the P-EAGLE config it was trained with (speculators_model_type "
                              "\"peagle\", mask_token_id) where an engine builds P-EAGLE")
            continue
        if n.role is None:
            yield error(
                f"{name}: not a tensor of an EAGLE-3 drafter",
                file=file_of[name], key=name, expected="no such tensor", found=name, why=_UNEXPECTED_WHY,
                code="unknown-tensor", fix="remove it, or fix its name if it is a renamed drafter tensor",
            )
            continue
        if n.prefixed:
            prefixed.append(name)
        elif layout == SPECULATORS and n.style == "midlayer":
            flat_names.append(name)
        if n.role not in expected:
            yield _unexpected(name, n.role, file_of[name], cfg)

    if prefixed:
        first = prefixed[0]
        yield error(
            f"{_count(prefixed)} carry a `model.` prefix: {_listing(prefixed)}",
            file=file_of[first], key=first, expected=on_disk_name(ckpt.names[first].role or first, layout, style),
            code="model-prefix", found=first, cause=PREFIX_CAUSE,
            why="vLLM prefixes drafter tensors with `model.` itself and fails on `model.model.*` (\"There is no "
            "module or parameter named ...\"); SGLang 0.5.6 accepts the prefix on layer tensors but silently "
            "drops `model.lm_head.weight` and serves with an uninitialised head",
            fix="rename every tensor without the leading `model.`",
        )
    if flat_names:
        first = flat_names[0]
        yield error(
            f"{_count(flat_names)} use flat-layout names in a speculators checkpoint: {_listing(flat_names)}",
            file=file_of[first], key=first, expected=on_disk_name(ckpt.names[first].role or first, layout, "layers"),
            code="flat-names", found=first,
            why="speculators loads non-strictly: the layer keeps its random initialisation and nothing is "
            "reported (speculators #1114)",
            fix="rename `midlayer.` to `layers.0.`, or convert the config to the flat layout too",
        )

    if layout == FLAT and styles == {"layers"}:
        yield info(
            "the first layer is named `layers.0.*`: vLLM maps both `midlayer.` and `layers.0.`; SGLang 0.5.6 "
            "reads only `midlayer.*`",
            code="layers-0-names", key="layers.0.*", expected="midlayer.* (both engines)", found="layers.0.*",
            fix="rename to `midlayer.*` when the drafter must also run on SGLang",
        )

    for role, exp in expected.items():
        if exp.presence == OPTIONAL or ckpt.has(role):
            continue
        because = f" ({exp.reason})" if exp.presence == CONDITIONAL else ""
        yield error(
            f"{on_disk_name(role, layout, style)} is missing{because}",
            code="missing-tensor", file=ckpt.weight_files[0] if len(ckpt.weight_files) == 1 else None,
            key=on_disk_name(role, layout, style), expected=f"a tensor of shape {exp.dims}", found="absent",
            why=_missing_why(role), fix=_missing_fix(role),
        )


def _count(names: list[str]) -> str:
    return f"{len(names)} tensor{'s' if len(names) > 1 else ''}"


def _listing(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _missing_why(role: str) -> str:
    if role == "d2t":
        return ("with a draft vocabulary smaller than the target's and no d2t, vLLM and SGLang take draft id i as "
                "target id i and acceptance collapses without an error (NVIDIA-NeMo/Automodel PR #2447)")
    if role == "lm_head.weight":
        return ("without lm_head, engines use the target's full-vocabulary head; with a draft vocabulary the "
                "drafted ids are wrong and accept length falls to 1.00 (SGLang PR #27908)")
    return _MISSING_WHY


def _missing_fix(role: str) -> str:
    if role == "d2t":
        return "embed the d2t offsets the drafter was trained with (target id = i + d2t[i])"
    return "re-export the checkpoint from the trained model; a conversion script dropped this tensor"


def _unexpected(name: str, role: str, file: str, cfg) -> Finding:
    if role.endswith(".bias"):
        flag = "attention_bias" if ".self_attn." in role else "mlp_bias"
        return error(
            f"{name}: a bias the config does not declare ({flag} is not true)",
            code="undeclared-bias", file=file, key=name, expected=f"no bias, or {flag}: true", found=name,
            why="vLLM silently ignores bias tensors its config does not ask for: the drafter runs without the "
            "biases it was trained with",
            fix=f"set {flag}: true in config.json if the drafter was trained with biases",
        )
    if role == "d2t":
        return error(
            f"{name}: a vocabulary mapping although draft_vocab_size equals vocab_size",
            file=file, key=name, expected="no d2t when draft and target vocabularies are the same", found=name,
            why="vLLM 0.33 builds no draft_id_to_target_id when the vocabularies are equal and raises \"There is no "
            "module or parameter named ...\" for the tensor (llama_eagle3.py)",
            code="unneeded-d2t", fix="set draft_vocab_size to the draft vocabulary, or remove d2t and t2d",
        )
    if role == "t2d":
        return info(f"{name}: a target-to-draft mask although draft_vocab_size equals vocab_size; vLLM and SGLang "
                    "skip t2d", code="unneeded-t2d", file=file, key=name)
    if role == "input_norm.weight":
        return error(
            f"{name}: present but norm_before_fc is not true",
            code="undeclared-input-norm",
            file=file, key=name, expected="norm_before_fc: true with this tensor", found="norm_before_fc off",
            why="vLLM drops input_norm when norm_before_fc is off (llama_eagle3.py load_weights): the fused "
            "aux states reach fc un-normalised",
            fix="set norm_before_fc: true (speculators: top level; flat: eagle_config and top level)",
        )
    if role.startswith("fc_norm."):
        return error(
            f"{name}: present but fc_norm is not true (or the index is beyond the aux layers)",
            file=file, key=name, expected="fc_norm: true, one norm per aux layer", found=name,
            why="engines build fc_norm only when the flag is set; vLLM refuses the unknown tensor",
            code="undeclared-fc-norm", fix="set fc_norm: true in config.json",
        )
    if role.endswith(("q_norm.weight", "k_norm.weight")):
        return error(
            f"{name}: a q/k norm, but the configured decoder layers have none",
            code="undeclared-qk-norm", file=file, key=name, expected="no q_norm/k_norm", found=name,
            why="only Qwen3 layers have q/k norms: a speculators config says so with transformer_layer_config."
            "model_type qwen3, a flat one with architectures [\"Eagle3Qwen3ForCausalLM\"]; vLLM builds Llama "
            "layers for LlamaForCausalLMEagle3 and refuses the tensor",
            fix="state the layer type the drafter was trained with",
        )
    if role.startswith("layers."):
        return error(
            f"{name}: not part of a {cfg['model_type']} decoder layer as configured",
            file=file, key=name, expected="no such tensor", found=name, why=_UNEXPECTED_WHY,
            code="unexpected-layer-tensor", fix="check model_type and the layer flags in config.json",
        )
    return error(f"{name}: not expected for this config", file=file, key=name, found=name, why=_UNEXPECTED_WHY,
                 fix="remove it or fix the config", code="unexpected-tensor")
