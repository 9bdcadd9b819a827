"""Recorded states for a drafter without a target: random aux states, each next token the drafter's own step-0
choice under its trainer's reading. The drafter's trainer reading then accepts every step 0 on them, so a reading
that computes anything else loses acceptance there. The checks' examples use it (``eagle3-checks explain`` gates
them on the embedded example drafter, which has no target); real gating uses the data a trainer recorded.

Written as speculators 0.9.0 writes its states (``hs_{i}.safetensors``: ``hidden_states`` [T, A+1, Ht] float32,
the last slot the final state, unused with token labels; ``token_ids`` int64 [T]).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import engines
from ..numerics.draft_steps import Inputs, Weights, run
from ..storage.safetensors import from_numpy, write_safetensors

if TYPE_CHECKING:
    from ..drafter.checkpoint import Checkpoint

SAMPLES, LENGTH = 10, 32  # 10 x (32 - 1 - K) = 280 positions for K = 3: enough for the resolver to decide


def write_self_labelled(ckpt: Checkpoint, folder: Path, samples: int = SAMPLES, length: int = LENGTH,
                        seed: int = 0) -> Path:
    import torch

    reading = engines.trainer(ckpt)
    weights = Weights(ckpt, "cpu")
    assert reading.target_hidden_size is not None and reading.vocab_size is not None
    a, ht = reading.num_aux, reading.target_hidden_size
    g = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(samples):
        aux = torch.randn(length, a * ht, generator=g)
        ids = [int(t) for t in torch.randint(0, reading.vocab_size, (2,), generator=g)]
        for j in range(length - 2):  # row j (aux j, token j+1, position j+1) drafts token j+2
            inputs = Inputs(aux_hidden_states=aux[:j + 1], input_ids=torch.tensor(ids[1:j + 2]),
                            position_ids=torch.arange(1, j + 2))
            ids.append(int(run(reading, weights, inputs, 1)[0][-1].argmax()))
        states = torch.cat([aux.reshape(length, a, ht), torch.randn(length, 1, ht, generator=g)], dim=1)
        write_safetensors(folder / f"hs_{i}.safetensors",
                          {"hidden_states": from_numpy(states.numpy()),
                           "token_ids": from_numpy(torch.tensor(ids, dtype=torch.int64).numpy())})
    return folder
