"""The ``qbench`` command line: ``main`` (parser, dispatch, exit codes) and one module per
command (``run``, ``tune``, ``build``, ``diagnose``, ``sweep``, ``layers``, ``models``,
``baseline``), over the shared option groups (``options``; the sign-off flags come from
``signoff.limits``) and ``runopts`` (parsed arguments to ``RunOptions``, which checks them).

May import: core, model, data, calibration, quantize, compile, measure, signoff, report,
baseline, diagnose, pipeline (the stages before it; ``tests/test_layering.py``)."""
