"""User-facing errors of the CLI."""


class UsageError(Exception):
    """Bad input from the user (flags, files, fields): reported on stderr with exit code 2,
    before anything is launched or written."""
