"""What a finding rests on: its basis, strongest first (the lowest layer: every other module may name them).

``read``: the checkpoint, the files beside it, the user (``--trainer``, ``--aux-convention``) or the released
package's source state it; ``recorded``: an engine release's own code did it, recorded (the conformance recordings,
or the installed engine judging live); ``measured``: the user's data measured it (the acceptance level);
``inferred``: drawn from named evidence that does not state it (the finding names that evidence); ``assumed``: a
default or a convention nothing confirmed. Only the first three can carry an error, and only they are what ``fix``
applies; an inferred or assumed finding is at most a warning and says what would settle it.
"""

READ, RECORDED, MEASURED, INFERRED, ASSUMED = "read", "recorded", "measured", "inferred", "assumed"
BASES = (READ, RECORDED, MEASURED, INFERRED, ASSUMED)
KNOWN = (READ, RECORDED, MEASURED)  # the bases an error and an applied fix need


def weakest(*bases: str | None) -> str:
    """The weakest of several bases a finding rests on together (None: not part of it)."""
    given = [b for b in bases if b]
    return max(given, key=BASES.index) if given else READ
