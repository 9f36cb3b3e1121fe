"""Compile: takes a Relax graph (FP32 or INT8) and a target dict, and gives a built module:
targets (``targets``, their CPU ``features``), the lowering pipeline (``lowering``) with
qbench's own kernels (``kernels``), builds (``build``), and MetaSchedule tuning with its
databases (``tuning``, ``tuner``, ``recordcheck``, ``dbfiles``; shipped records in
``pretuned/``); what a run's builds applied and chose, as the report holds it (``info``).

May import: core, model, data, calibration, quantize (the stages before it;
``tests/test_layering.py``)."""
