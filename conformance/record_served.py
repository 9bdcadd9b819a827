#!/usr/bin/env python3
"""Serve the trained world's drafters with a real llama.cpp server and record what it counted
(tests/conformance/served/llamacpp-VERSION.json), the acceptance tests/test_served.py holds eagle3-checks' served
walk to.

Run in the project's environment (torch, transformers, safetensors, pyarrow: the test extras) plus sentencepiece and
numpy for llama.cpp's converter, with L the vendor/llama.cpp folder of the llama-cpp-python sdist, built
(conformance/README.md, "A real server"):

  python tests/peers/train_world.py WORK/world            # or the world a test session built
  python conformance/record_served.py --llama-cpp $L --sdist llama_cpp_python-0.3.36.tar.gz \
      --world WORK/world --work WORK/served --build-seconds 2760 \
      --out tests/conformance/served/llamacpp-0.3.36.json

For each drafter of served_world.DRAFTERS: llama.cpp's own converter (convert_hf_to_gguf.py, f32) writes the target
(with a SentencePiece tokenizer made for its 512 ids) and the drafter (--target-model-dir); llama-server serves them
greedily (--spec-type draft-eagle3, K = 3, no confidence cut-off, one slot, no prompt cache) with LLAMA_TRACE=1, which
logs each verify step ("accepted a/d draft tokens", tools/server/server-context.cpp:3941-3943); each request of
served_world.requests sends the prompt's ids to /completion (no BOS is added to a list of ids,
server-common.cpp:867-900) and records the ids served, timings.draft_n and draft_n_accepted, and its verify steps; the
/metrics scrape after the last request is recorded whole. Then the llama.cpp reading's walk on the text the server
produced is compared step for step, and each request where they part is named with the drafter's top-2 logit gap
there. Only stdlib is used to talk to the server. The world's files it served (the target and the trained drafter,
with their configs) are kept beside the recording (OUT without .json): the suite predicts from them on any machine.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # llama_cpp_python-0.3.36.tar.gz
VERSION = "0.3.36"
STEP = re.compile(r"accepted\s+(\d+)/\s*(\d+) draft tokens")


def load_world_module():
    spec = importlib.util.spec_from_file_location("served_world", HERE / "served_world.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def convert(llama: Path, python: str, src: Path, out: Path, target: Path | None = None) -> float:
    env = {**os.environ, "PYTHONPATH": str(llama / "gguf-py"), "NO_LOCAL_GGUF": ""}
    cmd = [python, str(llama / "convert_hf_to_gguf.py"), str(src), "--outtype", "f32", "--outfile", str(out)]
    if target is not None:
        cmd += ["--target-model-dir", str(target)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        raise SystemExit(f"convert_hf_to_gguf.py failed on {src}:\n{done.stdout[-3000:]}")
    return time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: dict | None = None, timeout: float = 120.0) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


SERVE_ARGS = ["--spec-type", "draft-eagle3", "--spec-draft-n-max", "3", "--spec-draft-n-min", "0",
              "--spec-draft-p-min", "0", "-np", "1", "--temp", "0", "--top-k", "1", "--metrics", "--no-cache-prompt",
              "-cram", "0", "-c", "512", "-t", "2"]


def serve(server: Path, target_gguf: Path, drafter_gguf: Path, reqs: list[dict], new_tokens: int, log: Path) -> dict:
    port = free_port()
    cmd = [str(server), "-m", str(target_gguf), "-md", str(drafter_gguf), "--host", "127.0.0.1", "--port", str(port),
           *SERVE_ARGS]
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "LLAMA_TRACE": "1"})
    try:
        for _ in range(600):
            try:
                if json.loads(http(base + "/health", timeout=2)).get("status") == "ok":
                    break
            except Exception:
                time.sleep(0.2)
        else:
            raise SystemExit(f"llama-server did not come up: {log.read_text()[-2000:]}")
        out = []
        seen = 0
        for r in reqs:
            got = json.loads(http(base + "/completion", {"prompt": r["prompt"], "n_predict": new_tokens,
                                                         "temperature": 0, "top_k": 1, "cache_prompt": False,
                                                         "return_tokens": True, "stream": False}))
            time.sleep(0.05)
            text = log.read_text(errors="replace")
            steps = [[int(d), int(a)] for a, d in STEP.findall(text[seen:])]
            seen = len(text)
            timings = got.get("timings", {})
            out.append({"tokens": got.get("tokens", []), "draft_n": timings.get("draft_n", 0),
                        "draft_n_accepted": timings.get("draft_n_accepted", 0), "steps": steps,
                        "stop_type": got.get("stop_type")})
        scrape = http(base + "/metrics").decode()
        version = subprocess.run([str(server), "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True).stdout.strip().splitlines()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"responses": out, "metrics_scrape": scrape, "seconds": round(time.perf_counter() - t0, 1),
            "server_version": version}


def counters(scrape: str) -> dict:
    """The speculative-decoding counters of a llama-server scrape (server-task.cpp:1553-1612)."""
    out: dict = {}
    for line in scrape.splitlines():
        m = re.match(r'^(llamacpp:spec_decode_\w+?)(\{position="(\d+)"\})?\s+(\S+)$', line)
        if not m:
            continue
        value = float(m.group(4))
        if m.group(3) is not None:
            out.setdefault(m.group(1), {})[int(m.group(3))] = value
        else:
            out[m.group(1)] = value
    for k, v in out.items():
        if isinstance(v, dict):
            out[k] = [v[i] for i in sorted(v)]
    return out


def dump(obj, pad: str = "") -> str:
    """JSON with one line per request (diffs stay readable, the file small): dicts are laid out key by key, a list
    of dicts one compact dict per line, any other list on one line."""
    inner = pad + " "
    if isinstance(obj, dict) and obj:
        rows = [f"{inner}{json.dumps(k)}: {dump(v, inner)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(rows) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        return "[\n" + ",\n".join(inner + json.dumps(x, separators=(",", ":")) for x in obj) + "\n" + pad + "]"
    return json.dumps(obj, separators=(",", ":")) if isinstance(obj, list) else json.dumps(obj)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", required=True, type=Path, help="vendor/llama.cpp of the sdist, built")
    ap.add_argument("--sdist", required=True, type=Path, help="llama_cpp_python-0.3.36.tar.gz (its sha256 checked)")
    ap.add_argument("--world", required=True, type=Path, help="tests/peers/train_world.py's output")
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--build-seconds", type=float, default=None, help="how long the build took (recorded)")
    ap.add_argument("--python", default=sys.executable, help="the Python llama.cpp's converter runs under")
    args = ap.parse_args()
    world_mod = load_world_module()
    if world_mod.sha256(args.sdist) != SDIST_SHA256:
        raise SystemExit(f"{args.sdist}: sha256 {world_mod.sha256(args.sdist)}, not the pinned {SDIST_SHA256}")
    llama, work = args.llama_cpp.resolve(), args.work.resolve()
    server = llama / "build" / "bin" / "llama-server"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tok = work / "tok"
    if not (tok / "tokenizer.model").exists():
        tok.mkdir(exist_ok=True)
        subprocess.run([args.python, str(HERE / "llamacpp_tokenizer.py")], cwd=tok, check=True,
                       stdout=subprocess.DEVNULL)
    target = work / "target"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(args.world / "target", target)
    shutil.copy(tok / "tokenizer.model", target / "tokenizer.model")
    target_gguf = work / "target.gguf"
    convert(llama, args.python, target, target_gguf)
    reqs = world_mod.requests(args.world)
    drafters_dir = work / "drafters"
    shutil.rmtree(drafters_dir, ignore_errors=True)
    built = world_mod.build(args.world, drafters_dir)
    record: dict = {
        "engine": "llamacpp", "version": VERSION, "sdist_sha256": SDIST_SHA256,
        "recorded": datetime.date.today().isoformat(), "build_seconds": args.build_seconds,
        "serve_args": SERVE_ARGS, "k": world_mod.K, "new_tokens": world_mod.NEW_TOKENS,
        "world": world_mod.fingerprint(args.world),
        "requests": [{k: r[k] for k in ("set", "index", "prompt", "recorded")} for r in reqs],
        "drafters": {},
    }
    for name, folder in built.items():
        gguf = work / f"{name}.gguf"
        converted = convert(llama, args.python, folder, gguf, target)
        got = serve(server, target_gguf, gguf, reqs, world_mod.NEW_TOKENS, work / f"{name}.log")
        record["server_version"] = got.pop("server_version")
        responses = got["responses"]
        for r in responses:
            assert sum(d for d, _ in r["steps"]) == r["draft_n"], (name, r)  # the log's steps are the request's
        served = [dict(r, served=resp["tokens"]) for r, resp in zip(reqs, responses, strict=True)]
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            data = world_mod.states(args.world, served, Path(tmp) / "served", key="served")
            figures = world_mod.reading_walks(args.world, folder, data)
            parted = world_mod.disagreements(figures, [r["steps"] for r in responses])
        record["drafters"][name] = {
            "what": world_mod.DRAFTERS[name], "convert_seconds": round(converted, 1), "serve_seconds": got["seconds"],
            "counters": counters(got["metrics_scrape"]), "metrics_scrape": got["metrics_scrape"],
            "responses": responses, "parted": parted}
        steps = sum(len(r["steps"]) for r in responses)
        accepted = sum(a for r in responses for _, a in r["steps"])
        print(f"{name}: {len(responses)} requests, {steps} verify steps, acceptance length "
              f"{1 + accepted / steps:.4f}, {len(parted)} requests part from the reading "
              f"(gaps {[p['gap'] for p in parted]}) ({got['seconds']} s)", file=sys.stderr)
    record["record_seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    world_mod.keep(args.world, world_mod.kept_world(args.out))  # the files served, beside the recording
    args.out.write_text(dump(record) + "\n")


if __name__ == "__main__":
    main()
