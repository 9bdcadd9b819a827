"""How engines and trainers count aux-layer ids, where more than one release counts alike: the rules the release
records point to (``Profile.capture``, ``Profile.ids_for``). A rule one release alone has stays in its module."""

from __future__ import annotations

from .profile import Capture, Target, input_of


def vllm_input(ids: list[int], target: Target | None) -> Capture:
    """vLLM on any target: id L is the residual stream entering layer L (the output of L-1), ids 0..N (the final output
    is captured after the last layer; vLLM 0.33.0 model_executor/models/interfaces.py:1640-1650, llama.py:427-441).
    speculators captures its training states through vLLM and counts the same way."""
    n = target.num_layers if target else None
    return Capture(input_of(sorted(set(ids))), "vLLM: id L = the input of layer L (interfaces.py:1640-1650; "
                   "sorted and de-duplicated, :1616-1620)", n)


def vllm_ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    """The ids that make a vLLM-counting release capture ``layers``: each layer's output is the next one's input."""
    return [x + 1 for x in layers]
