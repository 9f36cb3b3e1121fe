"""Core: what every stage shares and no stage owns: errors (``errors``), atomic writes of
files and folders (``atomic``), progress bars and stage messages (``progress``), wording
(``words``), TVM RPC sessions to remote devices (``remote``), the valid range of a numeric
option (``bounds``), and what every typed part of report.json reads itself with
(``schema``).

May import: nothing of qbench (the stages before it; ``tests/test_layering.py``)."""
