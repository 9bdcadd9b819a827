"""The numeric passes over tensor data: the streaming scan and the forward pass (torch only here)."""
