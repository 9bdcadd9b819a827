"""The built-in checks. Importing this package registers them, in report order.

Each module holds one concern: ``files`` (integrity), ``keys``, ``shapes``, ``dtypes``,
``vocab`` (d2t/t2d), ``config`` (config semantics), ``target`` (the verifier's config),
``engine`` (what each serving engine would do), ``reference`` (diff against a reference spec), ``scan`` (every
weight's values, streamed), ``forward`` (forward-pass equivalence, needs torch), ``acceptance`` (each reading's
acceptance on recorded target states, and the semantics the weights were trained with; needs torch and --data).
"""

# The import order is the registration order, which is the report order: not to be sorted.
# isort: off
from . import files, keys, shapes, dtypes, vocab, config, target, engine, reference, scan, forward, acceptance  # noqa: F401
# isort: on
