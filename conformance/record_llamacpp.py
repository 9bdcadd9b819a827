#!/usr/bin/env python3
"""Record what llama.cpp's own EAGLE-3 converter (convert_hf_to_gguf.py) does on
the conformance checkpoint set.

Run under a Python that has torch/numpy/safetensors/sentencepiece/transformers
(the converter's needs: pip install -c constraints.txt torch numpy safetensors
sentencepiece transformers), in a work folder, with L the vendor/llama.cpp folder
of the llama-cpp-python 0.3.36 sdist (pip download --no-deps --no-binary :all:
llama-cpp-python==0.3.36):

  python conformance/checkpoints.py WORK/cset
  (cd WORK/tok && python conformance/llamacpp_tokenizer.py)
  python conformance/record_llamacpp.py --llama-cpp $L --cset WORK/cset \
      --tokenizer WORK/tok/tokenizer.model --work WORK \
      --out tests/conformance/converters/llamacpp-0.3.36.json

Only stdlib + numpy + the gguf package (from $L/gguf-py) are imported here; the
converter itself runs in a subprocess per checkpoint (timeout 120 s, 2 at once).
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import os
import shutil
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 120
JOBS = 2


def read_safetensors_tensor(path, name):
    """Return a numpy array for one tensor of a .safetensors file, or None."""
    import numpy as np
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        if name not in header:
            return None
        meta = header[name]
        start, end = meta["data_offsets"]
        f.seek(8 + n + start)
        raw = f.read(end - start)
    dt = meta["dtype"]
    table = {"I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
             "U8": np.uint8, "BOOL": np.bool_, "F64": np.float64, "F32": np.float32,
             "F16": np.float16}
    if dt == "BF16":
        u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        arr = u.view(np.float32)
    else:
        arr = np.frombuffer(raw, dtype=table[dt])
    return arr.reshape(meta["shape"])


def last_error_line(text):
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    # prefer the last "SomeError: ..." line of a traceback
    for line in reversed(lines):
        s = line.strip()
        head = s.split(":", 1)[0]
        if ":" in s and (head.endswith("Error") or head.endswith("Exception")
                         or head in ("KeyboardInterrupt", "SystemExit", "AssertionError", "NotImplementedError")):
            return s
    return lines[-1].strip() if lines else "(no output)"


def scrub(s, roots):
    for r, rep in roots:
        s = s.replace(r, rep)
    return s


def field_value(f):
    v = f.contents()
    if isinstance(v, (list, tuple)):
        return [x.item() if hasattr(x, "item") else x for x in v]
    return v.item() if hasattr(v, "item") else v


def inspect_gguf(gguf_path, drafter_dir):
    import gguf
    import numpy as np
    r = gguf.GGUFReader(gguf_path)
    arch = field_value(r.fields["general.architecture"]) if "general.architecture" in r.fields else None
    kv = {}
    wanted = ("target_layers", "target_hidden_size", "norm_before_residual", "norm_before_fc",
              "vocab_size", "block_count", "context_length")
    for k, f in r.fields.items():
        if not arch or not k.startswith(arch + "."):
            continue
        sub = k[len(arch) + 1:]
        if sub in wanted or sub.startswith("rope."):
            kv[k] = field_value(f)
    tensors = {}
    d2t_abs = None
    for t in r.tensors:
        tensors[t.name] = [[int(x) for x in t.shape], t.tensor_type.name]
        if t.name == "d2t":
            src = read_safetensors_tensor(os.path.join(drafter_dir, "model.safetensors"), "d2t")
            got = np.array(t.data).reshape(-1).astype(np.int64)
            if src is None:
                d2t_abs = False
            else:
                src = src.reshape(-1).astype(np.int64)
                exp = src + np.arange(src.size, dtype=np.int64)
                d2t_abs = bool(got.size == exp.size and np.array_equal(got, exp))
    return arch, kv, tensors, d2t_abs


def run_one(entry, args, target_dirs, roots):
    name = entry["name"]
    drafter = os.path.join(args.cset, entry["dir"])
    tdir = target_dirs.get(entry["target_config"])
    rec = {"source_hash": entry.get("source_hash"), "target": os.path.basename(os.path.dirname(entry["target_config"]))}
    if tdir is None:
        rec.update({"skipped": "no converter-usable tokenizer for target"})
        return name, rec, 0.0
    out = os.path.join(args.work, "out", name + ".gguf")
    logp = os.path.join(args.work, "logs", name + ".log")
    if os.path.exists(out):
        os.remove(out)
    env = dict(os.environ, PYTHONPATH=os.path.join(args.llama_cpp, "gguf-py"), HF_HUB_OFFLINE="1")
    cmd = [args.python, os.path.join(args.llama_cpp, "convert_hf_to_gguf.py"), drafter,
           "--target-model-dir", tdir, "--outtype", "f32", "--outfile", out]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=TIMEOUT_S, text=True)
        log, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        log = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = "timeout"
    dt = time.time() - t0
    with open(logp, "w") as f:
        f.write(log)
    rec["seconds"] = round(dt, 2)
    if rc == "timeout":
        rec.update({"refused": f"timeout after {TIMEOUT_S} s", "arch": None, "kv": {}, "tensors": {},
                    "d2t_absolute": None})
    elif rc != 0 or not os.path.exists(out):
        rec.update({"refused": scrub(last_error_line(log), roots), "arch": None, "kv": {}, "tensors": {},
                    "d2t_absolute": None})
    else:
        arch, kv, tensors, d2t_abs = inspect_gguf(out, drafter)
        rec.update({"refused": None, "arch": arch, "kv": kv, "tensors": tensors, "d2t_absolute": d2t_abs})
    return name, rec, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source dir (has convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--cset", default=os.path.join(HERE, "cset"))
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "tok", "tokenizer.model"),
                    help="SentencePiece tokenizer.model used for every target")
    ap.add_argument("--work", default=HERE, help="where targets/, out/, logs/ go")
    ap.add_argument("--out", default=os.path.join(HERE, "llamacpp-0.3.36.json"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--only", nargs="*", help="checkpoint names (default all)")
    ap.add_argument("--merge", action="store_true",
                    help="with --only: replace those checkpoints' records in --out, keep the others (checkpoints "
                    "added to the set); the summary counts the merged recording")
    args = ap.parse_args()
    args.cset = os.path.abspath(args.cset)
    args.work = os.path.abspath(args.work)
    args.llama_cpp = os.path.abspath(args.llama_cpp)
    sys.path.insert(0, os.path.join(args.llama_cpp, "gguf-py"))
    with open(args.tokenizer, "rb") as f:
        tok_size = spm_piece_count(f.read())

    with open(os.path.join(args.cset, "manifest.json")) as f:
        manifest = json.load(f)
    if args.only:
        manifest = [e for e in manifest if e["name"] in set(args.only)]
    for d in ("targets", "out", "logs"):
        os.makedirs(os.path.join(args.work, d), exist_ok=True)

    # one converter-usable target dir per target config: config.json + tokenizer.model
    target_dirs, target_notes = {}, {}
    for tc in sorted({e["target_config"] for e in manifest}):
        with open(os.path.join(args.cset, tc)) as f:
            cfg = json.load(f)
        vs = cfg.get("vocab_size", (cfg.get("text_config") or {}).get("vocab_size"))
        tname = os.path.basename(os.path.dirname(tc))
        if vs != tok_size:
            target_notes[tname] = f"skipped: target vocab_size {vs} != tokenizer size {tok_size}"
            continue
        tdir = os.path.join(args.work, "targets", tname)
        os.makedirs(tdir, exist_ok=True)
        shutil.copyfile(os.path.join(args.cset, tc), os.path.join(tdir, "config.json"))
        shutil.copyfile(args.tokenizer, os.path.join(tdir, "tokenizer.model"))
        target_dirs[tc] = tdir
        target_notes[tname] = f"SentencePiece BPE tokenizer.model, {tok_size} pieces = vocab_size"

    roots = [(args.cset + os.sep, ""), (os.path.join(args.work, "targets") + os.sep, "targets/"),
             (os.path.join(args.work, "out") + os.sep, "out/"), (args.llama_cpp + os.sep, "llama.cpp/"),
             (args.cset, "cset"), (args.work, "."), (args.llama_cpp, "llama.cpp")]
    t0 = time.time()
    records = {}
    with cf.ThreadPoolExecutor(max_workers=JOBS) as ex:
        futs = [ex.submit(run_one, e, args, target_dirs, roots) for e in manifest]
        for fu in cf.as_completed(futs):
            name, rec, dt = fu.result()
            records[name] = rec
            state = "skipped" if "skipped" in rec else (
                "REFUSED " + rec["refused"] if rec["refused"] else "ok " + str(rec["arch"]))
            print(f"{name:<50} {dt:6.1f}s {state}", flush=True)
    total = time.time() - t0
    if args.merge:
        with open(args.out) as f:
            kept = json.load(f)
        records = {**kept["checkpoints"], **records}
        total += kept["summary"]["total_seconds"]
    n_skip = sum(1 for r in records.values() if "skipped" in r)
    n_ref = sum(1 for r in records.values() if "skipped" not in r and r["refused"])
    n_conv = len(records) - n_skip - n_ref
    doc = {"engine": "llamacpp", "version": "0.3.36", "commit": "0c1e57098",
           "recorded": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "converter": f"convert_hf_to_gguf.py --target-model-dir T --outtype f32 (timeout {TIMEOUT_S} s)",
           "notes": {"tensor_shape_order": "GGUF ne order (fastest dimension first), as gguf.GGUFReader reports",
                     "d2t_absolute": "true when the GGUF d2t equals the drafter's d2t + arange(len)",
                     "targets": target_notes},
           "summary": {"total_seconds": round(total, 1), "checkpoints": len(records), "converted": n_conv,
                       "refused": n_ref, "skipped": n_skip},
           "checkpoints": records}
    text = json.dumps(doc, sort_keys=True, indent=1)
    for r, _rep in roots:
        assert r not in text, "absolute path leaked: " + r
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(f"total {total:.1f}s: converted {n_conv}, refused {n_ref}, skipped {n_skip} -> {args.out}")


def spm_piece_count(buf):
    """Number of pieces (ModelProto field 1) in a SentencePiece .model file."""
    def varint(i):
        v = s = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << s
            s += 7
            if not b & 0x80:
                return v, i
    i = n = 0
    while i < len(buf):
        key, i = varint(i)
        fn, wt = key >> 3, key & 7
        if wt == 0:
            _, i = varint(i)
        elif wt == 1:
            i += 8
        elif wt == 2:
            ln, i = varint(i)
            i += ln
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"bad protobuf wire type {wt}")
        if fn == 1:
            n += 1
    return n


if __name__ == "__main__":
    main()
