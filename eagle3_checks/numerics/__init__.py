"""The numeric passes over tensor data: the streaming scan, the forward pass and MLA attention (torch only inside the
modules).

This module holds what the gate asks of them before any runs, so that a header-level run imports none of the passes:
the forward comparison's tolerance (quoted by the engine checks) and whether torch is there (what a forward-level
check requires).
"""

from __future__ import annotations

import importlib.util

from ..errors import INSTALL

# Both sides run this same float32 code; a faithful conversion copies the weights bit for bit (or upcasts them
# exactly), so the logits agree exactly, and anything beyond float32 rounding of a reordered reduction is a real
# difference. 1e-5 relative (scaled to the largest logit) leaves four orders of magnitude above float32's 1.2e-7
# epsilon for accumulation over hidden sizes up to ~10^4, and sits four orders below what one bf16 rounding of a
# weight (3.9e-3) or any semantic change produces.
RTOL = 1e-5
ATOL = 1e-5

INSTALL_HINT = (f"the forward level needs torch, which is not installed: {INSTALL['forward']}; then rerun (--level "
                "header and scan run without it)")


_TORCH_STATE: list[str | None] = []


def torch_missing() -> str | None:
    """None when torch imports, else the install hint. Asked only when a forward-level check is about to run (the
    header path never imports torch)."""
    if not _TORCH_STATE:
        if importlib.util.find_spec("torch") is None:
            _TORCH_STATE.append(INSTALL_HINT)
        else:
            try:
                import torch  # noqa: F401
            except ImportError as exc:  # a broken install counts as none, with its reason
                _TORCH_STATE.append(f"{INSTALL_HINT} (import torch failed: {exc})")
            else:
                _TORCH_STATE.append(None)
    return _TORCH_STATE[0]
