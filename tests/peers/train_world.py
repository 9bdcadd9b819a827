"""A tiny world trained on CPU: a target that has learned a small synthetic language, the states it records, and
EAGLE-3 drafters trained on those states with speculators 0.9.0's own model and loss. Run as a script (torch,
transformers and speculators stay out of the test process): ``python train_world.py OUT_DIR``.

The language: a token is a (group, member) pair, id = 16 * group + member, 256 of the 512 ids in use. The next
group is a fixed random function of the last two groups (one time in ten a random group instead); the members repeat
with period PERIOD (the first PERIOD random, then each the member PERIOD tokens back). A target trained on it for a
few hundred steps predicts it well, so its greedy continuation is learnable and a drafter conditioned on its states
can be right most of the time. The period makes the drafter attend by position: a drafted token's member sits
PERIOD - 1 tokens behind the position that drafts it, reached by attention, so what it learned depends on its
rotary base as well as on its norm placement and aux order (with a member that was the last plus one, every reading
of the base drafted alike: llama-server counted 3.547 for the rope-base mutant against 3.554 for the trained drafter;
with the period, 2.241 against 3.357, tests/conformance/served/).

OUT_DIR/target/               the target, saved by transformers (config.json, model.safetensors)
OUT_DIR/target-broad/         the same target with its final norm scaled by BROAD: the same greedy continuations and
                              recorded states (taken before the final norm), broad next-token distributions (alpha
                              barely moves between readings while the acceptance length does)
OUT_DIR/train/, OUT_DIR/test/ its states on its own greedy continuations, written as speculators 0.9.0 writes them
                              (``hs_{i}.safetensors``: ``hidden_states`` [T, 4, H], the aux layers then the last
                              layer's output before the final norm; ``token_ids`` [T])
OUT_DIR/test-broad/           the test states at the broad drafters' aux ids (AUX_BROAD)
OUT_DIR/heldout/              HELDOUT more test sequences (the coverage of the intervals is held to them)
OUT_DIR/drafters/NAME/        each drafter of VARIANTS, saved by speculators' save_pretrained
OUT_DIR/metrics.json          speculators' own full_acc_k / cond_acc_k of each drafter on the test states (its
                              forward pass, teacher-forced, K = 3)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from safetensors.torch import save_file
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.losses.eager import kl_div_loss  # (the fused loss needs Triton)
from speculators.models.eagle3 import Eagle3SpeculatorConfig
from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.proposals.greedy import GreedyTokenProposalConfig
from transformers import LlamaConfig, LlamaForCausalLM

GROUPS, MEMBERS, VOCAB = 16, 16, 512
HIDDEN, LAYERS = 64, 4
AUX = (1, 2, 3)  # HF hidden_states[i]: the residual stream entering layer i (vLLM's count)
# the broad drafters' aux ids: the embeddings, the middle and the last layer's output (id 4, before the final norm),
# states far enough apart that fc's block order matters to what the drafter computes
AUX_BROAD = (0, 2, 4)
LENGTH, PROMPT = 48, 8
PERIOD = 6  # the members' period: within the prompt, and within WINDOW (the windowed drafter still reaches it)
TRAIN_SEQS, TEST_SEQS, HELDOUT = int(os.environ.get("WORLD_SEQS", "128")), 16, 128
BROAD = 0.25  # target-broad's final norm: the target's scaled by this (its logits divided by 4)
WINDOW = 8  # the sliding window "trained-window" is trained with (speculators' default layer_types, made short)
ROPE_THETA = 1_000_000.0  # what every drafter's config states
# the target's learning rate. At 3e-3 the periodic language left its states at RMS 0.8-1.7, where fc's output is
# near the unit scale hidden_norm gives it and norm_before_residual barely changes what a drafter computes (measured:
# the flipped reading's acceptance length 2.647 against 2.726); at 1e-3 its states sit at RMS 0.10-0.20 (the target's
# loss 1.81 against 2.27) and both the norm placement and the rotary base decide a drafter's accuracy (speculators'
# full_acc_0 of the trained drafter 0.816; read with base 1e4, 0.565; with the norm flipped, 0.543)
TARGET_LR = 1e-3
K = 3
STEPS = int(os.environ.get("WORLD_STEPS", "250"))

# name -> how it is trained. "trained_rope" is the base its rotary embedding used in training, whatever its saved
# config states (SpecForge before PR #270 built base 10000 when rope_scaling was null); "steps" 0: untrained;
# "broad": trained against target-broad's distributions; "window": trained with sliding-window attention (speculators'
# train CLI default, layer_types ["sliding_attention"], here of WINDOW tokens so that 48-token sequences exceed it).
VARIANTS = {
    "trained": {"norm_before_residual": False, "trained_rope": ROPE_THETA, "steps": STEPS},
    # the norm placement is decided by a wide margin (alpha gains 0.28-0.57 at 250 steps): half the steps do
    "trained-nbr": {"norm_before_residual": True, "trained_rope": ROPE_THETA, "steps": STEPS // 2},
    "trained-rope10k": {"norm_before_residual": False, "trained_rope": 10000.0, "steps": STEPS},
    "untrained": {"norm_before_residual": False, "trained_rope": ROPE_THETA, "steps": 0},
    "broad": {"norm_before_residual": False, "trained_rope": ROPE_THETA, "steps": STEPS, "broad": True},
    "broad-rope10k": {"norm_before_residual": False, "trained_rope": 10000.0, "steps": STEPS, "broad": True},
    "trained-window": {"norm_before_residual": False, "trained_rope": ROPE_THETA, "steps": STEPS // 2,
                       "window": WINDOW},
}


def language(g: torch.Generator) -> torch.Tensor:
    return torch.randint(0, GROUPS, (GROUPS, GROUPS), generator=g)


def sentence(table: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    groups = [int(x) for x in torch.randint(0, GROUPS, (2,), generator=g)]
    members = [int(x) for x in torch.randint(0, MEMBERS, (PERIOD,), generator=g)]
    out = []
    for i in range(n):
        if i >= 2:
            noise = float(torch.rand(1, generator=g)) < 0.1
            groups.append(int(torch.randint(0, GROUPS, (1,), generator=g)) if noise
                          else int(table[groups[-2], groups[-1]]))
        if i >= PERIOD:
            members.append(members[i - PERIOD])
        out.append(groups[i] * MEMBERS + members[i])
    return torch.tensor(out)


def train_target(table: torch.Tensor, g: torch.Generator) -> LlamaForCausalLM:
    cfg = LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, vocab_size=VOCAB, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=TARGET_LR)
    for _ in range(300):
        batch = torch.stack([sentence(table, LENGTH, g) for _ in range(32)])
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"target: loss {float(loss.detach()):.3f}", file=sys.stderr)
    return model.eval()


def record(model: LlamaForCausalLM, table: torch.Tensor, n: int, g: torch.Generator) -> list[dict]:
    """The target's greedy continuations of n prompts and its states on them."""
    prompts = torch.stack([sentence(table, PROMPT, g) for _ in range(n)])
    with torch.no_grad():
        seqs = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_length=LENGTH, do_sample=False,
                              pad_token_id=0)
    out = []
    captured: dict = {}
    hook = model.model.layers[-1].register_forward_hook(  # the last layer's output, before the final norm
        lambda m, a, o: captured.update(pre=o[0] if isinstance(o, tuple) else o))
    for ids in seqs:
        with torch.no_grad():
            hs = model(ids[None], output_hidden_states=True).hidden_states
        pre = captured["pre"][0]
        state = [hs[i][0] for i in range(LAYERS)] + [pre]  # id i < LAYERS: hidden_states[i]; id LAYERS: before the norm
        out.append({"token_ids": ids.clone(), "aux": torch.stack([state[i] for i in AUX], dim=1),  # [T, 3, H]
                    "aux_broad": torch.stack([state[i] for i in AUX_BROAD], dim=1), "pre": pre})
    hook.remove()
    return out


