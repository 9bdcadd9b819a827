"""engine.*: what the serving engine would silently do with the drafter, predicted from headers and config.

One result per ``--engine``. Each check compares the engine's reading (``eagle3_checks/engines/<engine>.py``, a
versioned model of its loader) with the drafter's trainer reading, and fails where the engine would compute
something other than what was trained or would refuse the checkpoint. No torch: the forward check proves the same
numerically.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from .. import engines
from ..engines.reading import describe_difference, differences, effect, remedy
from ..engines.vllm import CACHE_ONLY_ROPE_TYPES
from ..layout import SPECULATORS
from ..registry import Context, Finding, NotApplicable, check, error, info, warning
from ._common import CONFIG, config_of, require_complete


# huggingface_hub's repo id rule (validate_repo_id): "name" or "namespace/name".
_HUB_ID = re.compile(r"^(?:[\w\-.]{1,96}/)?[\w\-.]{1,96}$")


def _listing(items: list[str], limit: int = 4) -> str:
    return ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _readings(ctx: Context):
    config_of(ctx)
    require_complete(ctx)
    served = engines.read(ctx.ckpt, ctx.engine)
    trained = engines.trainer(ctx.ckpt)
    if not trained.layout_ok or trained.hidden_size is None:
        raise NotApplicable(f"the trainer's reading cannot run: {'; '.join(trained.refusals)}")
    return served, trained


@check(
    "engine.loads",
    "The engine loads every trained tensor: nothing refused, dropped or left uninitialised",
    per_engine=True,
    guards="vLLM leaving missing tensors uninitialised without an error, SGLang 0.5.6 dropping names it does not "
    "know (layers.0.*, biases, fc norms), a hard load error (a `model.` prefix in vLLM, an architecture the engine "
    "does not register, a flat config in speculators, a speculators config in SGLang).",
    evidence=("vLLM llama_eagle3.py load_weights", "SGLang 0.5.6 llama_eagle3.py load_weights",
              "speculators #1114 / PR #1131"),
    fix="write the checkpoint in the layout the engine reads (names, architectures) and keep every trained tensor",
)
def loads(ctx: Context) -> Iterable[Finding]:
    served, trained = _readings(ctx)
    name = f"{ctx.engine} {served.version}"
    for refusal in served.refusals:
        yield error(f"{name} refuses the drafter: {refusal}", key=refusal.split(":")[0],
                    expected=f"a drafter {ctx.engine} loads", found=refusal,
                    why="speculators fails to load it" if ctx.engine == "speculators" else
                    "the server fails to start, or fails at the first request",
                    fix="write the checkpoint in the layout this engine reads" if not served.layout_ok else
                    "fix the tensor name or config field named")
    if not served.layout_ok:
        return
    lost = sorted(role for role, how in served.unfilled.items() if not how.startswith("shared")
                  and role in trained.tensors)
    if lost:
        yield error(
            f"{name} leaves {len(lost)} trained parameter(s) unfilled: {_listing(lost)}",
            key=trained.tensors[lost[0]], expected="every trained tensor loaded",
            found=f"{served.unfilled[lost[0]]} ({', '.join(trained.tensors[r] for r in lost[:4])} not read)",
            why=f"{ctx.engine} serves those parameters with {served.unfilled[lost[0]]}; nothing is reported and "
            "acceptance collapses",
            fix="rename the tensors to the names the engine reads (vLLM: layers.0.* or midlayer.*; SGLang 0.5.6: "
            "midlayer.* only; speculators: layers.N.*)")
    dropped = sorted(n for n, why in served.ignored.items()
                     if ctx.ckpt.names[n].role in trained.tensors and ctx.ckpt.names[n].role != "t2d"
                     and ctx.ckpt.names[n].role not in served.tensors
                     and ctx.ckpt.names[n].role not in served.unfilled and not why.startswith("refused"))
    if dropped:
        yield error(
            f"{name} drops {len(dropped)} trained tensor(s): {_listing(dropped)}",
            key=dropped[0], expected="every trained tensor used", found=served.ignored[dropped[0]],
            why=f"{ctx.engine} builds no parameter for them, so the drafter runs without what it was trained with",
            fix="serve with an engine that builds these parameters, or convert the drafter so that it needs none")
    shared = sorted(role for role, how in served.unfilled.items() if how.startswith("shared"))
    absent = [role for role in shared if not ctx.ckpt.has(role)]
    if absent:
        yield info(f"{name} shares {', '.join(absent)} from the target model (not in the checkpoint)")
    for role in shared:
        if ctx.ckpt.has(role):
            on_disk = ctx.ckpt.roles[role]
            yield info(f"{name} uses the target model's {role}, not the checkpoint's {on_disk}"
                       + (f": {served.ignored[on_disk]}" if on_disk in served.ignored else ""), key=on_disk)


@check(
    "engine.semantics",
    "The engine reads every config value as the drafter was trained",
    per_engine=True,
    guards="An engine default that changes the math: vLLM's norm_before_residual True for a speculators config "
    "without the field, SGLang 0.5.6 reading rope_theta 10000 when the theta is only in rope_parameters, head_dim "
    "defaulting (kimi_k2 parsed as DeepseekV3Config: 64), norm_output / fc_norm / norm_before_fc meaning different "
    "things or nothing to an engine, tied embeddings with a draft vocabulary.",
    evidence=("vLLM update_eagle3 (norm_before_residual default True)", "SpecForge #265 (rope_theta)",
              "vLLM PRs #38111, #46488, #42143 (norm flags)"),
    fix="state every semantic field explicitly in config.json, where the engine reads it",
)
def semantics(ctx: Context) -> Iterable[Finding]:
    served, trained = _readings(ctx)
    if not served.layout_ok:
        raise NotApplicable(f"{ctx.engine} does not read this layout (see engine.loads)")
    for field in differences(served, trained):
        yield error(
            f"{ctx.engine} {served.version} reads {field} as {getattr(served, field)!r}, the drafter was trained "
            f"with {getattr(trained, field)!r}",
            key=field, expected=f"{getattr(trained, field)!r} ({trained.sources.get(field, '?')})",
            found=f"{getattr(served, field)!r} ({served.sources.get(field, '?')})",
            why=f"{effect(field)}; {describe_difference(field, served, trained)}",
            fix=remedy(field, trained, served))


@check(
    "engine.aux-layers",
    "The engine captures the target layers the drafter was trained on",
    per_engine=True,
    guards="Aux ids where the engine does not read them (SGLang 0.5.6 reads eagle_config only), no ids at all "
    "(engine defaults), a count that does not fit fc, trainer and server counting ids one layer apart (vLLM: the "
    "residual entering layer L; SGLang/SpecForge: the output of layer X), ids beyond the target's layers.",
    evidence=("vLLM PR #43671 (~10% vs ~45% first-token acceptance, one layer off)", "SGLang PR #25454",
              "vLLM PR #50170 (default layers: 1.21% vs 58.9%)", "SGLang #32226 (count vs fc width)"),
    fix="state the ids in the serving engine's convention, where it reads them (eagle_config and the top level)",
)
def aux_layers(ctx: Context) -> Iterable[Finding]:
    served, trained = _readings(ctx)
    if not served.layout_ok:
        raise NotApplicable(f"{ctx.engine} does not read this layout (see engine.loads)")
    eng = f"{ctx.engine} {served.version}"
    ids, trained_ids = served.aux_layer_ids, trained.aux_layer_ids
    convention, how = engines.trainer_convention(ctx.ckpt, ctx.options.aux_convention if ctx.options else None)
    if ids is None and trained_ids and convention and ctx.target is not None and ctx.target.num_hidden_layers:
        # Both engines fall back to (2, N/2, N-3) counted the vLLM way (SGLang adds no +1 to its default).
        n = ctx.target.num_hidden_layers
        default = engines.captured_layers([2, n // 2, n - 3], "vllm")
        if default == engines.captured_layers(trained_ids, convention):
            yield info(f"{eng} finds no aux-layer ids where it reads them and falls back to its default "
                       f"{[2, n // 2, n - 3]}, which captures the layers the drafter was trained on ({default})",
                       file=CONFIG, key="eagle_aux_hidden_state_layer_ids",
                       fix="write the ids where the engine reads them anyway")
            return
    if ids is None:
        if trained_ids:
            yield error(f"{eng} finds no aux-layer ids where it reads them; the config has {trained_ids} "
                        f"({trained.sources['aux_layer_ids']})", file=CONFIG, key="eagle_aux_hidden_state_layer_ids",
                        expected=f"ids where {ctx.engine} reads them", found=served.sources["aux_layer_ids"],
                        why=f"{ctx.engine} captures its default layers, not the ones the drafter was trained on "
                        "(vLLM PR #50170: 1.21% acceptance instead of 58.9%)",
                        fix="write the ids in eagle_config.eagle_aux_hidden_state_layer_ids and at the top level")
        else:
            yield warning(f"{eng} finds no aux-layer ids and falls back to its default layers",
                          file=CONFIG, key="eagle_aux_hidden_state_layer_ids", found="absent",
                          why="the defaults need not be the layers the drafter was trained on",
                          fix="state the ids the drafter was trained on")
        return
    fc = ctx.ckpt.shape("fc.weight")
    ht = trained.target_hidden_size
    if fc and len(fc) == 2 and ht and fc[1] % ht == 0 and len(ids) != fc[1] // ht:
        yield error(f"{eng} captures {len(ids)} layers {ids}, fc takes {fc[1] // ht} states of {ht}",
                    file=CONFIG, key=served.sources["aux_layer_ids"].split(": ", 1)[-1],
                    expected=f"{fc[1] // ht} ids", found=str(ids),
                    why="the fused state does not fit fc: the engine fails at the first draft step (SGLang #32226)",
                    fix="state exactly the ids the drafter was trained on")
    if convention is None:
        yield info(f"{eng} counts ids the {served.aux_convention} way ({served.sources['aux_convention']}); how the "
                   f"trainer counted is {how}: {ids} capture the outputs of layers "
                   f"{engines.captured_layers(ids, served.aux_convention)} here",
                   file=CONFIG, key="eagle_aux_hidden_state_layer_ids")
    elif convention != served.aux_convention and trained_ids:
        layers = engines.captured_layers(trained_ids, convention)
        right = engines.ids_for(layers, served.aux_convention)
        if ids != right:
            yield error(
                f"{eng} reads ids {ids} as the outputs of layers {engines.captured_layers(ids, served.aux_convention)}"
                f"; the drafter was trained on layers {layers} ({convention} convention: {how})",
                file=CONFIG, key=served.sources["aux_layer_ids"].split(": ", 1)[-1], expected=str(right),
                found=str(ids),
                why="states one layer off: vLLM PR #43671 measured ~10% first-token acceptance instead of ~45%; "
                "SGLang PR #25454 about 0.10 accept length on Kimi-K2.5",
                fix=f"for {ctx.engine}, write {right} (the same layers in its convention)")
    target = ctx.target
    if target is not None and target.num_hidden_layers:
        n = target.num_hidden_layers
        last = n if served.aux_convention == "vllm" else n - 1
        above = [i for i in ids if i > last]
        if above:
            yield error(f"{eng} captures nothing for ids {above}: the target has {n} layers and the last id "
                        f"{ctx.engine} can capture is {last}", file=CONFIG,
                        key=served.sources["aux_layer_ids"].split(": ", 1)[-1], expected=f"ids <= {last}",
                        found=str(ids), why="the drafter is fed no state (or the server fails) for those layers",
                        fix="check the ids and that --target-config is the verifier's config")


@check(
    "engine.serving",
    "Serving limits: context length, verifier path",
    per_engine=True,
    guards="A drafter max_position_embeddings below the context the engine serves (SGLang's rotary cache ends "
    "there; vLLM 0.33 raises it for plain RoPE but caps max_model_len for yarn), a speculators verifier that is a "
    "local path (vLLM's `vllm serve DRAFTER` shortcut refuses it).",
    evidence=("vLLM #34734 (no drafting past 2048 tokens)", "vLLM config/speculative.py "
              "_maybe_override_draft_max_position_embeddings"),
    fix="state the max_position_embeddings of the target, and name the verifier by its hub id",
)
def serving(ctx: Context) -> Iterable[Finding]:
    served, _ = _readings(ctx)
    if not served.layout_ok:
        raise NotApplicable(f"{ctx.engine} does not read this layout (see engine.loads)")
    eng = f"{ctx.engine} {served.version}"
    want = ctx.options.max_model_len if ctx.options else None
    have = served.max_position_embeddings
    if want and have and have < want:
        kind = (served.rope_scaling or {}).get("rope_type", "default")
        where = served.sources.get("max_position_embeddings", "?")
        if ctx.engine == "vllm" and kind in CACHE_ONLY_ROPE_TYPES:
            yield info(f"{eng} raises the draft's max_position_embeddings {have} to max_model_len {want} "
                       f"(rope_type {kind})", file=CONFIG, key="max_position_embeddings")
        elif ctx.engine == "vllm":
            yield error(f"{eng} limits max_model_len to the draft's max_position_embeddings {have} (rope_type "
                        f"{kind}), below the planned {want}", file=CONFIG, key="max_position_embeddings",
                        expected=f">= {want}", found=f"{have} ({where})",
                        why="vLLM resizes the rotary cache only for plain RoPE types; otherwise the whole server "
                        "serves a shorter context", fix=f"state \"max_position_embeddings\": {want} or more")
        elif ctx.engine == "sglang":
            yield error(f"{eng} sizes the draft's rotary cache from max_position_embeddings {have}, below the "
                        f"planned context {want}", file=CONFIG, key="max_position_embeddings",
                        expected=f">= {want}", found=f"{have} ({where})",
                        why="positions past the cache are out of range: drafting fails on long prompts "
                        "(vLLM #34734 saw the same before it resized the cache)",
                        fix=f"state \"max_position_embeddings\": {want} or more")
    if ctx.engine == "vllm" and ctx.ckpt.layout == SPECULATORS:
        spec = ctx.ckpt.config_raw.get("speculators_config")
        verifier = spec.get("verifier") if isinstance(spec, dict) else None
        path = verifier.get("name_or_path") if isinstance(verifier, dict) else None
        local = not (isinstance(path, str) and _HUB_ID.match(path) and not os.path.exists(path))
        if local:
            yield warning(f"{eng}: speculators_config.verifier.name_or_path is {path!r}, not a hub repository id",
                          file=CONFIG, key="speculators_config.verifier.name_or_path",
                          expected="an id such as org/model", found=repr(path),
                          why="`vllm serve DRAFTER` reads the verifier from this field and refuses anything but a "
                          "remote repository (\"Speculators verifier must name a remote model repository\")",
                          fix="name the verifier by its hub id, or serve with --model VERIFIER and "
                          "--speculative-config pointing at the drafter")
