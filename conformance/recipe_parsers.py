"""Hold ``eagle3-checks recipe`` to the engines' own argument parsers: run under an engine's interpreter (a venv
conformance/run.sh built), it parses each recipe's serve command with that release's parser, exactly as its CLI
does, and prints what the parser made of the speculative settings as JSON.

    cd DIR_OF_THE_CHECKPOINTS && PYTHON conformance/recipe_parsers.py OUT.json vllm|sglang RECIPE.json...

RECIPE.json is ``eagle3-checks recipe CKPT --engine E --format json`` (run in the same folder, the checkpoints named
relatively). With ``EAGLE3_PROBE_KEYS=DRAFTER`` (vLLM) the recording also holds SpeculativeConfig's fields and what the
release does with each key of ``PROBES`` (accepted, or its validation error). Nothing is started and no GPU is
needed. The recording (tests/conformance/recipes/) holds each recipe with what the parser made of it; the default test
run holds ``recipe`` to it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

# as the conformance recorders run: on CPU, with no CUDA device visible (vLLM's device inference needs this)
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def vllm(argv: list[str]) -> dict:
    """vllm/entrypoints/cli/serve.py:161-172 builds `vllm serve` from common/cli_args.py make_arg_parser; the serve
    command then takes model_tag as the model (:56-57) and AsyncEngineArgs.from_cli_args reads the rest."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert argv[:2] == ["vllm", "serve"], argv
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[2:])
    args.model = args.model_tag
    engine = AsyncEngineArgs.from_cli_args(args)
    out = {"model": engine.model, "speculative_config": engine.speculative_config,
           "tensor_parallel_size": engine.tensor_parallel_size,
           "pipeline_parallel_size": engine.pipeline_parallel_size}
    if engine.tensor_parallel_size == 1 and engine.pipeline_parallel_size == 1:
        # the whole config path on one CPU process: SpeculativeConfig builds the drafter's config with vLLM's own
        # code (config/speculative.py), as `vllm serve` does before loading any weight
        spec = engine.create_engine_config().speculative_config
        out["built"] = {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
                        "draft_architectures": spec.draft_model_config.architectures,
                        "draft_tensor_parallel_size": spec.draft_tensor_parallel_size}
    return out


def sglang(argv: list[str]) -> dict:
    """sglang/srt/server_args.py:351 ServerArgs.add_cli_args (every field of srt/arg_groups/fields/), as
    sglang.launch_server parses its command line."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    assert argv[:3] == ["python", "-m", "sglang.launch_server"], argv
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv[3:])
    keys = ("model_path", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens", "tp_size", "pp_size")
    out = {k: getattr(args, k) for k in keys}
    if args.tp_size == 1:
        # ServerArgs.from_cli_args runs the release's resolution hooks (srt/arg_groups/speculative_hook.py) on the
        # target's config, as launch_server does before starting anything; --device cpu: no GPU here
        resolved = ServerArgs.from_cli_args(parser.parse_args(argv[3:] + ["--device", "cpu"]))
        out["resolved"] = {k: getattr(resolved, k) for k in keys}
    return out


# Keys a speculative config may have held in some release: each is probed on the installed one (accepted, or the
# error its validation raises), with the example drafter (0.34.0 removed the first two; parallel_drafting is refused
# for eagle3 from 0.34.0).
PROBES = {"disable_padded_drafter_batch": True, "use_heterogeneous_vocab": True, "parallel_drafting": True}


def vllm_keys(drafter: str) -> dict:
    """vLLM's SpeculativeConfig: its fields (the keys a --speculative-config may hold: config/utils.py forbids any
    other), and what the release does with each probe key in a serve command for ``drafter``."""
    import dataclasses

    from vllm.config import SpeculativeConfig

    out: dict = {"fields": sorted(f.name for f in dataclasses.fields(SpeculativeConfig)), "probes": {}}
    for key, value in PROBES.items():
        spec = {"method": "eagle3", "model": drafter, "num_speculative_tokens": 3, key: value}
        argv = ["vllm", "serve", "example-target", "--speculative-config", json.dumps(spec)]
        try:
            vllm(argv)
            out["probes"][key] = "accepted"
        except Exception as exc:  # the release's own validation error, recorded as it says it
            said = " / ".join(str(exc).splitlines()[:3])[:400]
            out["probes"][key] = f"{type(exc).__name__}: {said}"
    return out


def main() -> int:
    import datetime
    from importlib.metadata import version

    out, engine, paths = sys.argv[1], sys.argv[2], sys.argv[3:]  # (the engines log to stdout: the recording is a file)
    parse = {"vllm": vllm, "sglang": sglang}[engine]
    cases = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            recipe = json.load(fh)
        cases.append({"recipe": recipe, "parsed": parse(shlex.split(recipe["commands"][-1]))})
    recording = {"engine": engine, "version": version(engine), "recorded": datetime.date.today().isoformat(),
                 "cases": cases}
    if engine == "vllm" and os.environ.get("EAGLE3_PROBE_KEYS"):
        recording["speculative_config"] = vllm_keys(os.environ["EAGLE3_PROBE_KEYS"])
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(recording, fh, indent=2, default=str)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
