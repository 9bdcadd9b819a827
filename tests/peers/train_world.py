"""A tiny world trained on CPU: a target that has learned a small synthetic language, the states it records, and
EAGLE-3 drafters trained on those states with speculators 0.9.0's own model and loss. Run as a script (torch,
transformers and speculators stay out of the test process): ``python train_world.py OUT_DIR``.

The language: a token is a (group, member) pair, id = 16 * group + member, 256 of the 512 ids in use. The next
group is a fixed random function of the last two groups (one time in ten a random group instead), the next member
is the last member plus one. A target trained on it for a few hundred steps predicts it well, so its greedy
continuation is learnable and a drafter conditioned on its states can be right most of the time; what a drafter
learned then depends on its reading (norm placement, rope base, aux order), which is what the tests need.

OUT_DIR/target/               the target, saved by transformers (config.json, model.safetensors)
OUT_DIR/train/, OUT_DIR/test/ its states on its own greedy continuations, written as speculators 0.9.0 writes them
                              (``hs_{i}.safetensors``: ``hidden_states`` [T, 4, H], the aux layers then the last
                              layer's output before the final norm; ``token_ids`` [T])
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
LENGTH, PROMPT = 48, 8
TRAIN_SEQS, TEST_SEQS = int(os.environ.get("WORLD_SEQS", "128")), 16
ROPE_THETA = 1_000_000.0  # what every drafter's config states
K = 3
STEPS = int(os.environ.get("WORLD_STEPS", "250"))

# name -> how it is trained. "trained_rope" is the base its rotary embedding used in training, whatever its saved
# config states (SpecForge before PR #270 built base 10000 when rope_scaling was null); "steps" 0: untrained.
VARIANTS = {
    "trained": {"norm_before_residual": False, "trained_rope": ROPE_THETA, "steps": STEPS},
    # the norm placement is decided by a wide margin (alpha gains 0.28-0.57 at 250 steps): half the steps do
    "trained-nbr": {"norm_before_residual": True, "trained_rope": ROPE_THETA, "steps": STEPS // 2},
    "trained-rope10k": {"norm_before_residual": False, "trained_rope": 10000.0, "steps": STEPS},
    "untrained": {"norm_before_residual": False, "trained_rope": ROPE_THETA, "steps": 0},
}


def language(g: torch.Generator) -> torch.Tensor:
    return torch.randint(0, GROUPS, (GROUPS, GROUPS), generator=g)


def sentence(table: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    groups = [int(x) for x in torch.randint(0, GROUPS, (2,), generator=g)]
    member = int(torch.randint(0, MEMBERS, (1,), generator=g))
    out = []
    for i in range(n):
        if i >= 2:
            noise = float(torch.rand(1, generator=g)) < 0.1
            groups.append(int(torch.randint(0, GROUPS, (1,), generator=g)) if noise
                          else int(table[groups[-2], groups[-1]]))
        out.append(groups[i] * MEMBERS + (member + i) % MEMBERS)
    return torch.tensor(out)


def train_target(table: torch.Tensor, g: torch.Generator) -> LlamaForCausalLM:
    cfg = LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, vocab_size=VOCAB, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
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
        aux = torch.stack([hs[i][0] for i in AUX], dim=1)  # [T, 3, H]
        out.append({"token_ids": ids.clone(), "aux": aux, "pre": captured["pre"][0]})
    hook.remove()
    return out


def write(samples: list[dict], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(samples):
        hs = torch.cat([s["aux"], s["pre"][:, None]], dim=1).contiguous()
        save_file({"hidden_states": hs, "token_ids": s["token_ids"]}, str(folder / f"hs_{i}.safetensors"))


def drafter(target: LlamaForCausalLM, used: torch.Tensor, nbr: bool, rope: float) -> Eagle3DraftModel:
    layer = LlamaConfig(hidden_size=HIDDEN, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                        intermediate_size=128, vocab_size=VOCAB, num_hidden_layers=1, rms_norm_eps=1e-6,
                        max_position_embeddings=256, rope_theta=rope)
    layer._attn_implementation = "eager"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=int(used.numel()), norm_before_residual=nbr,
        eagle_aux_hidden_state_layer_ids=list(AUX),
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", default_proposal_method="greedy",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=K)],
            verifier=VerifierConfig(name_or_path="example-org/tiny-verifier", architectures=["LlamaForCausalLM"])))
    torch.manual_seed(1)
    model = Eagle3DraftModel(config)
    with torch.no_grad():  # what load_verifier_weights does from the Hub, from the target in hand
        model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        model.verifier_norm.weight.copy_(target.model.norm.weight)
        head = target.lm_head.weight[used]
        model.verifier_lm_head.weight.copy_(head)
        model.lm_head.weight.copy_(head)
        model.t2d.zero_()
        model.t2d[used] = True
        model.d2t.copy_(used - torch.arange(used.numel()))
    model.embed_tokens.weight.requires_grad_(False)
    return model


def batches(samples: list[dict], per: int):
    """speculators' packing: ``per`` shifted samples (models/eagle3/data.py, shift_batch) in one row, each its own
    document."""
    for start in range(0, len(samples), per):
        chunk = samples[start:start + per]
        t = chunk[0]["token_ids"].shape[0] - 1
        yield {"hidden_states": torch.cat([s["aux"][:-1].flatten(1) for s in chunk])[None],
               "input_ids": torch.cat([s["token_ids"][1:] for s in chunk])[None],
               "document_ids": torch.arange(len(chunk)).repeat_interleave(t)[None],
               "position_ids": torch.arange(1, t + 1).repeat(len(chunk))[None],
               "verifier_last_hidden_states": torch.cat([s["pre"][1:] for s in chunk])[None]}


def train(model: Eagle3DraftModel, samples: list[dict], steps: int, g: torch.Generator) -> None:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    done = 0
    while done < steps:
        order = torch.randperm(len(samples), generator=g).tolist()
        for batch in batches([samples[i] for i in order], 8):
            _, loss, _ = model(**batch, ttt_steps=K, loss_config={"kl_div": (kl_div_loss, 1.0)})
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done == steps:
                break
    model.eval()


def metrics(model: Eagle3DraftModel, samples: list[dict]) -> dict[str, float]:
    """speculators' own full_acc_k / cond_acc_k (sums and totals) over the test samples, one sample at a time."""
    total: dict[str, float] = {}
    for batch in batches(samples, 1):
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
    used = torch.tensor(sorted({int(t) for s in train_set + test_set for t in s["token_ids"]}
                               | {gr * MEMBERS + m for gr in range(GROUPS) for m in range(MEMBERS)}))
    report = {}
    for name, v in VARIANTS.items():
        model = drafter(target, used, v["norm_before_residual"], v["trained_rope"])
        train(model, train_set, v["steps"], g)
        report[name] = metrics(model, test_set)
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
