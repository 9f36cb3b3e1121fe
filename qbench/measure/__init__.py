"""Measure: takes built modules and the PyTorch model, and gives what they compute and how
fast: runners (``runners``), latency timing (``timing``) and its statistics (``speed``),
agreement, accuracy and SQNR (``metrics``), binomial intervals (``intervals``), the run's
typed result (``results``) and its provenance (``provenance``)."""
