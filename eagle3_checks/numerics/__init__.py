"""The numeric passes over tensor data: the streaming scan, the forward pass and MLA attention (torch only inside the
modules)."""
