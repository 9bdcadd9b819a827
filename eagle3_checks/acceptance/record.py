"""``eagle3-checks record TARGET --prompts FILE --out DIR``: recorded target states for a user who serves a drafter and
has no training dumps, written in speculators 0.9.0's offline format so that ``accept --data DIR --loss-mask DIR``
reads them as they are (and speculators trains from them).

A transformers target (``AutoModelForCausalLM``) continues each prompt greedily (``--max-new-tokens``), or takes the
continuation a prompt line gives (``"response_ids"``: what a server produced), then one forward pass over prompt and
continuation records, with hooks on its decoder layers:

* each aux id L as vLLM counts it: **the input of decoder layer L** (id L = the residual stream entering layer L;
  id N, the layer count, = the output of the last layer). speculators records its states through vLLM's capture
  (TRAINING_DATA.md section 1.2), so a speculators drafter's ids mean exactly this;
* then the last decoder layer's output **before the final norm** (the last slot of ``hidden_states``,
  ``speculators/train/data.py:324-333``: its trainer applies ``verifier_norm`` itself). transformers'
  ``output_hidden_states`` is not used: its last entry is taken after the final norm.

DIR gets what speculators' ``ArrowDataset`` reads (``speculators/train/data.py:148-200``: ``load_from_disk(DIR)``, the
states under ``DIR/hidden_states/`` by its FileTransfer, ``hs_connectors/transfer.py:141-143``):

* ``hidden_states/hs_<i>.safetensors`` for the i-th prompt: ``hidden_states`` [T, A+1, H] in the target's dtype (the
  aux layers ascending, as vLLM sorts them, then the last state) and ``token_ids`` int64 [T];
* the prepared-data folder (``datasets``' ``save_to_disk`` layout: ``data-00000-of-00001.arrow``, an Arrow stream of
  ``input_ids``, ``loss_mask`` and ``seq_len`` per row, with ``state.json`` and ``dataset_info.json``): row i pairs
  with ``hs_<i>``, its loss mask 0 on the prompt and 1 on the continuation (as speculators' regenerated responses
  are masked, ``cli/regenerate_responses.py:323-329``).

Streamed: one prompt's states in memory at a time; the Arrow file is written a record batch per prompt. Everything is
written into a temporary sibling of DIR and moved into place at the end: an error or an interrupt leaves nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import field
from pathlib import Path
from typing import Any

from .. import engines
from ..drafter.checkpoint import open_any
from ..engines.profile import Target
from ..errors import UsageError
from ..fast_dataclass import dataclass
from ..storage.output import Interrupted, move_into_place, remove_stale, signals_raise

ARROW = "data-00000-of-00001.arrow"
STATES = "hidden_states"  # the folder speculators' FileTransfer reads (hs_connectors/transfer.py:141-143)
_FEATURES = {"input_ids": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"},
             "loss_mask": {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"},
             "seq_len": {"dtype": "int64", "_type": "Value"}}


@dataclass
class Recorded:
    out: Path
    samples: int = 0
    tokens: int = 0  # prompt and continuation tokens recorded
    generated: int = 0  # continuation tokens
    seconds: float = 0.0
    layers: list[int] = field(default_factory=list)  # the aux ids, vLLM's count
    resumed: int = 0  # prompts an interrupted run had recorded, taken over


def parse_layers(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--layers {text!r}: give comma-separated layer ids, as 2,16,29") from None
    if not ids:
        raise UsageError("--layers: no layer id given")
    if len(set(ids)) != len(ids):
        raise UsageError(f"--layers {text!r}: an id appears twice")
    return ids


def drafter_layers(ckpt_path: str, target_config: dict[str, Any]) -> tuple[list[int], str]:
    """The aux ids (vLLM's count) a drafter was trained on, read as the gate reads them (engines.trained_aux: the
    field its trainer writes, in its trainer's convention), and how they were known."""
    ckpt = open_any(ckpt_path)
    if ckpt.config_raw is None:
        raise UsageError(f"--drafter {ckpt_path}: no readable config.json")
    text: dict[str, Any] = target_config["text_config"] if isinstance(target_config.get("text_config"), dict) \
        else target_config
    archs = target_config.get("architectures") or []
    target = Target(archs[0] if archs else None, text.get("num_hidden_layers"))
    trained = engines.trained_aux(ckpt, target=target)
    if trained.layers is None:
        readings = "; ".join(f"{who}: --layers {','.join(str(x + 1) for x in layers)}"
                             for who, layers in trained.possible().items())
        raise UsageError(f"--drafter {ckpt_path}: which target layers it was trained on is unknown (its config does "
                         f"not say how its trainer counted the ids {trained.ids}); give them with --layers, as vLLM "
                         "counts them" + (f" ({readings})" if readings else ""))
    return sorted(layer + 1 for layer in trained.layers), trained.how


def prompt_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The prompts file, streamed: (line number, item) for each non-empty JSON line, each {"text": ...} or
    {"input_ids": [...]}, optionally with "response_ids": [...] (a continuation to record as it is). One line in
    memory at a time. Raises UsageError naming the line."""
    try:
        fh = open(path, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--prompts {path}: cannot be read ({exc.__class__.__name__})") from None
    with fh:
        n = 0
        try:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    yield n, _prompt_item(line, f"--prompts {path}:{n}")
        except UnicodeDecodeError:
            raise UsageError(f"--prompts {path}:{n + 1}: not UTF-8 text") from None


def _prompt_item(line: str, where: str) -> dict[str, Any]:
    try:
        item = json.loads(line)
    except ValueError:
        raise UsageError(f"{where}: not a JSON object") from None
    if not isinstance(item, dict) or ("text" in item) == ("input_ids" in item):
        raise UsageError(f'{where}: give one of "text" or "input_ids"')
    if "text" in item and not isinstance(item["text"], str):
        raise UsageError(f'{where}: "text" is not a string')
    for key in ("input_ids", "response_ids"):
        ids = item.get(key)
        if ids is not None and (not isinstance(ids, list) or not ids or
                                not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)):
            raise UsageError(f'{where}: "{key}" must be a non-empty list of token ids')
    return item


_LAYERS: tuple[Callable[[Any], Any], ...] = (lambda m: m.model.layers, lambda m: m.get_decoder().layers,
                                              lambda m: m.transformer.h)  # where transformers models keep them


def _decoder_layers(model: Any) -> Any:
    for get in _LAYERS:
        try:
            layers = get(model)
        except AttributeError:
            continue
        if layers is not None and len(layers):
            return layers
    raise UsageError("the target's decoder layers were not found (model.model.layers): record reads Llama-, Qwen- "
                     "and Mistral-style transformers models")


def load_target(target: str, device: str) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer or None, config dict). Raises UsageError."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # record reports its own progress; errors stay one line (transformers' logging is untyped where it is installed)
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call, unused-ignore]
    path = Path(target)
    if not (path / "config.json").is_file():
        raise UsageError(f"TARGET {target}: no config.json (give the target checkpoint's folder, as transformers "
                         "saves it)")
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        raise UsageError(f"TARGET {target}: config.json cannot be read by transformers ({exc})"[:300]) from None
    kwargs: dict[str, Any] = {"dtype": "auto"}
    if device == "auto":
        kwargs["device_map"] = "auto"  # across the GPUs accelerate sees
    auto: Any = AutoModelForCausalLM
    try:
        model: Any = auto.from_pretrained(str(path), **kwargs)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise UsageError(f"TARGET {target}: transformers cannot load it ({exc})"[:400]) from None
    if device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError(f"--device {device}: torch sees no GPU here")
        model = model.to(device)
    model.eval()
    loader: Any = AutoTokenizer
    try:
        tokenizer = loader.from_pretrained(str(path))
    except (OSError, ValueError, KeyError, TypeError):
        tokenizer = None
    return model, tokenizer, config


def prompt_ids(item: dict[str, Any], tokenizer: Any, vocab: int, where: str) -> list[int]:
    if "input_ids" in item:
        ids = list(item["input_ids"])
    else:
        if tokenizer is None:
            raise UsageError(f'{where}: a "text" prompt needs the target\'s tokenizer, which TARGET does not carry; '
                             'give "input_ids"')
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template([{"role": "user", "content": item["text"]}], tokenize=True,
                                                add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ids = [int(i) for i in ids]
        else:
            ids = [int(i) for i in tokenizer(item["text"])["input_ids"]]
    if not ids:
        raise UsageError(f"{where}: the prompt has no tokens")
    bad = [i for i in ids if i >= vocab]
    if bad:
        raise UsageError(f"{where}: token id {bad[0]} is outside the target vocabulary [0, {vocab})")
    return ids


class _Capture:
    """Forward hooks on the decoder layers: the input of layer L for each id L < N, the output of layer N-1 (id N and
    the last state, before the final norm)."""

    def __init__(self, layers: Any, ids: list[int]) -> None:
        self.n, self.ids = len(layers), ids
        self.got: dict[int, Any] = {}
        self.handles = [layers[i].register_forward_pre_hook(self._pre(i), with_kwargs=True)
                        for i in sorted({i for i in ids if i < self.n})]
        self.handles.append(layers[-1].register_forward_hook(self._post))

    def _pre(self, i: int) -> Callable[[Any, tuple[Any, ...], dict[str, Any]], None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x: Any = args[0] if args else kwargs["hidden_states"]
            self.got[i] = x.detach()
        return hook

    def _post(self, module: Any, args: tuple[Any, ...], output: Any) -> None:
        self.got[self.n] = (output[0] if isinstance(output, tuple) else output).detach()

    def states(self) -> Any:
        import torch

        slots = [self.got[i] for i in self.ids] + [self.got[self.n]]
        return torch.stack([s[0] for s in slots], dim=1)  # [T, A+1, H]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _arrow_writer(path: Path) -> tuple[Any, Any]:
    try:
        import pyarrow as pa
    except ImportError:
        raise UsageError("record writes speculators' prepared-data folder with pyarrow: pip install pyarrow "
                         "(speculators' own install has it)") from None
    sink = pa.OSFile(str(path), "wb")
    return pa.ipc.new_stream(sink, _schema()), sink


def _schema() -> Any:
    import pyarrow as pa

    meta = json.dumps({"info": {"features": _FEATURES}})
    return pa.schema([("input_ids", pa.list_(pa.int64())), ("loss_mask", pa.list_(pa.int64())),
                      ("seq_len", pa.int64())], metadata={"huggingface": meta})


PARTIAL = ".partial"  # OUT.partial: the prompts recorded so far, kept when a run is interrupted (the next run resumes)
ROWS = "rows.jsonl"  # in OUT.partial: one line per recorded prompt, {"ids", "prompt"}, in order
RUN = "run.json"  # in OUT.partial: what the run records (target, prompts, layers, ...): a resume must match it
PROGRESS_EVERY = 30.0  # seconds between progress lines off a terminal


def record(target: str, prompts: Path, out: Path, layers: list[int] | None = None, drafter: str | None = None,
           max_new_tokens: int = 128, device: str = "cpu", progress: bool = False, restart: bool = False,
           every: float = PROGRESS_EVERY, hard_stop: bool = False) -> Recorded:
    """Record the target's states on each prompt into ``out`` (see the module). Each prompt is recorded into
    OUT.partial as it finishes; an interrupted run keeps them there and the next run with the same arguments resumes
    (``restart``: discard them); OUT appears whole at the end. ``progress``: a progress line (a terminal); else a line
    at the start and every ``every`` seconds. SIGINT and SIGTERM stop the run: with ``hard_stop`` (the command) within
    a second at any point, even inside one long forward pass of the target (a thread waits for them, discards the
    prompt under way and exits the process with 128 + the signal); else between the target's steps, raising
    Interrupted. Raises UsageError."""
    if max_new_tokens < 0:
        raise UsageError(f"--max-new-tokens must be 0 or more, not {max_new_tokens}")
    if out.exists() or out.is_symlink():
        raise UsageError(f"--out {out} exists; give a new folder (record writes it whole or not at all)")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: its parent folder does not exist")
    partial = out.with_name(out.name + PARTIAL)
    if restart:
        shutil.rmtree(partial, ignore_errors=True)
    remove_stale(out)
    resumed = partial.is_dir()  # an interrupted run's: never removed for an error of this one
    (partial / STATES).mkdir(parents=True, exist_ok=True)
    job = {"target": str(target), "prompts": str(prompts), "partial": str(partial), "layers": layers,
           "drafter": drafter, "max_new_tokens": max_new_tokens, "device": device}
    run = _Run(Recorded(out), partial, progress, every)
    try:
        with (_Stop(partial, run) if hard_stop else signals_raise()) as stop:
            for msg in _work(job):
                run.take(msg)
            with getattr(stop, "lock", contextlib.nullcontext()):  # a signal now waits for OUT to be whole
                for name in (ROWS, RUN):
                    (partial / name).unlink(missing_ok=True)
                move_into_place(partial, out)
    except UsageError as exc:
        kept = _recorded(partial)
        if resumed:
            raise
        if not kept:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        raise UsageError(f"{exc} ({kept} prompts recorded are kept in {partial}; the same command resumes)") from None
    except Interrupted as exc:
        exc.said = _interrupted(partial, run.total)  # type: ignore[attr-defined]
        raise
    done = run.done
    if progress and run.total:
        print(f"\rrecord: {done.samples} prompts recorded{' ' * 12}", file=sys.stderr, flush=True)
    done.seconds = time.perf_counter() - run.start
    if resumed:
        done.resumed = run.before
    return done


class _Stop:
    """SIGINT and SIGTERM stop the command at any point, also while the main thread is inside one long forward pass
    of the target, where a Python signal handler cannot run (it runs between bytecodes): Python's own C-level handler
    writes each signal's number to a wakeup socket at once, whatever thread the kernel gave it to
    (signal.set_wakeup_fd), and a thread waiting on that socket discards the prompt under way, says what is kept and
    ends the process with 128 + the signal. ``lock`` is held where the files must not be cut (OUT moved into place)."""

    def __init__(self, partial: Path, run: _Run) -> None:
        self.partial, self.run = partial, run
        self.lock = threading.Lock()
        self.signals = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> _Stop:
        import socket

        self.read, self.write = socket.socketpair()
        self.write.setblocking(False)
        self.handlers = {s: signal.signal(s, lambda signum, frame: None) for s in self.signals}
        self.wakeup = signal.set_wakeup_fd(self.write.fileno(), warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._wait, name="record-stop", daemon=True)
        self.thread.start()
        return self

    def _wait(self) -> None:
        while True:
            got = self.read.recv(1)
            signum = got[0] if got else 0
            if signum in self.signals:
                break
            if not got or signum == 0:  # __exit__: the run is over
                return
        with self.lock:
            said = _interrupted(self.partial, self.run.total)
            print(f"\neagle3-checks: interrupted by signal {signum}; {said}", file=sys.stderr, flush=True)
            os._exit(128 + signum)

    def __exit__(self, *exc: Any) -> None:
        signal.set_wakeup_fd(self.wakeup)
        for s, h in self.handlers.items():
            signal.signal(s, h)
        try:
            self.write.send(b"\0")
        except OSError:
            pass
        self.thread.join(timeout=5)
        self.read.close()
        self.write.close()


@dataclass
class _Run:
    """The parent's view of a run: the worker's messages taken in, progress said."""

    done: Recorded
    partial: Path
    progress: bool  # a terminal: a progress line; else a line at the start and every ``every`` seconds
    every: float
    total: int = 0
    before: int = 0
    start: float = field(default_factory=time.perf_counter)
    last: float = field(default_factory=time.perf_counter)

    def take(self, msg: dict[str, Any]) -> None:
        kind, done = msg.get("kind"), self.done
        if kind == "start":
            self.total, self.before, done.layers = msg["total"], msg["done"], msg["layers"]
            said = f" ({self.before} recorded before, in {self.partial}: resumed)" if self.before else ""
            _say(f"record: {self.total} prompts to record{said}", self.progress)
        elif kind in ("prompt", "finished"):
            done.samples, done.tokens, done.generated = msg["samples"], msg["tokens"], msg["generated"]
            if self.progress and kind == "prompt":
                print(f"\rrecord: prompt {done.samples} of {self.total}", end="", file=sys.stderr, flush=True)
        now = time.perf_counter()
        if not self.progress and self.total and now - self.last >= self.every and kind != "finished":
            self.last = now
            _say(f"record: {done.samples} of {self.total} prompts"
                 + _left(done.samples - self.before, self.total - done.samples, now - self.start), False)


def _say(line: str, terminal: bool) -> None:
    print(("\r" if terminal else "") + line, file=sys.stderr, flush=True)


def _left(recorded: int, remaining: int, seconds: float) -> str:
    if recorded <= 0 or seconds <= 0:
        return ""
    return f", about {remaining * seconds / recorded:.0f} s left"


def _recorded(partial: Path) -> int:
    try:
        with open(partial / ROWS, "rb") as fh:
            return sum(1 for line in fh if line.endswith(b"\n"))
    except OSError:
        return 0


def _interrupted(partial: Path, total: int) -> str:
    """After the worker was killed: the prompt it was on discarded; what is kept, said."""
    for tmp in (partial / STATES).glob("*.tmp"):
        tmp.unlink(missing_ok=True)
    kept = _recorded(partial)
    if not kept:
        shutil.rmtree(partial, ignore_errors=True)
        return "nothing was written"
    return (f"{kept}{f' of {total}' if total else ''} prompts recorded are kept in {partial}: the same command resumes "
            "(--restart starts over)")


# ----- the run: the target on each prompt ------------------------------------------------------------------------

def _work(job: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Load the target, check every prompt (streamed: its length against the target's context, its ids against the
    vocabulary), then record each prompt not yet in OUT.partial: its states written to a temporary file and renamed,
    then its row appended to rows.jsonl; at the end the Arrow file and the datasets metadata. Yields what happened
    (_Run.take): start, prompt, finished."""
    import torch
    from safetensors.torch import save_file

    prompts, partial = Path(job["prompts"]), Path(job["partial"])
    model, tokenizer, config = load_target(job["target"], job["device"])
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    n_layers = len(_decoder_layers(model))
    layers, how = job["layers"], "--layers"
    if job["drafter"] is not None:
        layers, how = drafter_layers(job["drafter"], config)
    assert layers is not None
    bad = [i for i in layers if not 0 <= i <= n_layers]
    if bad:
        raise UsageError(f"layer id {bad[0]} ({how}) is outside 0..{n_layers}: the target has {n_layers} decoder "
                         "layers (id L is the input of layer L, id N the last layer's output)")
    layers = sorted(layers)
    vocab = int(text.get("vocab_size") or model.get_output_embeddings().weight.shape[0])
    context = text.get("max_position_embeddings")
    new_tokens = job["max_new_tokens"]
    total = 0
    for n, item in prompt_lines(prompts):  # the whole file checked before any prompt runs
        where = f"--prompts {prompts}:{n}"
        ids, response = _prepared(item, tokenizer, vocab, where)
        length = len(ids) + (len(response) if response else new_tokens)
        if isinstance(context, int) and length > context:
            raise UsageError(f"{where}: {len(ids)} prompt tokens + {length - len(ids)} "
                             f"{'given' if response else 'new'} exceed the target's context of {context} tokens "
                             "(max_position_embeddings): shorten the prompt or lower --max-new-tokens")
        total += 1
    if not total:
        raise UsageError(f"--prompts {prompts}: no prompt in it")
    run = {"target": str(Path(job["target"]).resolve()), "config": config, "prompts": sha256_of(prompts),
           "layers": layers, "max_new_tokens": new_tokens}
    before = _resume(partial, run)
    yield {"kind": "start", "total": total, "done": before, "layers": layers}
    eos = getattr(model.generation_config, "eos_token_id", None)
    pad = getattr(model.generation_config, "pad_token_id", None)
    pad = pad if pad is not None else (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
    first_device = next(model.parameters()).device
    capture = _Capture(_decoder_layers(model), layers)
    counts = _counts(partial)
    with open(partial / ROWS, "a") as rows:
        for i, (n, item) in enumerate(prompt_lines(prompts)):
            if i < before:
                continue
            ids, response = _prepared(item, tokenizer, vocab, f"--prompts {prompts}:{n}")
            x = torch.tensor([ids], device=first_device)
            with torch.no_grad():
                if response:
                    seq = torch.tensor(ids + response, device=first_device)
                elif new_tokens:
                    seq = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                                         do_sample=False, pad_token_id=pad)[0]
                else:
                    seq = x[0]
                capture.got.clear()
                model(seq[None])
            states = capture.states()
            tokens = seq.to("cpu", torch.int64)
            if not bool(torch.isfinite(states).all()):
                raise UsageError(f"--prompts {prompts}:{n}: the target's states are not finite (NaN or Inf): is the "
                                 "checkpoint intact, its dtype right for --device?")
            final = partial / STATES / f"hs_{i}.safetensors"
            tmp = final.with_name(final.name + ".tmp")
            save_file({"hidden_states": states.to("cpu").contiguous(), "token_ids": tokens.contiguous()}, str(tmp))
            os.replace(tmp, final)
            rows.write(json.dumps({"ids": tokens.tolist(), "prompt": len(ids)}) + "\n")
            rows.flush()
            counts[0] += 1
            counts[1] += len(tokens)
            counts[2] += len(tokens) - len(ids)
            yield {"kind": "prompt", "samples": counts[0], "tokens": counts[1], "generated": counts[2]}
    capture.remove()
    writer, sink = _arrow_writer(partial / ARROW)
    try:
        with open(partial / ROWS) as fh:
            for line in fh:
                row = json.loads(line)
                _write_row(writer, row["ids"], [0] * row["prompt"] + [1] * (len(row["ids"]) - row["prompt"]))
    finally:
        writer.close()
        sink.close()
    _write_meta(partial, counts[0])
    yield {"kind": "finished", "samples": counts[0], "tokens": counts[1], "generated": counts[2]}


def _prepared(item: dict[str, Any], tokenizer: Any, vocab: int, where: str) -> tuple[list[int], list[int]]:
    """A prompt's ids and its given continuation ("response_ids", recorded as it is; empty: generate one)."""
    ids = prompt_ids(item, tokenizer, vocab, where)
    response = list(item.get("response_ids") or [])
    bad = [t for t in response if t >= vocab]
    if bad:
        raise UsageError(f"{where}: response token id {bad[0]} is outside the target vocabulary [0, {vocab})")
    return ids, response


def sha256_of(path: Path) -> str:
    """A file's sha256, read a MiB at a time."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _resume(partial: Path, run: dict[str, Any]) -> int:
    """The prompts OUT.partial already holds for this run (0 for a new one); a partial run of other arguments is
    refused. Files past the last complete row (a prompt interrupted after its states were written) are removed."""
    path = partial / RUN
    if path.is_file():
        try:
            stated = json.loads(path.read_text())
        except ValueError:
            stated = None
        if stated != run:
            differs = [k for k in run if not isinstance(stated, dict) or stated.get(k) != run[k]]
            raise UsageError(f"{partial} holds an interrupted run of other arguments ({', '.join(differs)} differ): "
                             "remove it, or pass --restart to start over")
    else:
        path.write_text(json.dumps(run))
    rows = _recorded(partial)
    with open(partial / ROWS, "ab") as fh:  # cut a row written in part
        fh.truncate(sum(len(line) for line in _lines(partial / ROWS, rows)))
    for f in (partial / STATES).iterdir():
        m = re.match(r"^hs_(\d+)\.safetensors$", f.name)
        if not m or int(m.group(1)) >= rows:
            f.unlink()
    return rows


def _lines(path: Path, n: int) -> Iterator[bytes]:
    try:
        with open(path, "rb") as fh:
            for i, line in enumerate(fh):
                if i >= n:
                    return
                yield line
    except OSError:
        return


def _counts(partial: Path) -> list[int]:
    """[prompts, tokens, generated] of the rows OUT.partial holds."""
    out = [0, 0, 0]
    try:
        with open(partial / ROWS) as fh:
            for line in fh:
                row = json.loads(line)
                out[0] += 1
                out[1] += len(row["ids"])
                out[2] += len(row["ids"]) - row["prompt"]
    except OSError:
        pass
    return out


def _write_row(writer: Any, ids: list[int], mask: list[int]) -> None:
    import pyarrow as pa

    writer.write_batch(pa.record_batch([pa.array([ids], pa.list_(pa.int64())), pa.array([mask], pa.list_(pa.int64())),
                                        pa.array([len(ids)], pa.int64())], schema=_schema()))


def _write_meta(folder: Path, rows: int) -> None:
    """state.json and dataset_info.json as ``datasets``' save_to_disk writes them (its load_from_disk reads both), in
    the torch format speculators' prepare_data sets before saving (data_generation/preprocessing.py:638,
    cli/prepare_data.py:243): its ArrowDataset compares the rows' input_ids with torch.equal (train/data.py:314)."""
    state: dict[str, Any] = {"_data_files": [{"filename": ARROW}], "_fingerprint": f"eagle3-checks-record-{rows}",
             "_format_columns": None, "_format_kwargs": {}, "_format_type": "torch", "_output_all_columns": False,
             "_split": None}
    info = {"citation": "", "description": "", "features": _FEATURES, "homepage": "", "license": ""}
    (folder / "state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def rate(done: Recorded) -> str:
    per = done.tokens / done.seconds if done.seconds > 0 else math.inf
    return (f"recorded {done.samples} prompts ({done.tokens} tokens, {done.generated} generated; aux ids "
            f"{','.join(map(str, done.layers))}) in {done.seconds:.1f} s, {per:.0f} tokens/s")

