"""What a drafter family is (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...fast_dataclass import dataclass

# whether an expected tensor must be there: always, never necessarily, or when a config flag asks for it
REQUIRED, OPTIONAL, CONDITIONAL = "required", "optional", "conditional"

# add(role, shape, dims, presence=REQUIRED, reason="") as expected_tensors defines it
Add = Callable[..., None]


@dataclass(frozen=True)
class Family:
    name: str  # "llama", "mla"
    title: str  # for messages: "Llama (or Qwen3) decoder layers"
    layer_suffixes: tuple[str, ...]  # the tensors of one decoder layer (after "layers.N.")
    config_fields: tuple[str, ...]  # the config fields that size or change this family's layer
    # attention(dims, prefix "layers.N.", layer input width, its symbol, add): the layer's attention tensors
    attention: Callable[[Any, str, int | None, str, Add], None]
    # the engine classes of the family, for messages
    classes: str = ""


def product(*xs: int | None) -> int | None:
    """The product of sizes, or None when one is unknown (a config field missing)."""
    out = 1
    for x in xs:
        if x is None:
            return None
        out *= x
    return out
