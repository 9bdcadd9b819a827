"""The numeric side of the gate: tensor scans and the drafter forward passes (torch only inside the modules)."""
