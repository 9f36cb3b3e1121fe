"""Exception hierarchy: one root, and a user-facing error the CLI prints without a traceback."""


class QBenchError(Exception):
    """Root of every error qbench raises on purpose."""


class UserError(QBenchError):
    """Bad input from the user (a flag, a file, a model): CLI exit code 2, no traceback."""


class UnsupportedModelError(UserError):
    """The model cannot be imported into Relax (training mode, unsupported ATen op)."""
