"""What conformance/record_served.py serves with a real llama.cpp server and tests/test_served.py predicts, defined
once for both: the test suite's trained world (tests/peers/train_world.py: a 4-layer Llama target, drafters trained
with speculators 0.9.0's own model and loss), its requests, the drafters served (the trained one, one-change mutants of
it, eagle3-checks convert's output), and the recorded states a prediction runs on.

Needs torch, safetensors and eagle3_checks (with transformers and pyarrow for :func:`states`). Not a package module:
loaded from its file (tests/helpers.py ``load_conformance``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

PROMPT = 8  # the world's prompts (train_world.PROMPT): each request sends a recorded sequence's first 8 tokens
NEW_TOKENS = 40  # and asks for the rest (train_world.LENGTH - PROMPT)
K = 3  # --spec-draft-n-max
EOS = 2  # the world target's eos_token_id (transformers LlamaConfig's default): a sequence that reaches it early ended
SETS = ("test", "heldout")  # the world's recorded sets whose prompts are served, in this order
WORLD_FILES = ("target/model.safetensors", "drafters/trained/model.safetensors")  # held by sha256 in a recording
# What of the world a recording keeps beside itself (tests/conformance/served/llamacpp-VERSION/): the target and the
# trained drafter served, so that the suite predicts from the files the server served on any machine (a world trained
# again elsewhere differs in its last bits: CPU kernels sum in another order), with the configs they are read by.
KEPT = (*WORLD_FILES, "target/config.json", "target/generation_config.json", "drafters/trained/config.json")


def sha256(path: Path) -> str:
    from eagle3_checks.acceptance.record import sha256_of

    return sha256_of(path)


def fingerprint(world: Path) -> dict[str, str]:
    """The sha256 of the world files a recording was made from."""
    return {name: sha256(world / name) for name in WORLD_FILES}


def keep(world: Path, out: Path) -> None:
    """The world files a recording serves (KEPT), copied to ``out``: a world of its own, as :func:`build` and
    :func:`states` read one."""
    shutil.rmtree(out, ignore_errors=True)
    for name in KEPT:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(world / name, out / name)


def kept_world(recording: Path) -> Path:
    """Where a recording's world lies: beside it, named as it is without ``.json``."""
    return recording.with_suffix("")


def requests(world: Path) -> list[dict]:
    """Every recorded sequence of SETS that runs its whole length without the target ending it (no eos in its
    continuation): {"set", "index", "prompt", "recorded"} (the prompt ids, the target's greedy continuation)."""
    from safetensors.torch import load_file

    out = []
    for name in SETS:
        files = sorted((world / name).glob("hs_*.safetensors"), key=lambda p: int(p.stem[3:]))
        for path in files:
            ids = load_file(str(path))["token_ids"].tolist()
            if len(ids) == PROMPT + NEW_TOKENS and EOS not in ids[PROMPT:]:
                out.append({"set": name, "index": int(path.stem[3:]), "prompt": ids[:PROMPT],
                            "recorded": ids[PROMPT:]})
    return out


def _edit_config(folder: Path, edit) -> None:
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg, indent=2))


def _flip_norm(cfg: dict) -> None:
    cfg["norm_before_residual"] = not cfg.get("norm_before_residual", False)


def _rope_10000(cfg: dict) -> None:
    layer = cfg["transformer_layer_config"]
    layer["rope_theta"] = 10000.0
    if isinstance(layer.get("rope_parameters"), dict):
        layer["rope_parameters"]["rope_theta"] = 10000.0


