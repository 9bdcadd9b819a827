"""Drafter families: the kind of decoder layer a drafter has, and everything that follows from it.

A family defines, for its decoder layer: the tensor roles (the suffixes :func:`~eagle3_checks.drafter.layout.parse_name`
maps), the expected shapes from the config (:func:`Family.attention`, called by
:func:`~eagle3_checks.drafter.expected.expected_tensors` for each layer), and the config fields that matter to it, all
torch-free; how the forward pass computes its attention is the family's entry in
:data:`eagle3_checks.numerics.family_attention.ATTENTION` (torch). Everything outside the attention (fc over the aux
states, the layer norms,
the MLP, the final norm, lm_head and the vocabulary mapping) is shared by every family.

* ``llama`` (:mod:`.llama`): Llama decoder layers, and Qwen3 layers (the same plus per-head q/k norms).
* ``mla`` (:mod:`.mla`): DeepSeek multi-latent attention (Kimi-K2.5 / K2.6 ``Eagle3DeepseekV2ForCausalLM``).

Which family a checkpoint is: :func:`~eagle3_checks.drafter.layout.drafter_family` (from its config, else its tensor
names). Which families an engine release reads: its profile (``Profile.families``). A new family is one module here,
listed in :data:`FAMILIES`, its attention in :mod:`eagle3_checks.numerics.family_attention`, its readings in the
engine modules, and its tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..layout import LLAMA, MLA
from . import llama, mla
from .base import Family

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint

FAMILIES: dict[str, Family] = {LLAMA: llama.FAMILY, MLA: mla.FAMILY}


def family(name: str) -> Family:
    return FAMILIES[name]


def of_checkpoint(ckpt: Checkpoint) -> Family:
    """The family of an opened checkpoint (its config, else its tensor names)."""
    return FAMILIES[ckpt.family]


__all__ = ["FAMILIES", "Family", "family", "of_checkpoint", "LLAMA", "MLA"]
