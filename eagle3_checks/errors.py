"""Errors that end a command before any check runs (exit code 2)."""


class UsageError(Exception):
    """Bad options, or a checkpoint path that cannot be a checkpoint at all (exit code 2).

    Everything wrong *inside* a checkpoint that exists is a finding instead (exit code 1).
    """

    exit_code = 2


# How to install what an optional level needs, for every hint the commands print. eagle3-checks is installed from its
# checkout (it is on no package index), and torch's CPU build comes from PyTorch's own index: on Linux a plain
# `pip install torch` resolves to the CUDA build (several GB), which the forward level does not need.
TORCH_CPU = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
INSTALL = {
    "forward": f"{TORCH_CPU} (the CPU build, about 200 MB), then pip install '.[forward]' in the eagle3-checks "
               "checkout",
    "hub": "pip install '.[hub]' in the eagle3-checks checkout (huggingface_hub)",
}
