"""How each modelled release is started with a drafter, as data: the launch settings that serve it as trained (what
``eagle3-checks recipe`` prints) and the preconditions of a parallel launch (what ``engine.serving`` checks), defined
once here for both.

Each :class:`Launch` cites the release's own argument definitions:
- vLLM 0.33.0: ``engine/arg_utils.py:1864-1866`` (``--speculative-config`` is JSON), ``config/speculative.py:74-82``
  (the ``method`` names; ``eagle3``, not ``eagle``), ``:413-427`` (``model``, ``num_speculative_tokens``,
  ``draft_tensor_parallel_size``), ``:1849-1870`` (the draft runs at the target's tensor-parallel size unless
  ``draft_tensor_parallel_size`` is 1), ``config/model.py:1557-1564`` (heads must divide by it, checked for the
  draft at ``config/speculative.py:1991``), ``model_executor/layers/linear.py:1066-1071`` (KV heads: divide by it,
  or it by them), ``v1/worker/gpu/spec_decode/eagle/utils.py:59-70`` (with pipeline parallelism the target's
  embedding is not on the drafter's stage: a drafter without its own raises RuntimeError);
- SGLang 0.5.23: ``srt/arg_groups/fields/spec.py:31-70`` (``--speculative-algorithm EAGLE3``,
  ``--speculative-draft-model-path``, steps, top-k, draft tokens), ``fields/parallel.py:45-65`` (``--tp-size``,
  ``--pp-size``), ``srt/layers/linear.py:1140-1145`` (KV heads), ``srt/arg_groups/speculative_hook.py:1120-1140``
  (no draft path on a DeepSeek-family target: the target is used as its own draft); ``EAGLE`` for an EAGLE-3 drafter
  captures no aux states (sgl-project/sglang PR #21272: accept length exactly 1.0);
- TensorRT-LLM 1.4.0rc1 (read at commit 00679c66): ``llmapi/llm_args.py`` ``Eagle3DecodingConfig``
  (``decoding_type`` Eagle3, ``max_draft_len``, ``speculative_model_dir``, ``eagle3_one_model``,
  ``eagle3_layers_to_capture``), given to ``trtllm-serve`` as the ``speculative_config`` block of its
  ``--extra_llm_api_options`` file (the serve flags are not verified against the release);
- llama.cpp (0.3.36's vendored build): ``convert_hf_to_gguf.py:164-171`` (``--target-model-dir``),
  ``common/arg.cpp:4241-4257`` (``-md``, ``--spec-type draft-eagle3``; EAGLE-3 is not detected from the GGUF,
  ``common/common.h:373``), ``:4140-4203`` (``--spec-draft-n-max``);
- lmdeploy 0.18.0: ``cli/utils.py:833-859`` (``--speculative-algorithm eagle3``, ``--speculative-draft-model``,
  ``--speculative-num-draft-tokens``), ``:394-401`` (``--backend`` defaults to turbomind, which ignores speculative
  decoding: ``serve/core/async_engine.py:148-149``), ``:173-176`` (``--tp``); the Llama drafter always runs at tp 1
  (``pytorch/engine/config_builder.py:234-235``);
- mlx-vlm 0.7.10: ``server/cli.py:252-275`` (``--draft-model``, ``--draft-kind``, ``--draft-block-size``; without it one
  token is drafted per round, ``speculative/eagle3.py:376-379``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import field
from typing import Any

from ..fast_dataclass import dataclass
from .reading import Reading


@dataclass(frozen=True)
class Request:
    """What a launch is built for: the drafter and target as the user names them, the draft length, the parallel
    sizes, and the target layers the drafter was trained on (None: unknown), as the target's ids for a release that
    takes them at launch."""

    drafter: str
    target: str
    tokens: int = 3
    tp: int = 1
    pp: int = 1
    launch_ids: list[int] | None = None
    # the drafter's trained attention window (W keys, the query included) when every layer slides, else None;
    # ``window_partial``: only some layers slide (no launch option serves that)
    window: int | None = None
    window_partial: bool = False


@dataclass
class Problem:
    """A precondition of the launch that does not hold: what, the launch option or tensor it is about, why (which
    release fails how), and the fix."""

    code: str
    message: str
    key: str
    why: str
    fix: str
    expected: str | None = None
    found: str | None = None
    remedied: str | None = None  # how the recipe's launch avoids it (engine.serving still reports it)


@dataclass
class Launch:
    """The launch of one release: the shell commands, the settings as data (JSON: what --launch reads back) and
    notes on each choice."""

    engine: str
    commands: list[str]
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _q(value: Any) -> str:
    return shlex.quote(value if isinstance(value, str) else json.dumps(value))


def heads_divide(reading: Reading, tp: int, where: str, kv_rule: str) -> list[Problem]:
    """Attention heads and KV heads at tensor-parallel size ``tp`` (``where``: the release's check)."""
    out = []
    if tp > 1 and reading.num_heads and reading.num_heads % tp:
        out.append(Problem("tp-heads", f"{reading.num_heads} attention heads do not divide by tensor-parallel size "
                           f"{tp}", "num_attention_heads", f"{reading.engine} {reading.version} raises at startup "
                           f"({where})", "serve with a tensor-parallel size that divides the heads, or (vLLM) a draft "
                           "tensor-parallel size of 1", f"a divisor of {reading.num_heads}", str(tp)))
    kv = reading.num_kv_heads
    if tp > 1 and kv and (tp % kv if tp >= kv else kv % tp):
        out.append(Problem("tp-kv-heads", f"{kv} KV heads and tensor-parallel size {tp}: neither divides the other",
                           "num_key_value_heads", f"{reading.engine} {reading.version} fails building the KV "
                           f"projection ({kv_rule})", "serve with a tensor-parallel size that divides the KV heads "
                           "or that they divide", f"a size dividing or divided by {kv}", str(tp)))
    return out


def _own_embedding(reading: Reading, pp: int, cite: str) -> list[Problem]:
    if pp > 1 and "embed_tokens.weight" not in reading.tensors:
        return [Problem("pp-embedding", f"pipeline-parallel size {pp} and no embed_tokens in the drafter",
                        "embed_tokens.weight", f"{reading.engine} {reading.version} runs the drafter on the last "
                        f"stage, where the target's embedding is not: it raises RuntimeError ({cite}; vLLM PR #17326)",
                        "ship the target's embedding in the drafter (embed_tokens.weight), or serve with --pp 1",
                        "embed_tokens.weight", "absent")]
    return []


_HUB_ID = re.compile(r"^(?:[\w\-.]{1,96}/)?[\w\-.]{1,96}$")


def vllm_drafter(raw: dict, layout: str) -> list[Problem]:
    """What ``vllm serve DRAFTER`` needs of a speculators config: a verifier it can fetch. It reads the verifier from
    speculators_config.verifier.name_or_path and refuses anything but a remote repository id."""
    if layout != "speculators":
        return []
    spec = raw.get("speculators_config")
    verifier = spec.get("verifier") if isinstance(spec, dict) else None
    path = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    if isinstance(path, str) and _HUB_ID.match(path) and not os.path.exists(path):
        return []
    return [Problem("local-verifier", f"speculators_config.verifier.name_or_path is {path!r}, not a hub repository id",
                    "speculators_config.verifier.name_or_path", "`vllm serve DRAFTER` reads the verifier from this "
                    "field and refuses anything but a remote repository (\"Speculators verifier must name a remote "
                    "model repository\")", "name the verifier by its hub id, or serve with --model VERIFIER and "
                    "--speculative-config pointing at the drafter", "an id such as org/model", repr(path))]


def vllm(reading: Reading, req: Request) -> Launch:
    spec: dict[str, Any] = {"method": "eagle3", "model": req.drafter, "num_speculative_tokens": req.tokens}
    notes = ['"method": "eagle3" (config/speculative.py:74-82; "eagle" builds an EAGLE-1 drafter)']
    if reading.kind == "peagle":  # a release that builds P-EAGLE (0.34.0 refuses the config: no launch serves it)
        spec["parallel_drafting"] = True
        notes.append('"parallel_drafting": true: a P-EAGLE drafter drafts its positions in parallel with its '
                     'mask_hidden (0.33.0 llama_eagle3.py:347-355; `vllm serve DRAFTER` sets it from the speculators '
                     'config, transformers_utils/configs/speculators/base.py:133-134)')
    problems = heads_divide(reading, req.tp, "config/model.py:1557-1564, for the draft at config/speculative.py:1991",
                            "model_executor/layers/linear.py:1066-1071")
    if problems and req.tp > 1:
        spec["draft_tensor_parallel_size"] = 1
        why = (f"draft_tensor_parallel_size 1: the drafter's heads do not divide by {req.tp}, and vLLM allows 1 or the "
               "target's size (config/speculative.py:1862-1869)")
        notes.append(why)
        for p in problems:
            p.remedied, p.fix = why, f"launch with {why}"
    problems += _own_embedding(reading, req.pp, "v1/worker/gpu/spec_decode/eagle/utils.py:59-70")
    cmd = ["vllm", "serve", req.target]
    if req.tp > 1:
        cmd += ["--tensor-parallel-size", str(req.tp)]
    if req.pp > 1:
        cmd += ["--pipeline-parallel-size", str(req.pp)]
    cmd += ["--speculative-config", json.dumps(spec)]
    return Launch("vllm", [" ".join(_q(c) for c in cmd)], {"speculative_config": spec, "tensor_parallel_size": req.tp,
                  "pipeline_parallel_size": req.pp}, notes, problems)


def window_launch(option: str | None, trained: Reading) -> dict | None:
    """The launch settings that give a release taking the drafter's window at launch (``option``, SGLang's
    --speculative-draft-window-size) the window the drafter was trained with, as :func:`sglang` writes them: N = W - 1
    (N + 1 keys attended). None when there is none to give (no option, no window, or only some layers slide)."""
    w = trained.window()
    if option is None or w is None or len(w[1]) != trained.num_layers:
        return None
    return {"args": {option: w[0] - 1}}


def sglang(reading: Reading, req: Request) -> Launch:
    args = {"model-path": req.target, "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": req.drafter,
            "speculative-num-steps": req.tokens, "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": req.tokens + 1, "tp-size": req.tp}
    if req.pp > 1:
        args["pp-size"] = req.pp
    notes = ["--speculative-algorithm EAGLE3: EAGLE captures no aux states for an EAGLE-3 drafter (accept length "
             "exactly 1.0, sgl-project/sglang PR #21272)",
             "--speculative-draft-model-path always: without it a DeepSeek-family target is used as its own draft "
             "(srt/arg_groups/speculative_hook.py:1120-1140; sgl-project/sglang#36528)"]
    if req.window:  # SGLang reads no window from the drafter's config: only this option (llama_eagle3.py:284-299)
        args["speculative-draft-window-size"] = req.window - 1
        notes.append(f"--speculative-draft-window-size {req.window - 1}: the drafter was trained with a sliding window "
                     f"of {req.window} tokens; SGLang ignores its layer_types and attends N + 1 keys for N "
                     "(srt/models/llama_eagle3.py:284-299, layers/attention/torch_native_backend.py:36-48)")
    problems = heads_divide(reading, req.tp, "the draft runs at the target's --tp-size", "srt/layers/linear.py:"
                            "1140-1145")
    if req.window_partial:
        notes.append("the drafter slides in some layers only, and --speculative-draft-window-size sets every layer's "
                     "window: no launch serves it as trained past the window (engine.semantics says from which "
                     "context); vLLM reads layer_types per layer")
    cmd = ["python", "-m", "sglang.launch_server"] + [x for k, v in args.items() for x in (f"--{k}", str(v))]
    return Launch("sglang", [" ".join(_q(c) for c in cmd)], {"args": args}, notes, problems)


def trtllm(reading: Reading, req: Request) -> Launch:
    spec: dict[str, Any] = {"decoding_type": "Eagle3", "max_draft_len": req.tokens,
                            "speculative_model_dir": req.drafter, "eagle3_one_model": True}
    notes = ["decoding_type Eagle3 with eagle3_one_model (llmapi/llm_args.py Eagle3DecodingConfig)",
             "the trtllm-serve flags are read from source, not checked against the 1.4.0rc1 release's parser"]
    problems: list[Problem] = []
    if req.launch_ids:
        spec["eagle3_layers_to_capture"] = req.launch_ids
        notes.append(f"eagle3_layers_to_capture {req.launch_ids}: TensorRT-LLM reads no ids from the drafter's config "
                     "and counts an id X as the output of layer X")
    else:
        problems.append(Problem("launch-layers", "the target layers the drafter was trained on are unknown: "
                                "eagle3_layers_to_capture cannot be written", "eagle3_layers_to_capture",
                                "TensorRT-LLM then captures its default {1, N/2-1, N-4}, whatever the drafter was "
                                "trained on", "pass --aux-convention (how the trainer counted) and --target-config"))
    settings = {"speculative_config": spec, "tensor_parallel_size": req.tp, "pipeline_parallel_size": req.pp}
    cmd = ["trtllm-serve", req.target, "--tp_size", str(req.tp), "--pp_size", str(req.pp),
           "--extra_llm_api_options", "trtllm-launch.json"]
    return Launch("trtllm", [f"cat > trtllm-launch.json <<'EOF'\n{json.dumps(settings, indent=2)}\nEOF",
                             " ".join(_q(c) for c in cmd)], settings, notes, problems)


def llamacpp(reading: Reading, req: Request) -> Launch:
    convert = ["python", "convert_hf_to_gguf.py", req.drafter, "--target-model-dir", req.target, "--outtype", "bf16",
               "--outfile", "draft-eagle3.gguf"]
    serve = ["llama-server", "-m", "target.gguf", "-md", "draft-eagle3.gguf", "--spec-type", "draft-eagle3",
             "--spec-draft-n-max", str(req.tokens)]
    notes = ["--spec-type draft-eagle3: llama.cpp does not detect EAGLE-3 from the GGUF (common/common.h:373)",
             "--target-model-dir: the converter takes the tokenizer and vocabulary from the target "
             "(conversion/llama.py:59-63); target.gguf is the target converted the usual way"]
    return Launch("llamacpp", [" ".join(_q(c) for c in convert), " ".join(_q(c) for c in serve)],
                  {"convert": convert, "serve": serve}, notes, [])


def lmdeploy(reading: Reading, req: Request) -> Launch:
    cmd = ["lmdeploy", "serve", "api_server", req.target, "--backend", "pytorch", "--speculative-algorithm", "eagle3",
           "--speculative-draft-model", req.drafter, "--speculative-num-draft-tokens", str(req.tokens)]
    if req.tp > 1:
        cmd += ["--tp", str(req.tp)]
    notes = ["--backend pytorch: the default turbomind backend ignores speculative decoding with a warning "
             "(cli/utils.py:394-401, serve/core/async_engine.py:148-149)",
             "the Llama drafter runs at tensor-parallel size 1 whatever --tp says (pytorch/engine/config_builder.py:"
             "234-235)"]
    return Launch("lmdeploy", [" ".join(_q(c) for c in cmd)], {"args": cmd[3:]}, notes, [])


def mlx(reading: Reading, req: Request) -> Launch:
    cmd = ["mlx_vlm.server", "--model", req.target, "--draft-model", req.drafter, "--draft-kind", "eagle3",
           "--draft-block-size", str(req.tokens + 1)]
    notes = [f"--draft-block-size {req.tokens + 1}: without it mlx-vlm drafts one token per round "
             "(speculative/eagle3.py:376-379)"]
    return Launch("mlx", [" ".join(_q(c) for c in cmd)], {"args": cmd[1:]}, notes, [])


# Each profile names its builder (Profile.launch); speculators trains and is not launched.


def preconditions(build: Any, reading: Reading, tp: int | None, pp: int | None) -> list[Problem]:
    """The parallel-launch preconditions of a release (``build``: its Profile.launch; engine.serving's verdicts):
    the same facts the recipe builds from."""
    if build is None or (not tp and not pp):
        return []
    return [p for p in build(reading, Request("DRAFT", "TARGET", tp=tp or 1, pp=pp or 1, launch_ids=[0])).problems
            if p.code != "launch-layers"]


def unmet(launch: Launch) -> list[Problem]:
    """The problems the launch itself does not avoid."""
    return [p for p in launch.problems if not p.remedied]
