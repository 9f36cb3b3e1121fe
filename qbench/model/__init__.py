"""Model: takes a ``--model`` (a registry name, FILE.py:FUNCTION or FILE.pt2) and gives the
PyTorch model with its preprocessing (``zoo``), its Relax import (``frontend``, batch norms
folded by ``fold``), and its quantizable layers and observer graph (``graph``).

May import: core (the stages before it; ``tests/test_layering.py``)."""
