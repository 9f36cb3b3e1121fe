"""Core: what every stage shares and no stage owns: errors (``errors``), atomic writes of
files and folders (``atomic``), progress bars and stage messages (``progress``), wording
(``words``), and TVM RPC sessions to remote devices (``remote``).

May import: nothing of qbench (the stages before it; ``tests/test_layering.py``)."""
