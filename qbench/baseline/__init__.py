"""Baselines: keep accepted runs (``store``, ``validate``), compare a run with one
(``stats``, ``comparison``), and show stored runs over time (``history``); the commands are
``cli.baseline``.

After asv (airspeed velocity): results stored per machine as versioned JSON with their raw
samples; a change counts only past a ratio factor and when statistically significant; a
changed definition is "not comparable".

May import: core, model, data, calibration, quantize, compile, measure, signoff, report (the
stages before it; ``tests/test_layering.py``)."""
