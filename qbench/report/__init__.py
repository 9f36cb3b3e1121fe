"""Report: takes a ``RunResult`` and gives what people and machines read: the assembled
report (``assemble``), its tables and lines (``tables``, ``lines``), report.md and the
console (``markdown``), report.html with figures (``html``, ``figures``), the diagnosis'
tables (``diagnosis``), and the report folder, written atomically (``write``)."""
