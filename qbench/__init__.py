"""qbench: post-training INT8 quantization and accuracy validation for Apache TVM Relax.

The stages, in the order data flows (each a package; a stage imports only earlier ones and
``core``, which ``tests/test_layering.py`` checks):

    model -> data -> calibration -> quantize -> compile -> measure -> signoff -> report
    -> baseline -> diagnose -> pipeline -> cli

The command line is ``qbench`` (``cli.main.entry``); from Python, ``pipeline.run(opts)``
with a ``pipeline.RunOptions`` gives a ``report.result.RunResult``.
"""

__version__ = "0.1.0"
