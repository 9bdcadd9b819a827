"""The served walk (acceptance/walk.py) against sequences worked by hand, and its relation to the per-start average:
equal in expectation where acceptance is independent along a sequence, lower where it clusters."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle3_checks.acceptance.walk import requests, stops, walk
from eagle3_checks.engines.counting import FULL, REMAINING, Drafting, llamacpp_drafting, sglang_drafting, vllm_drafting

K3 = Drafting(3, tail=REMAINING)


def test_a_run_of_three_then_a_miss():
    # one request: prompt x[0..3], response x[4..19]; the first draft is made from row 3 (the prompt's last row)
    lead = [0] * 20
    lead[3] = 3  # row 3 drafts x[5], x[6], x[7], all right: 4 tokens, the next draft from row 7
    lead[7] = 0  # a miss: 1 token, the next draft from row 8
    got = walk(lead, [(4, 20)], K3)
    assert got.trail[:3] == [(3, 3, 3), (7, 3, 0), (8, 3, 0)]
    assert got.per_position == [1, 1, 1]
    assert got.accepted == 3


def test_the_sequence_end_cuts_the_draft():
    # response x[1..9] (9 tokens): rows 0, 4 accept everything; at row 8 one token remains, so no draft is made
    lead = [3] * 10
    got = walk(lead, [(1, 10)], K3)
    # row 0: 8 remain -> 3 drafts, 3 accepted; row 4: 4 remain -> 3 drafts; row 8: remaining 0: the walk ends
    assert got.trail == [(0, 3, 3), (4, 3, 3)]
    assert got.tokens == 9
    # 7 remain at row 0 of a request [1, 9): row 4 has 3 remaining -> the draft is cut to 2
    got = walk(lead, [(1, 9)], K3)
    assert got.trail == [(0, 3, 3), (4, 2, 2)]
    # vLLM and SGLang draft K whatever remains: the last verify step drafts 3, its acceptance bounded by the response
    got = walk(lead, [(1, 9)], Drafting(3, tail=FULL))
    assert got.trail == [(0, 3, 3), (4, 3, 2)] and got.drafted == 6


def test_the_prompt_boundary_comes_from_the_loss_mask():
    mask = [0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1]
    assert requests(mask, len(mask)) == [(4, 9), (11, 15)]
    assert requests(None, 6) == [(1, 6)]
    assert requests([1, 1, 1], 3) == [(1, 3)]  # a request has a prompt: its first token at 1 at the earliest
    lead = [1] * 15
    got = walk(lead, requests(mask, len(mask)), K3)
    # each request drafts first from its prompt's last row: [4, 9) from row 3, then 5 (7 has no token left to
    # draft); [11, 15) from row 10 (row 12 has one token left: no draft)
    assert [row for row, _, _ in got.trail] == [3, 5, 10]


def test_a_confidence_cut_off_and_a_floor():
    confidence = [[0.9, 0.9, 0.2], [0.8, 0.3, 0.9], [0.1, 0.9, 0.9]]  # step k, row j
    assert stops(confidence, 0.5) == [2, 1, 0]
    lead = [3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
    stop = [2, 1, 0, 3, 3, 3, 3, 3, 3, 3]
    got = walk(lead, [(1, 10)], Drafting(3, p_min=0.5, tail=REMAINING), stop)
    # row 0 drafts 2 (step 2 below the cut-off) and accepts 2; row 3 drafts 3
    assert got.trail[:2] == [(0, 2, 2), (3, 3, 3)]
    # a floor of 2: row 2's empty draft and row 1's single draft are dropped: plain decodes, no verify step
    got = walk(lead, [(2, 10)], Drafting(3, n_min=2, p_min=0.5, tail=REMAINING), stop)
    assert got.trail[0] == (3, 3, 3)


def test_the_launch_settings_set_the_walk():
    d = llamacpp_drafting({"serve": ["llama-server", "--spec-draft-n-max", "5", "--spec-draft-p-min", "0.75",
                                     "--spec-draft-n-min", "2"]}, 3)
    assert (d.k, d.p_min, d.n_min, d.tail) == (5, 0.75, 2, REMAINING) and d.unmodelled is None
    assert llamacpp_drafting({"serve": ["llama-server"]}, 7).k == 3  # the release's default n_max (common.h:328)
    assert llamacpp_drafting({"serve": ["llama-server", "--temp", "0.8"]}, 3).unmodelled
    assert vllm_drafting({"speculative_config": {"num_speculative_tokens": 4}}, 3).k == 4
    assert sglang_drafting({"args": {"speculative-num-steps": 2, "speculative-eagle-topk": 4}}, 3).unmodelled
    assert sglang_drafting({"args": {"speculative-num-steps": 2, "speculative-eagle-topk": 1}}, 3).unmodelled is None
    with pytest.raises(ValueError):
        vllm_drafting({"speculative_config": {"num_speculative_tokens": "many"}}, 3)


def _per_start(lead: list[int], k: int) -> float:
    starts = lead[: len(lead) - k - 1]
    return 1.0 + sum(min(x, k) for x in starts) / len(starts)


def _served(lead: list[int], k: int) -> float:
    got = walk(lead, [(1, len(lead))], Drafting(k, tail=REMAINING))
    return 1.0 + got.accepted / got.steps


@settings(max_examples=25)
@given(q=st.floats(0.05, 0.95), seed=st.integers(0, 2**16))
def test_independent_acceptance_gives_the_per_start_figure(q, seed):
    """Each draft step right with probability q, independently along the sequence: the rows the walk visits are a
    sample of every row, so the two figures agree (20,000 rows: within 0.05)."""
    rng = random.Random(seed)
    k = 3
    lead = []
    for _ in range(20_000):
        n = 0
        while n < k and rng.random() < q:
            n += 1
        lead.append(n)
    assert _served(lead, k) == pytest.approx(_per_start(lead, k), abs=0.05)


@settings(max_examples=25)
@given(easy=st.integers(8, 60), hard=st.integers(8, 60), seed=st.integers(0, 2**16))
def test_clustered_acceptance_is_counted_lower(easy, hard, seed):
    """Easy stretches (every draft right) and hard ones (none): the walk crosses an easy stretch in few verify steps
    and spends one per token in a hard one, so it reports less than the per-start average."""
    rng = random.Random(seed)
    lead: list[int] = []
    while len(lead) < 5_000:
        lead += [3] * rng.randint(easy // 2, easy) + [0] * rng.randint(hard // 2, hard)
    assert _served(lead, 3) < _per_start(lead, 3) - 0.2