def _rotate_aux(folder: Path) -> None:
    """fc's three input blocks rotated (block i takes what block i+1 learned): each aux state meets weights trained
    for another."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    a, b, c = tensors["fc.weight"].chunk(3, dim=1)
    tensors["fc.weight"] = torch.cat([b, c, a], dim=1).contiguous()
    save_file(tensors, str(path), metadata={"format": "pt"})


# name -> what it is. One change each from "trained" (the world's periodic language makes the drafter attend by
# position, so the rope base changes what it drafts: tests/peers/train_world.py)
DRAFTERS = {
    "trained": "the drafter as speculators saved it",
    "norm-before-residual-flipped": "config.json's norm_before_residual flipped (trained false)",
    "aux-order-rotated": "fc.weight's three input blocks rotated",
    "rope-base-10000": "the layer config's rope_theta 10000 (trained 1e6)",
    "converted": "eagle3-checks convert --to llamacpp (the flat layout)",
}


def build(world: Path, out: Path) -> dict[str, Path]:
    """Each drafter of DRAFTERS written under ``out`` (name -> folder)."""
    trained = world / "drafters" / "trained"
    made = {}
    for name in DRAFTERS:
        folder = out / name
        if name == "converted":
            _cli(["convert", str(trained), str(folder), "--to", "llamacpp"])
        else:
            shutil.copytree(trained, folder)
            if name == "norm-before-residual-flipped":
                _edit_config(folder, _flip_norm)
            elif name == "rope-base-10000":
                _edit_config(folder, _rope_10000)
            elif name == "aux-order-rotated":
                _rotate_aux(folder)
        made[name] = folder
    return made


def states(world: Path, reqs: list[dict], out: Path, key: str = "recorded") -> Path:
    """The target's states on each request's prompt and continuation (``key``: "recorded", the world's greedy
    continuation, or "served", what the server produced), with the loss mask on the continuation: eagle3-checks record
    with the continuation given (a forward pass each, no generation). Returns the folder (--data and --loss-mask)."""
    prompts = out.with_suffix(".jsonl")
    prompts.write_text("".join(json.dumps({"input_ids": r["prompt"], "response_ids": r[key]}) + "\n" for r in reqs))
    _cli(["record", str(world / "target"), "--prompts", str(prompts), "--out", str(out), "--drafter",
          str(world / "drafters" / "trained")])
    return out


def _cli(argv: list[str]) -> None:
    """eagle3-checks ARGV in this process, its report discarded; an exit status other than 0 raises."""
    import contextlib
    import io

    from eagle3_checks.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(argv)
    if code:
        raise RuntimeError(f"eagle3-checks {' '.join(argv)} exited {code}: {err.getvalue()[-2000:]}")


NEAR_TIE = 1e-3  # a top-2 logit gap of the drafter below this may be broken the other way by a server's float order
LLAMACPP = "llamacpp@0.3.36"


def reading_walks(world: Path, drafter: Path, data: Path) -> list:
    """The llama.cpp reading of ``drafter`` on ``data`` (states with their loss mask; labels the recorded tokens,
    which on a server's own text are the tokens its target produced), each sequence with its top-2 logit gaps: the
    reading's figures (acceptance.evaluate.Figures), walked with llama.cpp's drafting."""
    from eagle3_checks.acceptance import LossMasks, evaluate, expect_of, readings, samples
    from eagle3_checks.drafter.checkpoint import open_checkpoint

    ckpt = open_checkpoint(drafter)
    named = readings(ckpt, [LLAMACPP])
    expect = expect_of(named[0][1])
    result = evaluate(ckpt, named, samples(data, expect, LossMasks(data)), K, margins=True)
    return result.readings[1]


def disagreements(figures, served: list[list[list[int]]]) -> list[dict]:
    """Where the reading's walk (``figures``) and the server's verify steps (per request, [drafted, accepted] each)
    part: per request, the first verify step that differs, its row, the draft step the two disagree on and the
    reading's top-2 logit gap there."""
    out = []
    for i, (seq, steps) in enumerate(zip(figures.sequences, served, strict=True)):
        trail = seq.walked(figures.drafting).trail
        ours = [[d, a] for _, d, a in trail]
        if ours == steps:
            continue
        j = next(n for n in range(min(len(ours), len(steps)) + 1)
                 if n >= len(ours) or n >= len(steps) or ours[n] != steps[n])
        if j >= len(ours) or j >= len(steps):
            out.append({"request": i, "verify_step": j, "row": None, "step": None, "gap": None})
            continue
        row = trail[j][0]
        step = min(ours[j][1], steps[j][1])
        gap = seq.margin[step][row] if seq.margin and step < len(seq.margin) else None
        out.append({"request": i, "verify_step": j, "row": row, "step": step, "gap": gap})
    return out
