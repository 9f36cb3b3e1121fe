"""``python -m qbench``: the ``qbench`` command (``cli.main.entry``)."""

from .cli.main import entry

entry()
