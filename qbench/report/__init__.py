"""Report: takes a ``RunResult`` (``result``: the run's typed result, report.json) and gives
what people and machines read: the assembled report (``assemble``), its tables and lines
(``tables``, ``lines``), report.md and the console (``markdown``), report.html with figures
(``html``, ``figures``), the diagnosis' record and tables (``diagnosis``), and the report folder,
written atomically (``write``).

May import: core, model, data, calibration, quantize, compile, measure, signoff (the stages
before it; ``tests/test_layering.py``)."""