def write(samples: list[dict], folder: Path, key: str = "aux") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(samples):
        hs = torch.cat([s[key], s["pre"][:, None]], dim=1).contiguous()
        save_file({"hidden_states": hs, "token_ids": s["token_ids"]}, str(folder / f"hs_{i}.safetensors"))


def drafter(target: LlamaForCausalLM, used: torch.Tensor, nbr: bool, rope: float, norm_scale: float = 1.0,
            window: int | None = None, aux: tuple[int, ...] = AUX) -> Eagle3DraftModel:
    layer = LlamaConfig(hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                        intermediate_size=128, vocab_size=VOCAB, num_hidden_layers=1, rms_norm_eps=1e-6,
                        max_position_embeddings=256, rope_theta=rope)
    if window is not None:  # as speculators' train CLI writes it (train/cli.py:212-230)
        layer.layer_types, layer.sliding_window, layer.use_sliding_window = ["sliding_attention"], window, True
    layer._attn_implementation = "eager"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=int(used.numel()), norm_before_residual=nbr,
        eagle_aux_hidden_state_layer_ids=list(aux),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", default_proposal_method="greedy",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=K)],
            verifier=VerifierConfig(name_or_path="example-org/tiny-verifier", architectures=["LlamaForCausalLM"])))
    torch.manual_seed(1)
    model = Eagle3DraftModel(config)
    with torch.no_grad():  # what load_verifier_weights does from the Hub, from the target in hand
        model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        model.verifier_norm.weight.copy_(target.model.norm.weight * norm_scale)
        head = target.lm_head.weight[used]
        model.verifier_lm_head.weight.copy_(head)
        model.lm_head.weight.copy_(head)
        model.t2d.zero_()
        model.t2d[used] = True
        model.d2t.copy_(used - torch.arange(used.numel()))
    model.embed_tokens.weight.requires_grad_(False)
    return model


