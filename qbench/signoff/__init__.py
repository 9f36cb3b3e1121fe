"""Sign-off: takes the measured results and limits, and gives the verdict: the checks and
their limits (``checks``) and the per-model, per-target policy file (``policy``)."""
