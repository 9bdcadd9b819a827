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

import json
import math
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import engines
from ..drafter.checkpoint import open_any
from ..engines.profile import Target
from ..errors import UsageError
from ..storage.output import move_into_place, remove_stale, signals_raise, temporary_sibling

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


def drafter_layers(ckpt_path: str, target_config: dict) -> tuple[list[int], str]:
    """The aux ids (vLLM's count) a drafter was trained on, read as the gate reads them (engines.trained_aux: the
    field its trainer writes, in its trainer's convention), and how they were known."""
    ckpt = open_any(ckpt_path)
    if ckpt.config_raw is None:
        raise UsageError(f"--drafter {ckpt_path}: no readable config.json")
    text: dict = target_config["text_config"] if isinstance(target_config.get("text_config"), dict) \
        else target_config
    archs = target_config.get("architectures") or []
    target = Target(archs[0] if archs else None, text.get("num_hidden_layers"))
    trained = engines.trained_aux(ckpt, target=target)
    if trained.layers is None:
        raise UsageError(f"--drafter {ckpt_path}: which target layers it was trained on is unknown ({trained.how}); "
                         "give them with --layers")
    return sorted(layer + 1 for layer in trained.layers), trained.how


def read_prompts(path: Path) -> list[dict[str, Any]]:
    """The prompts file: JSON lines, each {"text": ...} or {"input_ids": [...]}, optionally with "response_ids": [...]
    (a continuation to record as it is). Raises UsageError naming the line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--prompts {path}: cannot be read ({exc.__class__.__name__})") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise UsageError(f"--prompts {path}:{n}: not a JSON object") from None
        if not isinstance(item, dict) or ("text" in item) == ("input_ids" in item):
            raise UsageError(f'--prompts {path}:{n}: give one of "text" or "input_ids"')
        if "text" in item and not isinstance(item["text"], str):
            raise UsageError(f'--prompts {path}:{n}: "text" is not a string')
        for key in ("input_ids", "response_ids"):
            ids = item.get(key)
            if ids is not None and (not isinstance(ids, list) or not ids or
                                    not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)):
                raise UsageError(f'--prompts {path}:{n}: "{key}" must be a non-empty list of token ids')
        out.append(item)
    if not out:
        raise UsageError(f"--prompts {path}: no prompt in it")
    return out


def _decoder_layers(model: Any) -> Any:
    for get in (lambda m: m.model.layers, lambda m: m.get_decoder().layers, lambda m: m.transformer.h):
        try:
            layers = get(model)
        except AttributeError:
            continue
        if layers is not None and len(layers):
            return layers
    raise UsageError("the target's decoder layers were not found (model.model.layers): record reads Llama-, Qwen- "
                     "and Mistral-style transformers models")


def load_target(target: str, device: str) -> tuple[Any, Any, dict]:
    """(model, tokenizer or None, config dict). Raises UsageError."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # record reports its own progress; errors stay one line
    hf_logging.set_verbosity_error()
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

    def _pre(self, i: int):
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            x: Any = args[0] if args else kwargs["hidden_states"]
            self.got[i] = x.detach()
        return hook

    def _post(self, module: Any, args: tuple, output: Any) -> None:
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


def _progress(items: list, on: bool) -> Iterator[tuple[int, Any]]:
    for i, item in enumerate(items):
        if on:
            print(f"\rrecord: prompt {i + 1} of {len(items)}", end="", file=sys.stderr, flush=True)
        yield i, item
    if on:
        print(f"\rrecord: {len(items)} prompts recorded{' ' * 12}", file=sys.stderr, flush=True)


def record(target: str, prompts: Path, out: Path, layers: list[int] | None = None, drafter: str | None = None,
           max_new_tokens: int = 128, device: str = "cpu", progress: bool = False) -> Recorded:
    """Record the target's states on each prompt into ``out`` (see the module). Raises UsageError."""
    if max_new_tokens < 0:
        raise UsageError(f"--max-new-tokens must be 0 or more, not {max_new_tokens}")
    if out.exists() or out.is_symlink():
        raise UsageError(f"--out {out} exists; give a new folder (record writes it whole or not at all)")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: its parent folder does not exist")
    items = read_prompts(prompts)
    import torch

    model, tokenizer, config = load_target(target, device)
    text: dict = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    n_layers = len(_decoder_layers(model))
    how = "--layers"
    if drafter is not None:
        layers, how = drafter_layers(drafter, config)
    assert layers is not None
    bad = [i for i in layers if not 0 <= i <= n_layers]
    if bad:
        raise UsageError(f"layer id {bad[0]} ({how}) is outside 0..{n_layers}: the target has {n_layers} decoder "
                         "layers (id L is the input of layer L, id N the last layer's output)")
    layers = sorted(layers)
    vocab = int(text.get("vocab_size") or model.get_output_embeddings().weight.shape[0])
    where = [f"--prompts {prompts}:{i + 1}" for i in range(len(items))]
    prepared = [prompt_ids(item, tokenizer, vocab, where[i]) for i, item in enumerate(items)]
    # a given continuation (what a server produced, "response_ids") is recorded as it is, not generated
    given = [list(item.get("response_ids") or []) for item in items]
    for i, response in enumerate(given):
        bad = [t for t in response if t >= vocab]
        if bad:
            raise UsageError(f"{where[i]}: response token id {bad[0]} is outside the target vocabulary [0, {vocab})")
    eos = getattr(model.generation_config, "eos_token_id", None)
    pad = getattr(model.generation_config, "pad_token_id", None)
    pad = pad if pad is not None else (eos[0] if isinstance(eos, list) else eos) if eos is not None else 0
    first_device = next(model.parameters()).device
    from safetensors.torch import save_file

    done = Recorded(out, layers=layers)
    remove_stale(out)
    tmp = temporary_sibling(out)
    start = time.perf_counter()
    with signals_raise():
        try:
            (tmp / STATES).mkdir(parents=True)
            writer, sink = _arrow_writer(tmp / ARROW)
            capture = _Capture(_decoder_layers(model), layers)
            try:
                for i, ids in _progress(prepared, progress):
                    x = torch.tensor([ids], device=first_device)
                    with torch.no_grad():
                        if given[i]:
                            seq = torch.tensor(ids + given[i], device=first_device)
                        elif max_new_tokens:
                            seq = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                                                 do_sample=False, pad_token_id=pad)[0]
                        else:
                            seq = x[0]
                        capture.got.clear()
                        model(seq[None])
                    states = capture.states()
                    tokens = seq.to("cpu", torch.int64)
                    if not bool(torch.isfinite(states).all()):
                        raise UsageError(f"{where[i]}: the target's states are not finite (NaN or Inf): is the "
                                         "checkpoint intact, its dtype right for --device?")
                    save_file({"hidden_states": states.to("cpu").contiguous(), "token_ids": tokens.contiguous()},
                              str(tmp / STATES / f"hs_{i}.safetensors"))
                    mask = [0] * len(ids) + [1] * (len(tokens) - len(ids))
                    _write_row(writer, tokens.tolist(), mask)
                    done.samples += 1
                    done.tokens += len(tokens)
                    done.generated += len(tokens) - len(ids)
            finally:
                capture.remove()
                writer.close()
                sink.close()
            _write_meta(tmp, done.samples)
            move_into_place(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    done.seconds = time.perf_counter() - start
    return done


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