def batches(samples: list[dict], per: int, key: str = "aux"):
    """speculators' packing: ``per`` shifted samples (models/eagle3/data.py, shift_batch) in one row, each its own
    document."""
    for start in range(0, len(samples), per):
        chunk = samples[start:start + per]
        t = chunk[0]["token_ids"].shape[0] - 1
        yield {"hidden_states": torch.cat([s[key][:-1].flatten(1) for s in chunk])[None],
               "input_ids": torch.cat([s["token_ids"][1:] for s in chunk])[None],
               "document_ids": torch.arange(len(chunk)).repeat_interleave(t)[None],
               "position_ids": torch.arange(1, t + 1).repeat(len(chunk))[None],
               "verifier_last_hidden_states": torch.cat([s["pre"][1:] for s in chunk])[None]}


def train(model: Eagle3DraftModel, samples: list[dict], steps: int, g: torch.Generator, key: str = "aux") -> None:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    done = 0
    while done < steps:
        order = torch.randperm(len(samples), generator=g).tolist()
        for batch in batches([samples[i] for i in order], 8, key):
            _, loss, _ = model(**batch, ttt_steps=K, loss_config={"kl_div": (kl_div_loss, 1.0)})
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done == steps:
                break
    model.eval()


def metrics(model: Eagle3DraftModel, samples: list[dict], key: str = "aux") -> dict[str, float]:
    """speculators' own full_acc_k / cond_acc_k (sums and totals) over the test samples, one sample at a time."""
    total: dict[str, float] = {}
    for batch in batches(samples, 1, key):
        with torch.no_grad():
            _, _, m = model(**batch, ttt_steps=K, loss_config={"kl_div": (kl_div_loss, 1.0)})
        for k, v in m.items():
            if k.endswith(("_sum", "_total")):
                total[k] = total.get(k, 0.0) + float(v)
    return total


def main(out: Path) -> None:
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    t0 = time.time()
    g = torch.Generator().manual_seed(0)
    table = language(g)
    target = train_target(table, g)
    target.save_pretrained(out / "target")
    train_set, test_set = record(target, table, TRAIN_SEQS, g), record(target, table, TEST_SEQS, g)
    write(train_set, out / "train")
    write(test_set, out / "test")
    write(test_set, out / "test-broad", "aux_broad")  # the broad drafters' states (AUX_BROAD)
    write(record(target, table, HELDOUT, torch.Generator().manual_seed(7)), out / "heldout")
    with torch.no_grad():
        target.model.norm.weight.mul_(BROAD)
    target.save_pretrained(out / "target-broad")
    with torch.no_grad():
        target.model.norm.weight.div_(BROAD)
    used = torch.tensor(sorted({int(t) for s in train_set + test_set for t in s["token_ids"]}
                               | {gr * MEMBERS + m for gr in range(GROUPS) for m in range(MEMBERS)}))
    report = {}
    for name, v in VARIANTS.items():
        key = "aux_broad" if v.get("broad") else "aux"
        model = drafter(target, used, v["norm_before_residual"], v["trained_rope"],
                        BROAD if v.get("broad") else 1.0, v.get("window"), AUX_BROAD if v.get("broad") else AUX)
        train(model, train_set, v["steps"], g, key)
        report[name] = metrics(model, test_set, key)
        model.save_pretrained(out / "drafters" / name)
        cfg_path = out / "drafters" / name / "config.json"
        cfg = json.loads(cfg_path.read_text())
        layer = cfg["transformer_layer_config"]  # what the config states, whatever trained
        layer["rope_theta"] = ROPE_THETA
        if isinstance(layer.get("rope_parameters"), dict):
            layer["rope_parameters"]["rope_theta"] = ROPE_THETA
        cfg_path.write_text(json.dumps(cfg, indent=2))
        acc = report[name]["full_acc_0_sum"] / report[name]["full_acc_0_total"]
        print(f"{name}: step-0 accuracy {acc:.3f} ({time.time() - t0:.0f} s)", file=sys.stderr)
    (out / "metrics.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
