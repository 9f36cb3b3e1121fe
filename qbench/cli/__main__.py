"""``python -m qbench.cli``: the ``qbench`` command."""

from .main import entry

entry()
