"""Sign-off: takes the measured results and the limits, and gives the verdict (``verdict``:
each check and the verdict as report.json holds them). ``limits`` declares each limit once
(name, flag, default, unit, valid range, help); ``checks`` holds the checks; ``policy`` the
per-model, per-target policy file.

May import: core, model, data, calibration, quantize, compile, measure (the stages before
it; ``tests/test_layering.py``)."""
