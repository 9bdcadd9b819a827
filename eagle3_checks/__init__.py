"""eagle3-checks: decide whether an EAGLE-3 draft model checkpoint is safe to serve.

Importing the package is cheap (no numpy, no torch). The main entry points:

* :func:`eagle3_checks.gate.gate` - run every check on a checkpoint directory;
* :func:`eagle3_checks.drafter.checkpoint.open_checkpoint` - the normalized view of a checkpoint;
* :mod:`eagle3_checks.registry` - what a check is (``check`` registers one), :func:`eagle3_checks.gate.all_checks`
  every check the gate runs;
* the ``eagle3-checks`` command and the pytest plugin (``pytest --eagle3-ckpt=PATH``).
"""

__version__ = "0.1.0"
