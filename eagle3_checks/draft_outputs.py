"""``eagle3-checks forward``: run one engine's reading on inputs from a safetensors file, write the logits.

IN holds ``aux_hidden_states`` (T, A*Ht), ``input_ids`` (T,), optional ``position_ids`` (T,) (default arange(T))
and ``inputs_embeds`` (T, H) (required when the engine embeds with no embed_tokens of the checkpoint's: it has none,
or the engine uses the target's, as SGLang does). OUT gets ``logits`` (T, V) float32
for step 0 over the target vocabulary, -inf outside the draft vocabulary, and ``logits_step_K`` for later steps.
Every problem with the inputs, or a checkpoint the engine cannot read, is a UsageError (exit 2). Logits holding
NaN or +inf are still written (they are what was asked for, and show where it breaks), and the command then exits 1
naming each step and the first place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import engines
from .drafter.checkpoint import Checkpoint
from .errors import UsageError
from .live import CannotJudge
from .live.compute import run_live
from .numerics.draft_steps import ForwardError, Inputs, Weights, compare, nonfinite, run
from .storage.folder import not_there, real_path, within
from .storage.safetensors import from_numpy, load_array, read_header, write_safetensors


def check_inputs_path(path: Path) -> None:
    """Raise UsageError unless ``path`` (--inputs) is a file; asked before torch is imported."""
    if not path.is_file():
        raise UsageError(f"--inputs {path}: " + ("not a file" if path.exists() else not_there(path)))


def no_embedding(ckpt: Checkpoint, reading: Any) -> str:
    """Why the reading has no embedding of the drafter's own for the drafted tokens: the checkpoint has none, or the
    engine embeds with the target's instead of the checkpoint's (SGLang's worker replaces a drafter's embed_tokens
    with the target's after load: the reading says where, as its release's file and line)."""
    name = ckpt.roles.get("embed_tokens.weight")
    if name is None:
        return f"{ckpt.display} has no embed_tokens"
    how = reading.replaced.get(name) or reading.ignored.get(name) or "it does not load it"
    return (f"{reading.engine} {reading.version} embeds with the target's embed_tokens, not the checkpoint's {name} "
            f"({how})")


def read_inputs(path: Path, reading: Any, target_embedding: Any = None, why_no_embedding: str = "") -> Inputs:
    import torch

    check_inputs_path(path)
    header = read_header(path, str(path))
    if header.problems:
        raise UsageError(f"--inputs {path}: {header.problems[0].message}")
    entries = header.entries

    def get(name: str, kind: str, ndim: int, required: bool = True):
        e = entries.get(name)
        if e is None:
            if required:
                raise UsageError(f"--inputs {path}: no tensor {name!r} (has: {', '.join(entries) or 'none'})")
            return None
        if e.kind not in kind:
            raise UsageError(f"--inputs {path}: {name} is {e.dtype}, expected "
                             f"{'a float' if kind == 'f' else 'an integer'} tensor")
        if len(e.shape) != ndim:
            raise UsageError(f"--inputs {path}: {name} has shape {list(e.shape)}, expected {ndim} dimension(s)")
        try:
            return torch.from_numpy(load_array(e).copy())
        except (OSError, EOFError, ValueError) as exc:
            raise UsageError(f"--inputs {path}: cannot read {name}: {exc}") from exc

    aux = get("aux_hidden_states", "f", 2).float()
    ids = get("input_ids", "iu", 1).long()
    t = aux.shape[0]
    if t == 0:
        raise UsageError(f"--inputs {path}: aux_hidden_states has no tokens")
    if ids.shape[0] != t:
        raise UsageError(f"--inputs {path}: input_ids has {ids.shape[0]} tokens, aux_hidden_states {t}")
    pos = get("position_ids", "iu", 1, required=False)
    pos = torch.arange(t) if pos is None else pos.long()
    if pos.shape[0] != t:
        raise UsageError(f"--inputs {path}: position_ids has {pos.shape[0]} entries, expected {t}")
    if int(pos.min()) < 0:
        raise UsageError(f"--inputs {path}: position_ids must not be negative (found {int(pos.min())})")
    embeds = get("inputs_embeds", "f", 2, required=False)
    if embeds is not None and tuple(embeds.shape) != (t, reading.hidden_size):
        raise UsageError(f"--inputs {path}: inputs_embeds has shape {list(embeds.shape)}, expected "
                         f"[{t}, {reading.hidden_size}]")
    if embeds is None and "embed_tokens.weight" not in reading.tensors and target_embedding is None:
        raise UsageError(f"--inputs {path}: {why_no_embedding or 'the checkpoint has no embed_tokens'}, so "
                         "inputs_embeds (T, H) is required (or --target, the target checkpoint whose embed_tokens "
                         "engines use)")
    if int(ids.min()) < 0 or int(ids.max()) >= (reading.vocab_size or 0):
        raise UsageError(f"--inputs {path}: input_ids must lie in [0, {reading.vocab_size})")
    return Inputs(aux, ids, pos, None if embeds is None else embeds.float(), target_embedding=target_embedding)


def run_forward_files(ckpt: Checkpoint, engine: str, inputs_path: Path, out_path: Path, steps: int | None,
                      target_embedding: Any = None, default_steps: int = 2,
                      live: tuple[str, Path] | None = None) -> tuple[list[str], list[str], str | None]:
    """Write the logits; returns (the tensor names written, one line per step whose logits hold NaN or +inf, a note
    when ``steps`` (None: ``default_steps``) was cut to what the checkpoint allows, or what computed them).
    ``target_embedding``: the target's embed_tokens, for a checkpoint without its own. ``live``: (the interpreter of
    the installed engine, the target config it serves beside): the logits written are the engine's own compute
    (eagle3_checks.live.compute), and the note says how the modelled reading compares."""
    if ckpt.past_end:
        raise UsageError(f"{ckpt.display}: {ckpt.past_end[0]} runs past the end of its file (truncated); "
                         "eagle3-checks check names every problem")
    if within(out_path, ckpt.path, "--out"):
        raise UsageError(f"--out {out_path} is inside the checkpoint, which is never modified; write the logits "
                         "elsewhere")
    if real_path(out_path, "--out") == real_path(inputs_path, "--inputs"):
        raise UsageError(f"--out {out_path} is the --inputs file; write the logits elsewhere")
    reading = engines.read(ckpt, engine)
    if reading.not_modelled:
        raise UsageError(f"{engine}: not modelled: {reading.not_modelled}")
    if not reading.servable:
        problems = reading.refusals + [f"{role}: {how}" for role, how in reading.unfilled.items()
                                       if not how.startswith("shared")]
        raise UsageError(f"{reading.engine} {reading.version} cannot read {ckpt.display} as a drafter: "
                         + "; ".join(problems))
    why = no_embedding(ckpt, reading)
    inputs = read_inputs(inputs_path, reading, target_embedding, why)
    note = None
    embeds = "embed_tokens.weight" in reading.tensors or target_embedding is not None
    if steps is None:
        steps = default_steps if embeds else 1
        if not embeds:
            note = (f"ran 1 draft step: {why}, and later steps embed the drafted tokens with the target's: pass "
                    "--target with the target checkpoint for more")
    elif steps > 1 and not embeds:
        raise UsageError(f"--steps {steps}: {why}, and later steps embed the drafted tokens with the target's: pass "
                         "--target with the target checkpoint (only its embed_tokens rows are read), or --steps 1")
    try:
        logits = run(reading, Weights(ckpt), inputs, steps)
    except ForwardError as exc:
        raise UsageError(f"{engine}: {exc}") from exc
    metadata = {"engine": reading.engine, "engine_version": reading.version}
    if live is not None:
        logits, said = _own_compute(ckpt, reading, inputs, steps, logits, live)
        note = f"{note}; {said}" if note else said
        metadata["computed_by"] = "its own code"
    out = {"logits" if k == 0 else f"logits_step_{k}": from_numpy(x.numpy()) for k, x in enumerate(logits)}
    try:
        write_safetensors(out_path, out, metadata)
    except OSError as exc:
        raise UsageError(f"--out {out_path}: cannot write: {exc.strerror or exc}") from exc
    broken = [f"{'logits' if k == 0 else f'logits_step_{k}'} (step {k}): {where}" for k, x in enumerate(logits)
              if (where := nonfinite(x))]
    return list(out), broken, note


def _own_compute(ckpt: Checkpoint, reading: Any, inputs: Any, steps: int, modelled: list,
                 live: tuple[str, Path]) -> tuple[list, str]:
    """The installed engine's own logits on ``inputs`` (greedy later steps, as it drafts), and a note comparing the
    modelled reading's (``modelled``) with them. Raises UsageError where the engine cannot compute them."""
    if inputs.inputs_embeds is not None:
        raise UsageError("--engine NAME@installed: the engine embeds token ids with its own code; give input_ids and "
                         "--target (its embed_tokens) instead of inputs_embeds")
    run: dict[str, Any] = {"aux_hidden_states": inputs.aux_hidden_states, "input_ids": inputs.input_ids,
                           "position_ids": inputs.position_ids}
    if "embed_tokens.weight" not in reading.tensors:
        import torch

        run["embed_table"] = torch.from_numpy(inputs.target_embedding.rows(list(range(reading.vocab_size))))
    python, target_config = live
    try:
        computed = run_live(reading.engine, python, Path(ckpt.path), target_config, [run], steps)
    except CannotJudge as exc:
        raise UsageError(f"--engine {reading.engine}@installed: {exc}") from None
    rec = computed.record
    if "steps" not in rec or not computed.outputs:
        raised = rec.get("raised") or {}
        why = rec.get("cannot_judge") or rec.get("not_computed") or (
            f"its own code raised {raised.get('type')}: {raised.get('message', '')[:300]}" if raised else
            "it computes NaN with parameters it leaves unwritten")
        raise UsageError(f"{computed.said_by} did not compute the drafter: {why}")
    own = computed.logits(0)
    bad = [d for d in (compare(a, b, k, ("the modelled reading", computed.said_by))
                       for k, (a, b) in enumerate(zip(modelled, own, strict=True))) if not d.ok]
    return own, (f"computed by {computed.said_by} ({computed.seconds:.0f} s); the modelled reading "
                 + ("gives the same logits" if not bad else f"differs: {bad[0].describe()}"))
