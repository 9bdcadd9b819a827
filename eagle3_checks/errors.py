"""Errors that end a command before any check runs (exit code 2)."""


class UsageError(Exception):
    """Bad options, or a checkpoint path that cannot be a checkpoint at all (exit code 2).

    Everything wrong *inside* a checkpoint that exists is a finding instead (exit code 1).
    """

    exit_code = 2
